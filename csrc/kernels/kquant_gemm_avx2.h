/* kquant_gemm_avx2.h - the AVX2 and AVX-VNNI K-quant GEMM body (q4k/, q5k/, q6k/
 * *_gemm_*x8_avx2.c, *_avx_vnni.c): one body, the type a compile-time constant, compiled once
 * per ISA. Include only from translation units compiled with -mavx2 -mfma (and -mavxvnni for
 * the VNNI ones).
 *
 * kquant_gemm_avx512.h's outer-product GEMM on 256-bit vectors: per tile of 8 weight rows and
 * block the values expanded once into an L1 scratch [k / 4][row][4 bytes] (lane r = row r's
 * unsigned values 4 k4 .. 4 k4 + 3), then IFKY_MR activation rows at a time multiply it by
 * their broadcast 4-byte groups into one int32 vector per (activation row, sub-block), no
 * horizontal reduction. Under AVX-VNNI the u8 x s8 product-sums are VPDPBUSD, one int32
 * vector per sub-block, scaled per lane by VPMULLD. Under AVX2 VPMADDUBSW pairs are added in
 * int16 over as many scratch vectors as the type's values allow without overflow, then one
 * VPMADDWD by the sub-block's scale as an int16 pair gives the scaled int32 sums (no ones
 * multiply, no VPMULLD): the same exact integers. The mins / Q6_K's -32 x scale x sum(x) come
 * from VPMADDWD against the broadcast int16 pairs of the activations' 16-value sums; then the
 * scalar kernel's float step in block order, lane-wise (the running sums live in out between
 * blocks). */
#ifndef IF_KQUANT_GEMM_AVX2_H
#define IF_KQUANT_GEMM_AVX2_H

#include "kquant_avx2.h"

/* Activation rows per pass over a block's scratch (16 ymm registers: 2 per row). */
#define IFKY_MR 4

enum { IFKY_Q4K = 0, IFKY_Q5K = 1, IFKY_Q6K = 2 };

typedef struct ifky_gblk {
    __m256i w[64];  /* [k / 4][row][4 bytes]: the unsigned values */
    __m256i sc[16]; /* lane r: row r's scale of sub-block s */
    __m256i c[8];   /* lane r: the int16 pair multiplying the activations' sums 2p, 2p + 1 */
    __m256i sc2[16]; /* AVX2: lane r = sc[s] as an int16 pair, VPMADDWD's multiplier */
    __m256 d, dmin; /* lane r: row r's steps */
} ifky_gblk;

/* Dwords 4 (off / 16) .. + 3 of the 8 rows' blocks: y[j] lane r = dword j of the 16 bytes at
 * rows[r] + off (two rows per vector, one per 128-bit lane, then a 4 x 4 transpose in lanes). */
IFY_INLINE void ifkyg_t4(const uint8_t *const rows[8], size_t off, __m256i y[4]) {
    __m256i z[4];
    IFY_UNROLL
    for (int i = 0; i < 4; i++)
        z[i] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(rows[i] + off))),
            _mm_loadu_si128((const __m128i *)(const void *)(rows[i + 4] + off)), 1);
    const __m256i a0 = _mm256_unpacklo_epi32(z[0], z[1]), a1 = _mm256_unpackhi_epi32(z[0], z[1]);
    const __m256i a2 = _mm256_unpacklo_epi32(z[2], z[3]), a3 = _mm256_unpackhi_epi32(z[2], z[3]);
    y[0] = _mm256_unpacklo_epi64(a0, a2);
    y[1] = _mm256_unpackhi_epi64(a0, a2);
    y[2] = _mm256_unpacklo_epi64(a1, a3);
    y[3] = _mm256_unpackhi_epi64(a1, a3);
}

IFY_INLINE __m256i ifkyg_u8(__m256i v, int s) {
    return _mm256_and_si256(_mm256_srli_epi32(v, 8 * (s & 3)), _mm256_set1_epi32(0xFF));
}
IFY_INLINE __m256i ifkyg_s8(__m256i v, int s) {
    return _mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * (s & 3)), 24);
}
/* Lane r: the low 16 bits of lo's lane r, then hi's as the high half (an int16 pair for
 * VPMADDWD). */
IFY_INLINE __m256i ifkyg_pair16(__m256i lo, __m256i hi) {
    return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xFFFF)),
                           _mm256_slli_epi32(hi, 16));
}
IFY_INLINE __m256i ifkyg_mv(__m256i v, int from, int to) {
    return from <= to ? _mm256_slli_epi32(v, to - from) : _mm256_srli_epi32(v, from - to);
}

