/* iq4_common.h - GGUF IQ4_NL (blocks of 32) and IQ4_XS (super-blocks of 256) as the iq4
 * kernels read them in place (see isaforge.h, "IQ4 blocks read as stored"): the 16 levels,
 * IQ4_XS's 6-bit sub-block scales, and the scalar rows, the reference every tier equals bit
 * for bit. */
#ifndef IF_IQ4_COMMON_H
#define IF_IQ4_COMMON_H

#include "kquant_common.h"

/* The 16 non-linear int8 levels a nibble indexes (the same table for both types). */
static const int8_t ifq_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

/* Level j (0..31) of a 16-byte nibble run: the low nibble of q[j] for j < 16, the high one of
 * q[j - 16] otherwise (IQ4_NL's block and each IQ4_XS sub-block alike). */
static inline int32_t ifq_level(const uint8_t *q, size_t j) {
    const uint8_t b = q[j % 16];
    return ifq_levels[j < 16 ? (b & 15) : (b >> 4)];
}

/* IQ4_XS sub-block j's signed scale ls - 32 (-32..31): the low 4 bits from nibble j % 2 of
 * scales_l[j / 2] (byte 4 + j / 2), the top 2 bits from bits 2j, 2j + 1 of the little-endian
 * scales_h word (bytes 2, 3). */
static inline int32_t ifq_xs_scale(const uint8_t *blk, size_t j) {
    const uint32_t sh = (uint32_t)blk[2] | (uint32_t)blk[3] << 8;
    const uint32_t lo = (blk[4 + j / 2] >> (4 * (j % 2))) & 15, hi = (sh >> (2 * j)) & 3;
    return (int32_t)(lo | hi << 4) - 32;
}

/* The 32-value level dot of one nibble run with 32 int8 activations (exact). */
static inline int32_t ifq_dot32(const uint8_t *q, const int8_t *x) {
    int32_t dot = 0;
    for (size_t j = 0; j < 32; j++) dot += ifq_level(q, j) * x[j];
    return dot;
}

/* IQ4_NL row against an L8 activation row (xq, xd per 32): per block dot = sum_j level_j xq_j
 * (int32), then blocks in order from acc = 0: acc = acc + (d * xd[b]) * (float)dot. */
static inline float ifq_nl_row(const uint8_t *row, const int8_t *xq, const float *xd,
                               size_t nb) {
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * IF_IQ4NL_BLOCK_BYTES;
        const int32_t dot = ifq_dot32(blk + 2, xq + b * IF_QL);
        acc = acc + (ifk_f16(blk) * xd[b]) * (float)dot;
    }
    return acc;
}

/* IQ4_XS row against a K8 activation row (xq, xd per 256): per super-block sumi = sum_j
 * (ls_j - 32) dot_j over its 8 sub-blocks (int32, at most 32 * 8 * 32 * 127 * 127 in
 * magnitude), then acc = acc + (d * xd[b]) * (float)sumi. */
static inline float ifq_xs_row(const uint8_t *row, const int8_t *xq, const float *xd,
                               size_t nb) {
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * IF_IQ4XS_BLOCK_BYTES;
        int32_t sumi = 0;
        for (size_t j = 0; j < 8; j++)
            sumi += ifq_xs_scale(blk, j) * ifq_dot32(blk + 8 + 16 * j, xq + b * IF_QK + 32 * j);
        acc = acc + (ifk_f16(blk) * xd[b]) * (float)sumi;
    }
    return acc;
}

/* The scalar GEMV and GEMM of one type (xs: 1 for IQ4_XS). */
static inline void ifq_gemv_scalar(int xs, float *out, const int8_t *xq, const float *xd,
                                   const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / (xs ? IF_QK : IF_QL);
    const size_t rowbytes = nb * (xs ? IF_IQ4XS_BLOCK_BYTES : IF_IQ4NL_BLOCK_BYTES);
    for (size_t n = n0; n < n1; n++)
        out[n] = xs ? ifq_xs_row(w + n * rowbytes, xq, xd, nb)
                    : ifq_nl_row(w + n * rowbytes, xq, xd, nb);
}
static inline void ifq_gemm_scalar(int xs, float *out, size_t ldo, const int8_t *xq,
                                   const float *xd, size_t M, const uint8_t *w, size_t n0,
                                   size_t n1, size_t K) {
    const size_t qb = xs ? IF_QK : IF_QL;
    for (size_t m = 0; m < M; m++)
        ifq_gemv_scalar(xs, out + m * ldo, xq + m * K, xd + m * (K / qb), w, n0, n1, K);
}

#endif
