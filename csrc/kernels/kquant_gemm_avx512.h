/* kquant_gemm_avx512.h - the AVX-512 VNNI K-quant GEMM body (q4k/, q5k/, q6k/
 * *_gemm_*_avx512_vnni.c): one body, the type a compile-time constant.
 * Include only from translation units compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni.
 *
 * An outer-product GEMM on the file's blocks, read in place (no packed copy). Per tile of 16
 * weight rows and 256-value block the rows' values are expanded once into an L1 scratch laid
 * out [k / 4][row][4 bytes]: vector k4 holds, in lane r, row r's unsigned values 4 k4 .. 4 k4 +
 * 3 (Q6_K's as u = q + 32). Then a few activation rows at a time run VPDPBUSD of each scratch
 * vector against the activation's 4 bytes broadcast from memory (VPBROADCASTD: a load, no
 * shuffle), one int32 vector per (activation row, sub-block): lane r is row r's exact
 * sub-block dot product, so no horizontal reduction is needed. Q4_K / Q5_K run two 16-row
 * tiles side by side (32 rows), so each broadcast feeds two VPDPBUSDs. The sub-block scales
 * apply per lane in int32 (VPMULLD, exact: a scaled sub-block is at most 63 x 32 x 31 x 128 for
 * Q5_K, 128 x 16 x 63 x 128 for Q6_K, and the block's sum within the scalar sumi's int32
 * bound). Q4_K / Q5_K's mins take four VPDPBUSD against bytes of the activations' 32-value sums
 * (ifkg_hl); Q6_K's -32 x scale x sum(x) one VPDPWSSD per pair of the 16-value sums, broadcast
 * as int16 pairs. Per output the scalar kernel's arithmetic: the same exact int32 sumi / summ
 * per block, then its float step in block order, lane-wise (the running sums live in out
 * between blocks, float32 values stored and reloaded as they are).
 *
 * The expansion reads each row's block as 16-byte chunks, four rows per 512-bit vector (one per
 * 128-bit lane), and a 4 x 4 dword transpose within the lanes then gives dword j of the 16
 * rows in row order: the values' 4-byte groups are consecutive bytes of the file's nibble /
 * high-bit arrays for all three types, so the transposed dwords only need masks and shifts. */
#ifndef IF_KQUANT_GEMM_AVX512_H
#define IF_KQUANT_GEMM_AVX512_H

#include "kquant_avx512.h"

/* Activation rows per pass over a block's scratch: Q4_K / Q5_K 6 rows against two 16-row
 * tiles (each broadcast activation dword feeds two VPDPBUSDs: 24 accumulators), Q6_K 8 against
 * one (its 16 sub-blocks per block put a VPMULLD after every 4 VPDPBUSDs; two tiles measured
 * slower). The remainder runs in steps of 4, 2, 1. */
#define IFKG_MR 8
#define IFKG_MR45 6

enum { IFKG_Q4K = 0, IFKG_Q5K = 1, IFKG_Q6K = 2 };

/* One block of the 16-row tile, expanded. */
typedef struct ifkg_blk {
    __m512i w[64];  /* [k / 4][row][4 bytes]: the unsigned values */
    __m512i sc[16]; /* lane r: row r's scale of sub-block s (8 of 32 values or 16 of 16) */
    __m512i c[8];   /* Q6_K lane r: the int16 pair multiplying the activations' sums 2p, 2p + 1;
                     * Q4_K / Q5_K c[0], c[1]: row r's mins 0..3, 4..7 as bytes */
    __m512 d, dmin; /* lane r: row r's steps */
} ifkg_blk;

IFZ_INLINE __m128i ifkg_ld16(const uint8_t *p) {
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}

/* Dwords 4 (off / 16) .. + 3 of the 16 rows' blocks: y[j] lane r = dword j of the 16 bytes at
 * rows[r] + off. */