/* ifkyg_t4's dwords from an 8-row group's block (if_kq_pack_x8): already in place. */
IFY_INLINE void ifkyg_x8(const uint8_t *blk, size_t off, __m256i y[4]) {
    IFY_UNROLL
    for (int i = 0; i < 4; i++)
        y[i] = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 8 * off + 32 * (size_t)i));
}

/* Q4_K / Q5_K (see kquant_gemm_avx512.h's ifkg_expand_q45); x8: Q4_K's block b of the 8-row
 * group at rows[0] (ifky_rows puts the group's start there). */
IFY_INLINE void ifkyg_expand_q45(ifky_gblk *B, const uint8_t *const rows[8], size_t b,
                                 const int five, const int x8) {
    const size_t bb = five ? IF_Q5K_BLOCK_BYTES : IF_Q4K_BLOCK_BYTES, qoff = five ? 48 : 16;
    const uint8_t *blk[8];
    const uint8_t *grp = rows[0] + 8 * b * bb;
    _Alignas(16) uint16_t dh[8], mh[8];
    for (int r = 0; r < 8; r++) {
        blk[r] = rows[r] + b * bb;
        memcpy(&dh[r], x8 ? grp + 4 * r : blk[r], 2);
        memcpy(&mh[r], (x8 ? grp + 4 * r : blk[r]) + 2, 2);
    }
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    __m256i h[4], qh[8];
    if (x8) ifkyg_x8(grp, 0, h);
    else ifkyg_t4(blk, 0, h);
    if (five) {
        ifkyg_t4(blk, 16, qh);
        ifkyg_t4(blk, 32, qh + 4);
    }
    for (int g = 0; g < 8; g++) {
        __m256i t[4];
        if (x8) ifkyg_x8(grp, qoff + 16 * (size_t)g, t);
        else ifkyg_t4(blk, qoff + 16 * (size_t)g, t);
        const int c = g / 2;
        for (int j = 0; j < 4; j++) {
            const int jj = 4 * (g & 1) + j;
            __m256i lo = _mm256_and_si256(t[j], m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi32(t[j], 4), m4);
            if (five) {
                lo = _mm256_or_si256(lo, _mm256_and_si256(ifkyg_mv(qh[jj], 2 * c, 4), b4));
                hi = _mm256_or_si256(hi, _mm256_and_si256(ifkyg_mv(qh[jj], 2 * c + 1, 4), b4));
            }
            B->w[16 * c + jj] = lo;
            B->w[16 * c + 8 + jj] = hi;
        }
    }
    const __m256i k1 = _mm256_set1_epi8(0x3f), k2 = _mm256_set1_epi8(0x0f);
    const __m256i k3 = _mm256_set1_epi8(3);
    const __m256i sc_lo = _mm256_and_si256(h[1], k1), m_lo = _mm256_and_si256(h[2], k1);
    const __m256i sc_hi =
        _mm256_or_si256(_mm256_and_si256(h[3], k2),
                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h[1], 6), k3), 4));
    const __m256i m_hi = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi32(h[3], 4), k2),
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h[2], 6), k3), 4));
    for (int s = 0; s < 8; s++) {
        B->sc[s] = ifkyg_u8(s < 4 ? sc_lo : sc_hi, s);
#if !defined(__AVXVNNI__)
        B->sc2[s] = ifkyg_pair16(B->sc[s], B->sc[s]);
#endif
        const __m256i mn = ifkyg_u8(s < 4 ? m_lo : m_hi, s);
        B->c[s] = ifkyg_pair16(mn, mn);
    }
    B->d = ifky_f16x8(dh);
    B->dmin = ifky_f16x8(mh);
}

