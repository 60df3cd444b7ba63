/* iq4_avx2.h - the x86 IQ4_NL and IQ4_XS GEMV and GEMM bodies (iq4/ *_avx2.c, *_avx_vnni.c,
 * *_avx512_vnni.c): one source compiled per ISA, 8-row tiles on the file's blocks as
 * legacy_gemv_x86.h (IQ4_NL) and kquant_avx2.h (IQ4_XS) read them. A nibble becomes its level
 * by VPSHUFB from the 16-entry table. The levels are signed (-127..113), so:
 *  - under VNNI (AVX-VNNI, AVX512-VNNI): VPDPBUSD of level + 128 (0..241, unsigned) against
 *    the activations, then 128 * (the activation sum, from the int16 sums) off each block's
 *    (IQ4_NL) or sub-block's (IQ4_XS, after VPMULLD by its scale ls - 32) dot: exact.
 *  - on AVX2: VPMADDUBSW of |level| against the activations with the level's sign applied
 *    (VPSIGNB; |x| <= 127, so no overflow), pairs at most 2 * 127 * 127 (no int16 saturation;
 *    level + 128 would saturate at 2 * 241 * 127), then VPMADDWD against ones (IQ4_NL) or
 *    against each sub-block's scale spread over the words (IQ4_XS).
 * The same exact int32 sums either way; one 8-row reduction per block; the float step is the
 * scalar kernel's, lane-wise. */
#ifndef IF_IQ4_AVX2_H
#define IF_IQ4_AVX2_H

#include "iq4_common.h"
#include "kquant_avx2.h"

#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
#define IFQY_BIASED 1 /* the products by VPDPBUSD of level + 128 */
#else
#define IFQY_BIASED 0
#endif

/* The level table in both 128-bit lanes: signed, or + 128 as unsigned bytes. */
IFY_INLINE __m256i ifqy_levels(int biased) {
    const __m128i t = _mm_loadu_si128((const __m128i *)(const void *)ifq_levels);
    const __m128i v = biased ? _mm_xor_si128(t, _mm_set1_epi8((char)0x80)) : t;
    return _mm256_broadcastsi128_si256(v);
}

/* A 16-byte nibble run's 32 nibbles, value j in byte j (low nibbles in lane 0, high in 1). */
IFY_INLINE __m256i ifqy_nib(const uint8_t *q) {
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)q);
    const __m128i m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
}

/* The int16 pair sums of 32 signed levels L times 32 activations x (sign trick). */
IFY_INLINE __m256i ifqy_pairs(__m256i L, __m256i x) {
    return _mm256_maddubs_epi16(_mm256_abs_epi8(L), _mm256_sign_epi8(x, L));
}

/* IQ4_NL: the operand of a block's product (level + 128 under VNNI, else the signed level),
 * and its product with 32 activations as 8 int32 lanes (biased by 128 * sum(x) under VNNI). */
IFY_INLINE __m256i ifqy_nl_op(__m256i tab, const uint8_t *blk) {
    return _mm256_shuffle_epi8(tab, ifqy_nib(blk + 2));
}
IFY_INLINE __m256i ifqy_nl_dot(__m256i op, __m256i x) {
#if defined(__AVX512VNNI__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), op, x);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), op, x);
#else
    return _mm256_madd_epi16(ifqy_pairs(op, x), _mm256_set1_epi16(1));
#endif
}

/* The 8 rows' block dots (lane r = row r) less the VNNI bias, 128 * (xsum[0] + xsum[1]). */
IFY_INLINE __m256i ifqy_nl_net(const __m256i p[8], const int16_t *bs) {
    const __m256i dot = ifky_net8(p);
    if (!IFQY_BIASED) return dot;
    return _mm256_sub_epi32(dot, _mm256_set1_epi32(128 * ((int32_t)bs[0] + bs[1])));
}

