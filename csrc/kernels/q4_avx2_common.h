/* q4_avx2_common.h - the AVX2 helpers of the 4-bit codebook kernels (q4_gemv/q4_gemv_1x8_avx2.c,
 * q4_gemm/q4_gemm_16x8_avx2.c), on top of the Q8 ones (q8_avx2_common.h: the sign-trick dot
 * product, horizontal sums, scale transposes, masked stores, prefetch).
 *
 * Three ways to form the int8 x int8 products, chosen per call from the codebook (q4c_mode):
 *   Q4C_SIGN   (span max(cb) - min(cb) > 127, e.g. CQ4's symmetric +-127 levels, IQ4_NL): the
 *              nibbles are looked up in the codebook (VPSHUFB) and dotted with the Q8 sign
 *              trick (u8 = |x|, s8 = cb * sign(x)); 2 * 128 * 127 = 32512 < 32767, no
 *              saturation.
 *   Q4C_OFFSET (span <= 127): the lookup table holds u = cb - min(cb) in [0, 127], unsigned,
 *              and VPMADDUBSW(u, x) multiplies it by the raw activations: each int16 is at
 *              most 2 * 127 * 128 = 32512 in magnitude, so it never saturates; per group
 *              isum = sum(u * x) + min(cb) * sum(x), with sum(x) per activation group computed
 *              once per call and shared by every weight row: the same int32 as the scalar
 *              kernel's sum(cb * x) (exact: the true value fits in int32).
 *   Q4C_OFFSET2 (span <= 63): as Q4C_OFFSET, and the int16 products of a weight vector's low and
 *              high nibbles are added in int16 before one VPMADDWD: 2 * (2 * 63 * 128) = 32256
 *              <= 32767.
 *   Q4C_LINEAR (cb[i] = cb[0] + i, GGUF Q4_0's -8..7): u is the nibble itself, no lookup; each
 *              VPMADDUBSW int16 is at most 2 * 15 * 128 = 3840 in magnitude, so up to 8 of
 *              them (30720 < 32767) are added in int16 before one VPMADDWD: Q4C_LIN_RUN
 *              blocks of 64 values (2 VPMADDUBSW each) per VPMADDWD.
 *
 * Weight loads: one 32-byte load per 64 values (two 32-value blocks of if_q4_gemv_fn's layout,
 * byte j of block b = value j low, value j + 16 high): the low nibbles are values 0..15 of both
 * blocks (lane 0: block 0, lane 1: block 1), the high nibbles values 16..31; the activations
 * are permuted to match (q4c_xperm: two VPERM2I128 per 64 values, shared by the tile's rows).
 * A last block of 32 (K % 64 == 32) is one 16-byte broadcast, VPSRLVD by 0 / 4 per lane:
 * lane 0 = values 0..15, lane 1 = values 16..31, in order. */
#ifndef IF_Q4_AVX2_COMMON_H
#define IF_Q4_AVX2_COMMON_H

#include "q8_avx2_common.h"

enum { Q4C_SIGN = 0, Q4C_OFFSET = 1, Q4C_OFFSET2 = 2, Q4C_LINEAR = 3 };
#define Q4C_LIN_RUN 4 /* 64-value blocks per int16 run in Q4C_LINEAR: 8 x 3840 <= 32767 */

/* The product mode of codebook cb (see above); *cmin = min(cb), *lut = the 16 lookup bytes
 * (Q4C_SIGN: cb itself; otherwise cb - min, each in [0, 127]). */
static inline int q4c_mode(const int8_t *cb, int32_t *cmin, int8_t lut[16]) {
    int lo = cb[0], hi = cb[0], lin = 1;
    for (int i = 1; i < 16; i++) {
        lo = cb[i] < lo ? cb[i] : lo;
        hi = cb[i] > hi ? cb[i] : hi;
        lin &= cb[i] == cb[0] + i;
    }
    *cmin = lo;
    if (hi - lo > 127) {
        memcpy(lut, cb, 16);
        return Q4C_SIGN;
    }
    for (int i = 0; i < 16; i++) lut[i] = (int8_t)(cb[i] - lo);
    return lin ? Q4C_LINEAR : hi - lo <= 63 ? Q4C_OFFSET2 : Q4C_OFFSET;
}

/* msx[g] = cmin * (sum of the gs activations of group g), g < ng (int32; wraps exactly as
 * the int32 sums it is added to). */
static inline void q4c_xsums(int32_t *msx, const int8_t *xq, size_t ng, size_t gs, int32_t cmin) {
    for (size_t g = 0; g < ng; g++) {
        int32_t s = 0;
        for (size_t k = 0; k < gs; k++) s += xq[g * gs + k];
        msx[g] = (int32_t)((uint32_t)s * (uint32_t)cmin);
    }
}

Q8C_INLINE __m256i q4c_codebook(const int8_t *cb) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)cb));
}

/* The 32 nibbles (as bytes 0..15) of the 32-value block at p, in value order. */
Q8C_INLINE __m256i q4c_nib32(const uint8_t *p) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __m256i sh = _mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(sh, _mm256_set1_epi8(15));
}