IFZ_INLINE void ifkg_t4(const uint8_t *const rows[16], size_t off, __m512i y[4]) {
    __m512i z[4];
    IFZ_UNROLL
    for (int i = 0; i < 4; i++) {
        __m512i v = _mm512_castsi128_si512(ifkg_ld16(rows[i] + off));
        v = _mm512_inserti32x4(v, ifkg_ld16(rows[i + 4] + off), 1);
        v = _mm512_inserti32x4(v, ifkg_ld16(rows[i + 8] + off), 2);
        z[i] = _mm512_inserti32x4(v, ifkg_ld16(rows[i + 12] + off), 3);
    }
    /* lane k of z[i] is row 4k + i: transpose each lane's 4 x 4 dwords */
    const __m512i a0 = _mm512_unpacklo_epi32(z[0], z[1]), a1 = _mm512_unpackhi_epi32(z[0], z[1]);
    const __m512i a2 = _mm512_unpacklo_epi32(z[2], z[3]), a3 = _mm512_unpackhi_epi32(z[2], z[3]);
    y[0] = _mm512_unpacklo_epi64(a0, a2);
    y[1] = _mm512_unpackhi_epi64(a0, a2);
    y[2] = _mm512_unpacklo_epi64(a1, a3);
    y[3] = _mm512_unpackhi_epi64(a1, a3);
}

/* The same from a 16-row group's block (if_kq_pack_x16) whose dword rows start at gb: one
 * aligned load each, no transpose. */
IFZ_INLINE void ifkg_x16(const uint8_t *gb, size_t bb, size_t off, __m512i y[4]) {
    IFZ_UNROLL
    for (int j = 0; j < 4; j++)
        y[j] = _mm512_loadu_si512((const void *)(gb + 64 * ifk_x16_row(bb, off / 4 + (size_t)j)));
}
/* Dwords off / 4 .. + 3 of block b's 16 rows: the file's rows (x16 0, ifkg_t4) or the group's
 * block at gb (x16 1). */
IFZ_INLINE void ifkg_dw(const uint8_t *const blk[16], const uint8_t *gb, size_t bb, size_t off,
                        __m512i y[4], const int x16) {
    if (x16) ifkg_x16(gb, bb, off, y);
    else ifkg_t4(blk, off, y);
}

/* Byte s % 4 of v's lanes as unsigned / signed int32. */
IFZ_INLINE __m512i ifkg_u8(__m512i v, int s) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * (s & 3)), _mm512_set1_epi32(0xFF));
}
IFZ_INLINE __m512i ifkg_s8(__m512i v, int s) {
    return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * (s & 3)), 24);
}

/* Shift each byte's bit `from` to bit `to` (within the byte; other bits are masked after). */
IFZ_INLINE __m512i ifkg_mv(__m512i v, int from, int to) {
    return from <= to ? _mm512_slli_epi32(v, to - from) : _mm512_srli_epi32(v, from - to);
}

/* Q4_K / Q5_K: d, dmin, the 12 scale bytes (Q5_K: the 32 qh bytes), the 128 nibble bytes:
 * nibble byte 32 c + l holds values 64 c + l (low) and 64 c + 32 + l (high), Q5_K's bit 4 of
 * them bits 2c and 2c + 1 of qh[l]. */