IFY_INLINE void ifqy_nl_gemv(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                             const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL, bb = IF_IQ4NL_BLOCK_BYTES, rowbytes = nb * bb;
    const __m256i tab = ifqy_levels(IFQY_BIASED);
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = n + 24 <= n1 ? w + (n + 16) * rowbytes : NULL;
        __m256 acc = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            if (next) ifky_prefetch(next + b * 8 * bb, 8 * bb);
            const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + b * IF_QL));
            __m256i p[8];
            uint16_t dh[8];
            IFY_UNROLL
            for (int r = 0; r < 8; r++) {
                const uint8_t *blk = rows[r] + b * bb;
                memcpy(&dh[r], blk, 2);
                p[r] = ifqy_nl_dot(ifqy_nl_op(tab, blk), x);
            }
            const __m256i dot = ifqy_nl_net(p, xsum + 2 * b);
            const __m256 t = _mm256_mul_ps(ifky_f16x8(dh), _mm256_set1_ps(xd[b]));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(t, _mm256_cvtepi32_ps(dot)));
        }
        ifky_store(out + n, acc, nr);
    }
}

/* The first nr lanes from out (the rest 0). */
IFY_INLINE __m256 ifqy_load(const float *out, size_t nr) {
    if (nr == 8) return _mm256_loadu_ps(out);
    _Alignas(32) float t[8] = {0};
    for (size_t r = 0; r < nr; r++) t[r] = out[r];
    return _mm256_load_ps(t);
}

/* The IQ4_NL GEMM: per 8-row tile, a chunk of IFQY_NL_CB blocks' operands and scales made once
 * into an L1 scratch (AVX2: |level| and the level for its sign), then every activation row runs
 * the chunk with its running sum in a register; between chunks the sum waits in `out` (stored
 * and reloaded exactly), so per output the arithmetic is the GEMV's. */
enum { IFQY_NL_CB = 32 };
IFY_INLINE void ifqy_nl_gemm(float *out, size_t ldo, const int8_t *xq, const float *xd,
                             const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                             size_t n1, size_t K) {
    const size_t nb = K / IF_QL, bb = IF_IQ4NL_BLOCK_BYTES, rowbytes = nb * bb;
    const __m256i tab = ifqy_levels(IFQY_BIASED);
    __m256i op[IFQY_NL_CB][8];
#if !IFQY_BIASED
    __m256i sg[IFQY_NL_CB][8];
#endif
    __m256 dv[IFQY_NL_CB];
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        for (size_t b0 = 0; b0 < nb; b0 += IFQY_NL_CB) {
            const size_t bn = nb - b0 < IFQY_NL_CB ? nb - b0 : IFQY_NL_CB;
            for (size_t i = 0; i < bn; i++) {
                uint16_t dh[8];
                IFY_UNROLL
                for (int r = 0; r < 8; r++) {
                    const uint8_t *blk = rows[r] + (b0 + i) * bb;
                    memcpy(&dh[r], blk, 2);
                    const __m256i L = ifqy_nl_op(tab, blk);
#if IFQY_BIASED
                    op[i][r] = L;
#else
                    op[i][r] = _mm256_abs_epi8(L);
                    sg[i][r] = L;
#endif
                }
                dv[i] = ifky_f16x8(dh);
            }
            for (size_t m = 0; m < M; m++) {
                const int8_t *x = xq + m * K + b0 * IF_QL;
                const int16_t *bs = xsum + m * (K / 16) + 2 * b0;
                const float *xdm = xd + m * nb + b0;
                float *o = out + m * ldo + n;
                __m256 acc = b0 ? ifqy_load(o, nr) : _mm256_setzero_ps();
                for (size_t i = 0; i < bn; i++) {
                    const __m256i xv =
                        _mm256_loadu_si256((const __m256i *)(const void *)(x + i * IF_QL));
                    __m256i p[8];
                    IFY_UNROLL
                    for (int r = 0; r < 8; r++)
#if IFQY_BIASED
                        p[r] = ifqy_nl_dot(op[i][r], xv);
#else
                        p[r] = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(op[i][r], _mm256_sign_epi8(xv, sg[i][r])),
                            _mm256_set1_epi16(1));
#endif
                    const __m256i dot = ifqy_nl_net(p, bs + 2 * i);
                    const __m256 t = _mm256_mul_ps(dv[i], _mm256_set1_ps(xdm[i]));
                    acc = _mm256_add_ps(acc, _mm256_mul_ps(t, _mm256_cvtepi32_ps(dot)));
                }
                ifky_store(o, acc, nr);
            }
        }
    }
}