/* Q6_K (see kquant_gemm_avx512.h's ifkg_expand_q6). */
IFY_INLINE void ifkyg_expand_q6(ifky_gblk *B, const uint8_t *const rows[8], size_t b,
                                const int x8) {
    const uint8_t *blk[8];
    const uint8_t *grp = rows[0] + 8 * b * IF_Q6K_BLOCK_BYTES;
    _Alignas(16) uint16_t dh[8];
    for (int r = 0; r < 8; r++) {
        blk[r] = rows[r] + b * IF_Q6K_BLOCK_BYTES;
        memcpy(&dh[r], x8 ? grp + 32 * 52 + 2 * r : blk[r] + 208, 2);
    }
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    __m256i qh[16], s4[4];
    for (int g = 0; g < 4; g++) {
        if (x8) ifkyg_x8(grp, 128 + 16 * (size_t)g, qh + 4 * g);
        else ifkyg_t4(blk, 128 + 16 * (size_t)g, qh + 4 * g);
    }
    for (int g = 0; g < 8; g++) {
        __m256i t[4];
        if (x8) ifkyg_x8(grp, 16 * (size_t)g, t);
        else ifkyg_t4(blk, 16 * (size_t)g, t);
        const int h = g / 4, t0 = (g / 2) & 1;
        for (int j = 0; j < 4; j++) {
            const int jj = 4 * (g & 1) + j;
            const __m256i q = qh[8 * h + jj];
            B->w[32 * h + 8 * t0 + jj] = _mm256_or_si256(
                _mm256_and_si256(t[j], m4), _mm256_and_si256(ifkyg_mv(q, 2 * t0, 4), m30));
            B->w[32 * h + 8 * (t0 + 2) + jj] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi32(t[j], 4), m4),
                _mm256_and_si256(ifkyg_mv(q, 2 * (t0 + 2), 4), m30));
        }
    }
    if (x8) ifkyg_x8(grp, 192, s4);
    else ifkyg_t4(blk, 192, s4);
    for (int s = 0; s < 16; s++) {
        B->sc[s] = ifkyg_s8(s4[s / 4], s);
#if !defined(__AVXVNNI__)
        B->sc2[s] = ifkyg_pair16(B->sc[s], B->sc[s]);
#endif
    }
    for (int p = 0; p < 8; p++)
        B->c[p] = ifkyg_pair16(B->sc[2 * p], B->sc[2 * p + 1]);
    B->d = ifky_f16x8(dh);
}

IFY_INLINE __m256i ifkyg_bcast(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

#if defined(__AVXVNNI__)
/* acc + the u8 x s8 4-byte product-sums of w0 and x0, then w1 and x1. */
IFY_INLINE __m256i ifkyg_dp2(__m256i acc, __m256i w0, __m256i x0, __m256i w1, __m256i x1) {
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(acc, w0, x0), w1, x1);
}
#endif