IFZ_INLINE void ifkg_expand_q45(ifkg_blk *B, const uint8_t *const rows[16], size_t b,
                                const int five, const int x16) {
    const size_t bb = five ? IF_Q5K_BLOCK_BYTES : IF_Q4K_BLOCK_BYTES, qoff = five ? 48 : 16;
    const uint8_t *blk[16], *gb = rows[0] + 16 * bb * b; /* x16 (Q4_K): the group's block */
    for (int r = 0; r < 16; r++) blk[r] = rows[r] + b * bb;
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
    __m512i h[4], qh[8];
    ifkg_dw(blk, gb, bb, 0, h, x16);
    if (five) {
        ifkg_t4(blk, 16, qh);
        ifkg_t4(blk, 32, qh + 4);
    }
    IFZ_UNROLL
    for (int g = 0; g < 8; g++) { /* nibble dwords 4g .. 4g + 3: chunk c = g / 2 */
        __m512i t[4];
        ifkg_dw(blk, gb, bb, qoff + 16 * (size_t)g, t, x16);
        const int c = g / 2;
        IFZ_UNROLL
        for (int j = 0; j < 4; j++) {
            const int jj = 4 * (g & 1) + j; /* dword within the chunk */
            __m512i lo = _mm512_and_si512(t[j], m4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi32(t[j], 4), m4);
            if (five) {
                lo = _mm512_or_si512(lo, _mm512_and_si512(ifkg_mv(qh[jj], 2 * c, 4), b4));
                hi = _mm512_or_si512(hi, _mm512_and_si512(ifkg_mv(qh[jj], 2 * c + 1, 4), b4));
            }
            B->w[16 * c + jj] = lo;
            B->w[16 * c + 8 + jj] = hi;
        }
    }
    /* the scales as ifk_q4k_scales unpacks them, per lane */
    const __m512i k1 = _mm512_set1_epi8(0x3f), k2 = _mm512_set1_epi8(0x0f);
    const __m512i k3 = _mm512_set1_epi8(3);
    const __m512i sc_lo = _mm512_and_si512(h[1], k1), m_lo = _mm512_and_si512(h[2], k1);
    const __m512i sc_hi =
        _mm512_or_si512(_mm512_and_si512(h[3], k2),
                        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h[1], 6), k3), 4));
    const __m512i m_hi = _mm512_or_si512(
        _mm512_and_si512(_mm512_srli_epi32(h[3], 4), k2),
        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(h[2], 6), k3), 4));
    IFZ_UNROLL
    for (int s = 0; s < 8; s++) B->sc[s] = ifkg_u8(s < 4 ? sc_lo : sc_hi, s);
    B->c[0] = m_lo; /* lane r: row r's mins 0..3 as bytes, then 4..7 (ifkg_hl) */
    B->c[1] = m_hi;
    B->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0]));
    B->dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16)));
}

/* Q6_K: ql (128 bytes), qh (64), the 16 int8 scales, d. Value 128 h + 32 t + l: low 4 bits from
 * ql[64 h + 32 (t & 1) + l] (low nibble for t < 2), top 2 from bits 2t, 2t + 1 of qh[32 h + l]. */
IFZ_INLINE void ifkg_expand_q6(ifkg_blk *B, const uint8_t *const rows[16], size_t b,
                               const int x16, size_t nb) {
    const size_t bb = IF_Q6K_BLOCK_BYTES;
    const uint8_t *blk[16];
    _Alignas(32) uint16_t dh[16];
    size_t dw = 0, tl = 0; /* x16: the group block's dword rows and d's (ifk_x16_block) */
    if (x16) {
        ifk_x16_block(b, nb, bb, &dw, &tl);
        memcpy(dh, rows[0] + tl, sizeof dh);
    }
    for (int r = 0; r < 16; r++) {
        blk[r] = rows[r] + b * bb;
        if (!x16) memcpy(&dh[r], blk[r] + 208, 2);
    }
    const uint8_t *gb = rows[0] + dw;
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    __m512i qh[16], s4[4];
    IFZ_UNROLL
    for (int g = 0; g < 4; g++) ifkg_dw(blk, gb, bb, 128 + 16 * (size_t)g, qh + 4 * g, x16);
    IFZ_UNROLL
    for (int g = 0; g < 8; g++) { /* ql dwords 4g .. 4g + 3 */
        __m512i t[4];
        ifkg_dw(blk, gb, bb, 16 * (size_t)g, t, x16);
        const int h = g / 4, t0 = (g / 2) & 1; /* half, quarter of the low nibbles */
        IFZ_UNROLL
        for (int j = 0; j < 4; j++) {
            const int jj = 4 * (g & 1) + j; /* dword within the 32 bytes */
            const __m512i q = qh[8 * h + jj];
            B->w[32 * h + 8 * t0 + jj] = _mm512_or_si512(
                _mm512_and_si512(t[j], m4), _mm512_and_si512(ifkg_mv(q, 2 * t0, 4), m30));
            B->w[32 * h + 8 * (t0 + 2) + jj] = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(t[j], 4), m4),
                _mm512_and_si512(ifkg_mv(q, 2 * (t0 + 2), 4), m30));
        }
    }
    ifkg_dw(blk, gb, bb, 192, s4, x16);
    IFZ_UNROLL
    for (int s = 0; s < 16; s++) B->sc[s] = ifkg_s8(s4[s / 4], s);
    IFZ_UNROLL
    for (int p = 0; p < 8; p++) /* scales 2p, 2p + 1 times sums 2p, 2p + 1 */
        B->c[p] = _mm512_or_si512(_mm512_and_si512(B->sc[2 * p], _mm512_set1_epi32(0xFFFF)),
                                  _mm512_slli_epi32(B->sc[2 * p + 1], 16));
    B->d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(const void *)dh));
}

