/* iq4_neon.h - the Armv8.2 dotprod IQ4_NL and IQ4_XS GEMV and GEMM bodies (iq4/ *_dotprod.c;
 * the i8mm and sme2 tiers run them too). 4 rows per pass on the file's blocks: a nibble
 * becomes its signed level by TBL from the 16-entry table, SDOT multiplies levels and
 * activations as they are (signed x signed, no bias), IQ4_XS's sub-block dots times their
 * scales (ls - 32) in int32 lanes; the 4 rows' product vectors reduced together by pairwise
 * adds (lane r = row r), the float step the scalar kernel's, lane-wise. */
#ifndef IF_IQ4_NEON_H
#define IF_IQ4_NEON_H

#include <arm_neon.h>

#include "iq4_common.h"

/* A 16-byte nibble run's 32 levels: values 0..15 (lo) and 16..31 (hi). */
static inline void ifqn_levels(int8x16_t tab, const uint8_t *q, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t v = vld1q_u8(q);
    *lo = vqtbl1q_s8(tab, vandq_u8(v, vdupq_n_u8(15)));
    *hi = vqtbl1q_s8(tab, vshrq_n_u8(v, 4));
}

/* One run's dot products with 32 activations (4 int32 lanes whose sum is the dot). */
static inline int32x4_t ifqn_dot(int8x16_t tab, const uint8_t *q, const int8_t *x) {
    int8x16_t lo, hi;
    ifqn_levels(tab, q, &lo, &hi);
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, vld1q_s8(x)), hi, vld1q_s8(x + 16));
}

/* Store the first nr lanes of v at out. */
static inline void ifqn_store(float *out, float32x4_t v, size_t nr) {
    float t[4];
    vst1q_f32(t, v);
    for (size_t r = 0; r < nr; r++) out[r] = t[r];
}

static inline size_t ifqn_rows(const uint8_t *rows[4], const uint8_t *w, size_t rowbytes,
                               size_t n, size_t n1) {
    const size_t nr = n1 - n < 4 ? n1 - n : 4;
    for (size_t r = 0; r < 4; r++) rows[r] = w + (n + (r < nr ? r : nr - 1)) * rowbytes;
    return nr;
}

/* One activation row against 4 rows (rows past n1 repeat the last; nr real): out[0..nr). */
static inline void ifqn_tile(int xs, float *out, size_t nr, const uint8_t *const rows[4],
                             const int8_t *xq, const float *xd, size_t nb) {
    const int8x16_t tab = vld1q_s8(ifq_levels);
    const size_t bb = xs ? IF_IQ4XS_BLOCK_BYTES : IF_IQ4NL_BLOCK_BYTES;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (size_t b = 0; b < nb; b++) {
        int32x4_t p[4];
        float d[4];
        for (int r = 0; r < 4; r++) {
            const uint8_t *blk = rows[r] + b * bb;
            d[r] = ifk_f16(blk);
            if (!xs) {
                p[r] = ifqn_dot(tab, blk + 2, xq + b * IF_QL);
                continue;
            }
            int32x4_t a = vdupq_n_s32(0);
            for (size_t j = 0; j < 8; j++)
                a = vmlaq_n_s32(a, ifqn_dot(tab, blk + 8 + 16 * j, xq + b * IF_QK + 32 * j),
                                ifq_xs_scale(blk, j));
            p[r] = a;
        }
        const int32x4_t dot = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));
        const float32x4_t t = vmulq_f32(vld1q_f32(d), vdupq_n_f32(xd[b]));
        acc = vaddq_f32(acc, vmulq_f32(t, vcvtq_f32_s32(dot)));
    }
    ifqn_store(out, acc, nr);
}

static inline void ifqn_gemm(int xs, float *out, size_t ldo, const int8_t *xq, const float *xd,
                             size_t M, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t qb = xs ? IF_QK : IF_QL, nb = K / qb;
    const size_t rowbytes = nb * (xs ? IF_IQ4XS_BLOCK_BYTES : IF_IQ4NL_BLOCK_BYTES);
    for (size_t n = n0; n < n1; n += 4) {
        const uint8_t *rows[4];
        const size_t nr = ifqn_rows(rows, w, rowbytes, n, n1);
        for (size_t m = 0; m < M; m++)
            ifqn_tile(xs, out + m * ldo + n, nr, rows, xq + m * K, xd + m * nb, nb);
    }
}

#endif