/* IQ4_XS: a super-block's 8 scales ls - 32 as int32 lanes 0..7 (nibble j of the little-endian
 * scales_l word, bits 2j, 2j + 1 of scales_h, one variable shift each). */
IFY_INLINE __m256i ifqy_xs_scales32(const uint8_t *blk) {
    uint32_t sl;
    uint16_t sh;
    memcpy(&sl, blk + 4, 4);
    memcpy(&sh, blk + 2, 2);
    const __m256i s4 = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)sl), s4),
                                        _mm256_set1_epi32(15));
    const __m256i hi = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32((int)sh), _mm256_srli_epi32(s4, 1)),
        _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
}

/* The scales a row's products take: under VNNI the int32 lanes; else as int16 words 0..7 of
 * both 128-bit lanes (for the word spreads). */
IFY_INLINE __m256i ifqy_xs_scales(const uint8_t *blk) {
    const __m256i s = ifqy_xs_scales32(blk);
    if (IFQY_BIASED) return s;
    const __m128i s16 = _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return _mm256_broadcastsi128_si256(s16);
}

/* A super-block's 8 sub-block activation sums (lane j: xsum[2j] + xsum[2j + 1]), for the VNNI
 * bias. */
IFY_INLINE __m256i ifqy_xs_sums(const int16_t *bs) {
    return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)bs),
                             _mm256_set1_epi16(1));
}

/* The activations of a super-block as the 32-byte nibble loads meet them: chunk c (bytes
 * 32c .. 32c + 31 of qs: sub-blocks 2c, 2c + 1) has its low nibbles against xa[c] (values
 * 0..15 of sub-block 2c in lane 0, of 2c + 1 in lane 1) and its high ones against xb[c]
 * (values 16..31). */
IFY_INLINE void ifqy_xs_acts(const int8_t *x, __m256i xa[4], __m256i xb[4]) {
    IFY_UNROLL
    for (int c = 0; c < 4; c++) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 64 * c));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(x + 64 * c + 32));
        xa[c] = _mm256_permute2x128_si256(x0, x1, 0x20);
        xb[c] = _mm256_permute2x128_si256(x0, x1, 0x31);
    }
}

/* A super-block's signed levels: L[2c] the low nibbles of chunk c, L[2c + 1] the high ones. */
IFY_INLINE void ifqy_xs_levels(__m256i tab, const uint8_t *blk, __m256i L[8]) {
    const __m256i m4 = _mm256_set1_epi8(15);
    IFY_UNROLL
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 8 + 32 * c));
        L[2 * c] = _mm256_shuffle_epi8(tab, _mm256_and_si256(q, m4));
        L[2 * c + 1] = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    }
}

/* One row's sumi lanes for a super-block (their sum is sumi). Under VNNI (L: level + 128)
 * VPDPBUSD forms each chunk's sub-block sums (lanes 0-3: sub-block 2c, 4-7: 2c + 1), VPMULLD
 * scales them by their sub-block's ls - 32, and 128 (ls_j - 32) * (sub-block j's activation
 * sum) comes off lane j: exact. Else (L: the signed levels) the pair sums of each chunk times
 * its sub-blocks' scales spread over the words. */