IFZ_INLINE __m512i ifkg_bcast(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Activation rows per chunk of a call (at least matmul.c's 128-row prefill task rounded up to
 * the 6-row steps, so a task is one chunk and its tiles are expanded once) and blocks per chunk
 * of the 32-sum bytes (ifkg_hl: 16 bytes per row and block, 36 KiB on the stack). */
#define IFKG_MC 144
#define IFKG_KC 16

/* Q4_K / Q5_K's min term needs sum_s m_s xs_s, xs_s the activations' sum over sub-block s (32
 * values, |xs| <= 32 x 127 = 4064). As xs = 128 h + l (h = xs >> 7 in -32..31, l = xs & 127)
 * both parts are signed bytes, so two VPDPBUSD each (the mins are unsigned 6-bit bytes, four
 * per dword) give sum m h and sum m l exactly, where the int16 pairs of the 16-value sums took
 * eight VPDPWSSD. Row m's bytes for block b of the chunk: h0..h7 then l0..l7. */
IFZ_INLINE void ifkg_hl(uint8_t *hl, const int16_t *xsum, size_t K, size_t m0, size_t mc,
                        size_t b0, size_t nbc) {
    const __m256i one = _mm256_set1_epi16(1);
    for (size_t m = 0; m < mc; m++) {
        for (size_t b = 0; b < nbc; b++) {
            const __m256i s16 = _mm256_loadu_si256(
                (const __m256i *)(const void *)(xsum + (m0 + m) * (K / 16) + (b0 + b) * 16));
            const __m256i xs = _mm256_madd_epi16(s16, one); /* the 8 sums of 32 */
            const __m128i h = _mm256_cvtepi32_epi8(_mm256_srai_epi32(xs, 7));
            const __m128i l = _mm256_cvtepi32_epi8(_mm256_and_si256(xs, _mm256_set1_epi32(127)));
            _mm_storeu_si128((__m128i *)(void *)(hl + (m * IFKG_KC + b) * 16),
                             _mm_unpacklo_epi64(h, l));
        }
    }
}

/* mr (<= IFKG_MR) activation rows from m against nv (1 or 2) expanded 16-row tiles of block b
 * (rows n .. n + 16 nv - 1, om[v] the store mask of tile v): each broadcast activation dword
 * feeds nv VPDPBUSDs. hl: the rows' 32-sum bytes for this block (Q4_K / Q5_K), row i at
 * hl + i IFKG_KC 16. */
IFZ_INLINE void ifkg_rows(const ifkg_blk *B, const int nv, float *out, size_t ldo,
                          const int8_t *xq, const float *xd, const int16_t *xsum,
                          const uint8_t *hl, size_t m, const int mr, size_t b, size_t nb,
                          size_t K, size_t n, const __mmask16 om[2], const int kind) {
    const int nsub = kind == IFKG_Q6K ? 16 : 8, per = 64 / nsub;
    const int8_t *x[IFKG_MR];
    __m512i tot[IFKG_MR][2];
    IFZ_UNROLL
    for (int i = 0; i < mr; i++) {
        x[i] = xq + (m + (size_t)i) * K + b * IF_QK;
        IFZ_UNROLL
        for (int v = 0; v < nv; v++) tot[i][v] = _mm512_setzero_si512();
    }
    /* one sub-block per iteration: a rolled loop keeps the accumulators in registers */
    _Pragma("GCC unroll 1")
    for (int s = 0; s < nsub; s++) {
        __m512i a[IFKG_MR][2];
        IFZ_UNROLL
        for (int i = 0; i < mr; i++) {
            IFZ_UNROLL
            for (int v = 0; v < nv; v++) a[i][v] = _mm512_setzero_si512();
        }
        IFZ_UNROLL
        for (int j = 0; j < per; j++) {
            __m512i wv[2];
            IFZ_UNROLL
            for (int v = 0; v < nv; v++) wv[v] = B[v].w[per * s + j];
            IFZ_UNROLL
            for (int i = 0; i < mr; i++) {
                const __m512i xb = ifkg_bcast(x[i] + 4 * (per * s + j));
                IFZ_UNROLL
                for (int v = 0; v < nv; v++) a[i][v] = _mm512_dpbusd_epi32(a[i][v], wv[v], xb);
            }
        }
        IFZ_UNROLL
        for (int i = 0; i < mr; i++) {
            IFZ_UNROLL
            for (int v = 0; v < nv; v++)
                tot[i][v] = _mm512_add_epi32(tot[i][v], _mm512_mullo_epi32(a[i][v], B[v].sc[s]));
        }
    }
    IFZ_UNROLL
    for (int v = 0; v < nv; v++) {
        const ifkg_blk *Bv = &B[v];
        IFZ_UNROLL
        for (int i = 0; i < mr; i++) {
            __m512i cor = _mm512_setzero_si512();
            if (kind == IFKG_Q6K) { /* -32 x sum sc_s xs_s by the int16 pairs of 16-sums */
                const int16_t *xs = xsum + (m + (size_t)i) * (K / 16) + b * 16;
                IFZ_UNROLL
                for (int p = 0; p < 8; p++)
                    cor = _mm512_dpwssd_epi32(cor, Bv->c[p], ifkg_bcast(xs + 2 * p));
            } else {
                const uint8_t *q = hl + (size_t)i * IFKG_KC * 16;
                __m512i ch = _mm512_dpbusd_epi32(_mm512_setzero_si512(), Bv->c[0], ifkg_bcast(q));
                ch = _mm512_dpbusd_epi32(ch, Bv->c[1], ifkg_bcast(q + 4));
                cor = _mm512_dpbusd_epi32(_mm512_slli_epi32(ch, 7), Bv->c[0], ifkg_bcast(q + 8));
                cor = _mm512_dpbusd_epi32(cor, Bv->c[1], ifkg_bcast(q + 12));
            }
            const __m512 xdb = _mm512_set1_ps(xd[(m + (size_t)i) * nb + b]);
            float *o = out + (m + (size_t)i) * ldo + n + 16 * (size_t)v;
            const __m512 acc = b ? _mm512_maskz_loadu_ps(om[v], o) : _mm512_setzero_ps();
            __m512 r;
            if (kind == IFKG_Q6K) { /* sumi = sum sc (dot - 32 sum(x)) */
                const __m512i sumi = _mm512_sub_epi32(tot[i][v], _mm512_slli_epi32(cor, 5));
                r = _mm512_add_ps(
                    acc, _mm512_mul_ps(_mm512_mul_ps(Bv->d, xdb), _mm512_cvtepi32_ps(sumi)));
            } else {
                const __m512 t1 = _mm512_mul_ps(Bv->d, xdb), t2 = _mm512_mul_ps(Bv->dmin, xdb);
                r = _mm512_sub_ps(
                    _mm512_add_ps(acc, _mm512_mul_ps(t1, _mm512_cvtepi32_ps(tot[i][v]))),
                    _mm512_mul_ps(t2, _mm512_cvtepi32_ps(cor)));
            }
            _mm512_mask_storeu_ps(o, om[v], r);
        }
    }
}

/* The activation-row passes of block b over the nv expanded tiles. */
IFZ_INLINE void ifkg_block(const ifkg_blk *B, const int nv, float *out, size_t ldo,
                           const int8_t *xq, const float *xd, const int16_t *xsum,
                           const uint8_t *hl, size_t m0, size_t mc, size_t b, size_t nb,
                           size_t K, size_t n, const __mmask16 om[2], const int kind) {
    size_t m = 0;
#define IFKG_PASS(R)                                                                              \
    ifkg_rows(B, nv, out, ldo, xq, xd, xsum, hl + m * IFKG_KC * 16, m0 + m, R, b, nb, K, n, om, \
              kind)
    if (kind == IFKG_Q6K)
        for (; m + IFKG_MR <= mc; m += IFKG_MR) IFKG_PASS(IFKG_MR);
    else
        for (; m + IFKG_MR45 <= mc; m += IFKG_MR45) IFKG_PASS(IFKG_MR45);
    /* the last rows, in halving steps */
    if (mc - m >= 4) {
        IFKG_PASS(4);
        m += 4;
    }
    if (mc - m >= 2) {
        IFKG_PASS(2);
        m += 2;
    }
    if (mc - m >= 1) IFKG_PASS(1);
#undef IFKG_PASS
}

/* x16: Q4_K or Q6_K on 16-row groups (if_kq_pack_x16; n0 a multiple of 16, whole groups read). */
IFZ_INLINE void ifkg_gemm(float *out, size_t ldo, const int8_t *xq, const float *xd,
                          const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                          size_t K, const int kind, const int x16) {
    const size_t bb = kind == IFKG_Q6K   ? IF_Q6K_BLOCK_BYTES
                      : kind == IFKG_Q5K ? IF_Q5K_BLOCK_BYTES
                                         : IF_Q4K_BLOCK_BYTES;
    const size_t nb = K / IF_QK, rowbytes = nb * bb;
    ifkg_blk B[2];
    _Alignas(64) uint8_t hl[IFKG_MC * IFKG_KC * 16];
    for (size_t m0 = 0; m0 < M; m0 += IFKG_MC) {
        const size_t mc = M - m0 < IFKG_MC ? M - m0 : IFKG_MC;
        for (size_t b0 = 0; b0 < nb; b0 += IFKG_KC) {
            const size_t nbc = nb - b0 < IFKG_KC ? nb - b0 : IFKG_KC;
            if (kind != IFKG_Q6K) ifkg_hl(hl, xsum, K, m0, mc, b0, nbc);
            /* Q4_K / Q5_K: tiles of 32 rows (two expanded 16-row halves), the last of 16 or
             * fewer alone; Q6_K: tiles of 16 */
            const size_t step = kind == IFKG_Q6K ? 16 : 32;
            for (size_t n = n0; n < n1; n += step) {
                const int nv = n1 - n > 16 && kind != IFKG_Q6K ? 2 : 1;
                const uint8_t *rows[2][16];
                __mmask16 om[2] = {ifkz_rows(rows[0], w, rowbytes, n, n1), 0};
                if (nv == 2) om[1] = ifkz_rows(rows[1], w, rowbytes, n + 16, n1);
                for (size_t bi = 0; bi < nbc; bi++) {
                    const size_t b = b0 + bi;
                    /* the chunk's bytes of the tile two ahead, a block's share of its rows */
                    for (size_t r = bi * step / nbc; r < (bi + 1) * step / nbc; r++)
                        if (n + 2 * step + r < n1) /* x16: the same bytes of the groups */
                            ifkz_prefetch(x16 ? w + (n + 2 * step + r / 16 * 16) * rowbytes +
                                                    16 * b0 * bb + r % 16 * nbc * bb
                                              : w + (n + 2 * step + r) * rowbytes + b0 * bb,
                                          nbc * bb);
                    for (int v = 0; v < nv; v++) {
                        if (kind == IFKG_Q6K) ifkg_expand_q6(&B[v], rows[v], b, x16, nb);
                        else ifkg_expand_q45(&B[v], rows[v], b, kind == IFKG_Q5K, x16);
                    }
                    const uint8_t *hb = hl + bi * 16;
                    if (nv == 2)
                        ifkg_block(B, 2, out, ldo, xq, xd, xsum, hb, m0, mc, b, nb, K, n, om,
                                   kind);
                    else
                        ifkg_block(B, 1, out, ldo, xq, xd, xsum, hb, m0, mc, b, nb, K, n, om,
                                   kind);
                }
            }
        }
    }
}

#endif
