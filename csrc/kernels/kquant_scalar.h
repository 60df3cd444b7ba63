/* kquant_scalar.h - the scalar Q4_K / Q5_K GEMV (q4k/q4k_gemv_1x1_scalar.c,
 * q5k/q5k_gemv_1x1_scalar.c: each calls ifks_gemv_q45 with its type), the reference of
 * isaforge.h's K-quant arithmetic for the two types. Plain C: the scalar tier is built with no
 * -march. Q5_K is Q4_K with a fifth bit per value, so one body with a constant flag serves
 * both. */
#ifndef IF_KQUANT_SCALAR_H
#define IF_KQUANT_SCALAR_H

#include "kquant_common.h"

/* One row's dot product with one K8 activation row, one 256-value block at a time. Per block
 * the values (Q4_K: the nibbles; Q5_K, q5 = 1: nibble | qh bit << 4) times the int8
 * activations per 32-value sub-block, times the 6-bit scale, summed in int32 (sumi); the 6-bit
 * mins times the activations' sub-block sums (summ); then the float step. */
static inline float ifks_row_q45(const uint8_t *row, const int8_t *xq, const float *xd,
                                 const int16_t *xsum, size_t nb, const int q5) {
    const size_t bb = q5 ? IF_Q5K_BLOCK_BYTES : IF_Q4K_BLOCK_BYTES;
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * bb, *qh = blk + 16, *qs = blk + (q5 ? 48 : 16);
        const int8_t *x = xq + b * IF_QK;
        const int16_t *bs = xsum + b * 16;
        uint8_t sc[8], m[8];
        ifk_q4k_scales(blk + 4, sc, m);
        int32_t sumi = 0, summ = 0;
        for (size_t c = 0; c < 4; c++) {
            int32_t lo = 0, hi = 0;
            for (size_t l = 0; l < 32; l++) {
                int32_t ql = qs[32 * c + l] & 15, qu = qs[32 * c + l] >> 4;
                if (q5) {
                    ql |= ((qh[l] >> (2 * c)) & 1) << 4;
                    qu |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
                }
                lo += ql * x[64 * c + l];
                hi += qu * x[64 * c + 32 + l];
            }
            sumi += sc[2 * c] * lo + sc[2 * c + 1] * hi;
        }
        for (size_t j = 0; j < 8; j++) summ += m[j] * ((int32_t)bs[2 * j] + bs[2 * j + 1]);
        const float d = ifk_f16(blk), dmin = ifk_f16(blk + 2);
        acc = (acc + (d * xd[b]) * (float)sumi) - (dmin * xd[b]) * (float)summ;
    }
    return acc;
}

/* The GEMV of Q4_K (q5 = 0) or Q5_K (q5 = 1): output rows [n0, n1), one row at a time. */
static inline void ifks_gemv_q45(float *out, const int8_t *xq, const float *xd,
                                 const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                 size_t K, const int q5) {
    const size_t nb = K / IF_QK, bb = q5 ? IF_Q5K_BLOCK_BYTES : IF_Q4K_BLOCK_BYTES;
    for (size_t n = n0; n < n1; n++) out[n] = ifks_row_q45(w + n * nb * bb, xq, xd, xsum, nb, q5);
}

#endif