IFY_INLINE __m256i ifqy_xs_sumi(const __m256i L[8], __m256i sc, const __m256i xa[4],
                                const __m256i xb[4], __m256i xs32) {
#if IFQY_BIASED
    __m256i a = _mm256_sub_epi32(_mm256_setzero_si256(),
                                 _mm256_slli_epi32(_mm256_mullo_epi32(sc, xs32), 7));
    IFY_UNROLL
    for (int c = 0; c < 4; c++) {
        const __m256i p = ifqy_nl_dot(L[2 * c], xa[c]);
#if defined(__AVX512VNNI__)
        const __m256i q = _mm256_dpbusd_epi32(p, L[2 * c + 1], xb[c]);
#else
        const __m256i q = _mm256_dpbusd_avx_epi32(p, L[2 * c + 1], xb[c]);
#endif
        const __m256i s = _mm256_permutevar8x32_epi32(
            sc, _mm256_setr_epi32(2 * c, 2 * c, 2 * c, 2 * c, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                                  2 * c + 1));
        a = _mm256_add_epi32(a, _mm256_mullo_epi32(q, s));
    }
    return a;
#else
    (void)xs32;
    __m256i a = _mm256_setzero_si256();
    IFY_UNROLL
    for (int c = 0; c < 4; c++) {
        const __m256i s = _mm256_shuffle_epi8(sc, ifky_spread(2 * c, 2 * c + 1));
        a = ifky_dpwssd(a, ifqy_pairs(L[2 * c], xa[c]), s);
        a = ifky_dpwssd(a, ifqy_pairs(L[2 * c + 1], xb[c]), s);
    }
    return a;
#endif
}

IFY_INLINE void ifqy_xs_gemv(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                             const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK, bb = IF_IQ4XS_BLOCK_BYTES, rowbytes = nb * bb;
    const __m256i tab = ifqy_levels(IFQY_BIASED);
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = n + 24 <= n1 ? w + (n + 16) * rowbytes : NULL;
        __m256 acc = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            if (next) ifky_prefetch(next + b * 8 * bb, 8 * bb);
            __m256i xa[4], xb[4], v[8];
            ifqy_xs_acts(xq + b * IF_QK, xa, xb);
            const __m256i xs32 = ifqy_xs_sums(xsum + b * 16);
            uint16_t dh[8];
            IFY_UNROLL
            for (int r = 0; r < 8; r++) {
                const uint8_t *blk = rows[r] + b * bb;
                memcpy(&dh[r], blk, 2);
                __m256i L[8];
                ifqy_xs_levels(tab, blk, L);
                v[r] = ifqy_xs_sumi(L, ifqy_xs_scales(blk), xa, xb, xs32);
            }
            const __m256i sumi = ifky_net8(v);
            const __m256 t = _mm256_mul_ps(ifky_f16x8(dh), _mm256_set1_ps(xd[b]));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(t, _mm256_cvtepi32_ps(sumi)));
        }
        ifky_store(out + n, acc, nr);
    }
}

/* The IQ4_XS GEMM: per 8-row tile and super-block the rows' levels and scales made once into
 * an L1 scratch, then every activation row's products from them; running sums in `out`. */
IFY_INLINE void ifqy_xs_gemm(float *out, size_t ldo, const int8_t *xq, const float *xd,
                             const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                             size_t n1, size_t K) {
    const size_t nb = K / IF_QK, bb = IF_IQ4XS_BLOCK_BYTES, rowbytes = nb * bb;
    const __m256i tab = ifqy_levels(IFQY_BIASED);
    __m256i L[8][8], sc[8];
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        for (size_t b = 0; b < nb; b++) {
            uint16_t dh[8];
            for (int r = 0; r < 8; r++) {
                const uint8_t *blk = rows[r] + b * bb;
                memcpy(&dh[r], blk, 2);
                ifqy_xs_levels(tab, blk, L[r]);
                sc[r] = ifqy_xs_scales(blk);
            }
            const __m256 dv = ifky_f16x8(dh);
            for (size_t m = 0; m < M; m++) {
                __m256i xa[4], xb[4], v[8];
                ifqy_xs_acts(xq + m * K + b * IF_QK, xa, xb);
                const __m256i xs32 = ifqy_xs_sums(xsum + m * (K / 16) + b * 16);
                IFY_UNROLL
                for (int r = 0; r < 8; r++) v[r] = ifqy_xs_sumi(L[r], sc[r], xa, xb, xs32);
                const __m256i sumi = ifky_net8(v);
                float *o = out + m * ldo + n;
                __m256 acc = b ? ifqy_load(o, nr) : _mm256_setzero_ps();
                const __m256 t = _mm256_mul_ps(dv, _mm256_set1_ps(xd[m * nb + b]));
                acc = _mm256_add_ps(acc, _mm256_mul_ps(t, _mm256_cvtepi32_ps(sumi)));
                ifky_store(o, acc, nr);
            }
        }
    }
}

#endif