/* mr (<= IFKY_MR) activation rows from m against the expanded block b of the tile at n. */
IFY_INLINE void ifkyg_rows(const ifky_gblk *B, float *out, size_t ldo, const int8_t *xq,
                           const float *xd, const int16_t *xsum, size_t m, const int mr,
                           size_t b, size_t nb, size_t K, size_t n, __m256i om, const int kind) {
    const int nsub = kind == IFKY_Q6K ? 16 : 8, per = 64 / nsub;
    const int8_t *x[IFKY_MR];
    __m256i tot[IFKY_MR];
    IFY_UNROLL
    for (int i = 0; i < mr; i++) {
        x[i] = xq + (m + (size_t)i) * K + b * IF_QK;
        tot[i] = _mm256_setzero_si256();
    }
#if defined(__AVXVNNI__)
    /* one sub-block per iteration: a rolled loop keeps the accumulators in registers */
    _Pragma("GCC unroll 1")
    for (int s = 0; s < nsub; s++) {
        __m256i a[IFKY_MR];
        IFY_UNROLL
        for (int i = 0; i < mr; i++) a[i] = _mm256_setzero_si256();
        IFY_UNROLL
        for (int j = 0; j < per; j += 2) {
            const int k = per * s + j;
            IFY_UNROLL
            for (int i = 0; i < mr; i++)
                a[i] = ifkyg_dp2(a[i], B->w[k], ifkyg_bcast(x[i] + 4 * k), B->w[k + 1],
                                 ifkyg_bcast(x[i] + 4 * k + 4));
        }
        IFY_UNROLL
        for (int i = 0; i < mr; i++)
            tot[i] = _mm256_add_epi32(tot[i], _mm256_mullo_epi32(a[i], B->sc[s]));
    }
#else
    /* VPMADDUBSW results added in int16 over `run` scratch vectors: Q4_K 8 (16 products of at
     * most 15 x 128 = 30720), Q5_K 4 (8 x 31 x 128 = 31744), Q6_K 2 (4 x 63 x 128 = 32256), all
     * below 32768; then VPMADDWD by the scale pair. A rolled sub-block loop keeps the
     * accumulators in registers. */
    const int run = kind == IFKY_Q4K ? 8 : kind == IFKY_Q5K ? 4 : 2;
    _Pragma("GCC unroll 1")
    for (int s = 0; s < nsub; s++) {
        IFY_UNROLL
        for (int j0 = 0; j0 < per; j0 += run) {
            __m256i p[IFKY_MR];
            IFY_UNROLL
            for (int j = j0; j < j0 + run; j++) {
                const int k = per * s + j;
                IFY_UNROLL
                for (int i = 0; i < mr; i++) {
                    const __m256i q = _mm256_maddubs_epi16(B->w[k], ifkyg_bcast(x[i] + 4 * k));
                    p[i] = j == j0 ? q : _mm256_add_epi16(p[i], q);
                    /* one running sum per row: without this the compiler builds an add tree
                     * over all rows' products and spills (20 % slower) */
                    __asm__("" : "+x"(p[i]));
                }
            }
            IFY_UNROLL
            for (int i = 0; i < mr; i++)
                tot[i] = _mm256_add_epi32(tot[i], _mm256_madd_epi16(p[i], B->sc2[s]));
        }
    }
#endif
    IFY_UNROLL
    for (int i = 0; i < mr; i++) {
        const int16_t *xs = xsum + (m + (size_t)i) * (K / 16) + b * 16;
        __m256i cor = _mm256_setzero_si256();
        IFY_UNROLL
        for (int p = 0; p < 8; p++) cor = ifky_dpwssd(cor, B->c[p], ifkyg_bcast(xs + 2 * p));
        const __m256 xdb = _mm256_set1_ps(xd[(m + (size_t)i) * nb + b]);
        float *o = out + (m + (size_t)i) * ldo + n;
        const __m256 acc = b ? _mm256_maskload_ps(o, om) : _mm256_setzero_ps();
        __m256 r;
        if (kind == IFKY_Q6K) { /* sumi = sum sc (dot - 32 sum(x)) */
            const __m256i sumi = _mm256_sub_epi32(tot[i], _mm256_slli_epi32(cor, 5));
            r = _mm256_add_ps(acc,
                              _mm256_mul_ps(_mm256_mul_ps(B->d, xdb), _mm256_cvtepi32_ps(sumi)));
        } else {
            const __m256 t1 = _mm256_mul_ps(B->d, xdb), t2 = _mm256_mul_ps(B->dmin, xdb);
            r = _mm256_sub_ps(_mm256_add_ps(acc, _mm256_mul_ps(t1, _mm256_cvtepi32_ps(tot[i]))),
                              _mm256_mul_ps(t2, _mm256_cvtepi32_ps(cor)));
        }
        _mm256_maskstore_ps(o, om, r);
    }
}

/* x8: Q4_K or Q6_K on 8-row groups (if_kq_pack_x8; n0 a multiple of 8, whole groups read). */
IFY_INLINE void ifkyg_gemm(float *out, size_t ldo, const int8_t *xq, const float *xd,
                           const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                           size_t K, const int kind, const int x8) {
    const size_t bb = kind == IFKY_Q6K   ? IF_Q6K_BLOCK_BYTES
                      : kind == IFKY_Q5K ? IF_Q5K_BLOCK_BYTES
                                         : IF_Q4K_BLOCK_BYTES;
    const size_t nb = K / IF_QK, rowbytes = nb * bb;
    ifky_gblk B;
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        /* lanes below nr: loaded and stored (VMASKMOVPS never touches the others) */
        const __m256i om = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nr),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const uint8_t *next = w + (n + 16) * rowbytes;
        for (size_t b = 0; b < nb; b++) {
            ifky_prefetch(next + b * 8 * bb, 8 * bb);
            if (kind == IFKY_Q6K) ifkyg_expand_q6(&B, rows, b, x8);
            else ifkyg_expand_q45(&B, rows, b, kind == IFKY_Q5K, x8);
            size_t m = 0;
            for (; m + IFKY_MR <= M; m += IFKY_MR)
                ifkyg_rows(&B, out, ldo, xq, xd, xsum, m, IFKY_MR, b, nb, K, n, om, kind);
            if (M - m >= 2) {
                ifkyg_rows(&B, out, ldo, xq, xd, xsum, m, 2, b, nb, K, n, om, kind);
                m += 2;
            }
            if (M - m >= 1) ifkyg_rows(&B, out, ldo, xq, xd, xsum, m, 1, b, nb, K, n, om, kind);
        }
    }
}

#endif