/* The 32 int8 weights of the block at p (codebook lookup). */
Q8C_INLINE __m256i q4c_expand(const uint8_t *p, __m256i cbv) {
    return _mm256_shuffle_epi8(cbv, q4c_nib32(p));
}

/* The nibbles of the two blocks (64 values) at p: *lo = values 0..15 of each block (lane =
 * block), *hi = values 16..31. */
Q8C_INLINE void q4c_nib64(const uint8_t *p, __m256i *lo, __m256i *hi) {
    const __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)p);
    const __m256i m = _mm256_set1_epi8(15);
    *lo = _mm256_and_si256(b, m);
    *hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m);
}

/* The 64 activations at x permuted to q4c_nib64's order. */
Q8C_INLINE void q4c_xperm(const int8_t *x, __m256i *xl, __m256i *xh) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)x);
    const __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(x + 32));
    *xl = _mm256_permute2x128_si256(a, c, 0x20);
    *xh = _mm256_permute2x128_si256(a, c, 0x31);
}

/* The int16 products of the unsigned weights u and the signed activations x (offset modes). */
Q8C_INLINE __m256i q4c_mul16(__m256i u, __m256i x) { return _mm256_maddubs_epi16(u, x); }

/* int16 pairs summed into int32 lanes. */
Q8C_INLINE __m256i q4c_widen(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

/* The first two steps of a transposing reduction of 8 int32 vectors: per 128-bit half,
 * *lo lane r = the sum of v[r]'s 4 lanes in that half, rows 0-3 (lanes 0-3 of the low half,
 * 4-7 of the high half); *hi the same for rows 4-7. In-lane unpacks and adds only (no
 * VPHADDD): 18 instructions for 8 vectors. Integer sums: any order gives the same int32. */
Q8C_INLINE void q4c_hsum8_halves(const __m256i v[8], __m256i *lo, __m256i *hi) {
    __m256i t[4];
    for (int i = 0; i < 4; i++)
        t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                                _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    /* t[i] per half: [v2i (0+2), v2i+1 (0+2), v2i (1+3), v2i+1 (1+3)] */
    *lo = _mm256_add_epi32(_mm256_unpacklo_epi64(t[0], t[1]), _mm256_unpackhi_epi64(t[0], t[1]));
    *hi = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2], t[3]), _mm256_unpackhi_epi64(t[2], t[3]));
}

/* Lane r = the sum of the 8 lanes of v[r] (as q8c_hsum8, 21 instructions). */
Q8C_INLINE __m256i q4c_hsum8(const __m256i v[8]) {
    __m256i e, f;
    q4c_hsum8_halves(v, &e, &f);
    /* e = [rows 0-3, lanes 0-3 | rows 0-3, lanes 4-7], f the same for rows 4-7 */
    return _mm256_add_epi32(_mm256_blend_epi32(e, f, 0xF0), _mm256_permute2x128_si256(e, f, 0x21));
}

/* For vectors whose two 128-bit lanes belong to two different groups: *a lane r = the sum of
 * v[r]'s lanes 0..3, *b lane r = of its lanes 4..7. */
Q8C_INLINE void q4c_hsum8x2(const __m256i v[8], __m256i *a, __m256i *b) {
    __m256i e, f;
    q4c_hsum8_halves(v, &e, &f);
    *a = _mm256_permute2x128_si256(e, f, 0x20);
    *b = _mm256_permute2x128_si256(e, f, 0x31);
}

/* acc += ((float)(isum + *msx) * st) * xs for one group (lane = row). */
Q8C_INLINE __m256 q4c_fold(__m256 acc, __m256i is, const int32_t *msx, __m256 st, float xs,
                           const int mode) {
    if (mode != Q4C_SIGN) is = _mm256_add_epi32(is, _mm256_set1_epi32(*msx));
    const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(is), st), _mm256_set1_ps(xs));
    return _mm256_add_ps(acc, p);
}

/* acc after the float chain of the gb groups from g0 whose integer sums are is[] (lane = row;
 * sr the tile's rows' scales; msx, xs from group g0): q4c_fold in group order. */
Q8C_INLINE __m256 q4c_fold_block(__m256 acc, const __m256i is[8], const float *const sr[8],
                                 const int32_t *msx, const float *xs, size_t g0, size_t gb,
                                 const int mode) {
    __m256 st[8];
    q8c_load_scales(st, sr, g0, gb);
    for (size_t j = 0; j < gb; j++) acc = q4c_fold(acc, is[j], msx + j, st[j], xs[j], mode);
    return acc;
}

/* The 8 row pointers (nibbles and scales) of a tile starting at row n with nr valid rows;
 * rows past the end repeat the last valid one (computed, never stored). */
Q8C_INLINE void q4c_rows(const uint8_t *wr[8], const float *sr[8], const uint8_t *w,
                         const float *ws, size_t n, size_t nr, size_t K, size_t ng) {
    for (size_t r = 0; r < 8; r++) {
        const size_t rr = n + (r < nr ? r : nr - 1);
        wr[r] = w + rr * (K / 2);
        sr[r] = ws + rr * ng;
    }
}

#endif
