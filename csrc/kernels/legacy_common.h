/* legacy_common.h - GGUF's legacy blocks of 32 values (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) as the legacy
 * kernels read them in place (see isaforge.h, "Legacy blocks read as stored"): the field
 * offsets of each type and the scalar row, the reference every tier equals bit for bit. */
#ifndef IF_LEGACY_COMMON_H
#define IF_LEGACY_COMMON_H

#include "kquant_common.h"

/* One type's block: its bytes, whether it has a minimum (Q4_1, Q5_1), the offset of qh (0:
 * none; Q5_0 and Q5_1), and of the 16 nibble bytes. */
typedef struct ifl_type {
    size_t bb;
    int min;
    size_t qh, qs;
} ifl_type;
#define IFL_Q40 ((ifl_type){IF_Q40_BLOCK_BYTES, 0, 0, 2})
#define IFL_Q41 ((ifl_type){IF_Q41_BLOCK_BYTES, 1, 0, 4})
#define IFL_Q50 ((ifl_type){IF_Q50_BLOCK_BYTES, 0, 2, 6})
#define IFL_Q51 ((ifl_type){IF_Q51_BLOCK_BYTES, 1, 4, 8})
/* Q8_0 for the x86 GEMM body (legacy_gemm_x86.h, signed values at byte 2); ifl_row does not
 * read it: the scalar Q8_0 kernels are ifl_row_q80's. */
#define IFL_Q80 ((ifl_type){IF_Q80_BLOCK_BYTES, 0, 0, 2})

/* The unsigned value j (0..31) of a block: nibble j % 16 of byte j % 16 (low for j < 16), with
 * bit j of the little-endian qh word as bit 4 for the five-bit types. */
static inline int32_t ifl_u(ifl_type t, const uint8_t *blk, size_t j) {
    const uint8_t q = blk[t.qs + j % 16];
    int32_t u = j < 16 ? (q & 15) : (q >> 4);
    if (t.qh) u |= ((blk[t.qh + j / 8] >> (j % 8)) & 1) << 4;
    return u;
}

/* One row's dot product with one L8 activation row (xq, xd per 32, xsum per 16). Per block:
 * dot = sum_j u_j xq_j, xs = xsum[2b] + xsum[2b + 1] (integers, exact); without a minimum
 * acc = acc + (d * xd[b]) * (float)(dot - z xs), z = 8 (4 bits) or 16 (5 bits); with one
 * acc = (acc + (d * xd[b]) * (float)dot) + (m * xd[b]) * (float)xs. */
static inline float ifl_row(ifl_type t, const uint8_t *row, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t nb) {
    const int32_t z = t.qh ? 16 : 8;
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * t.bb;
        const int8_t *x = xq + b * IF_QL;
        int32_t dot = 0;
        for (size_t j = 0; j < IF_QL; j++) dot += ifl_u(t, blk, j) * x[j];
        const int32_t xs = (int32_t)xsum[2 * b] + xsum[2 * b + 1];
        const float d = ifk_f16(blk);
        if (t.min) {
            const float m = ifk_f16(blk + 2);
            acc = (acc + (d * xd[b]) * (float)dot) + (m * xd[b]) * (float)xs;
        } else {
            acc = acc + (d * xd[b]) * (float)(dot - z * xs);
        }
    }
    return acc;
}

/* The scalar GEMV and GEMM of one type. */
static inline void ifl_gemv_scalar(ifl_type t, float *out, const int8_t *xq, const float *xd,
                                   const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                   size_t K) {
    const size_t nb = K / IF_QL;
    for (size_t n = n0; n < n1; n++) out[n] = ifl_row(t, w + n * nb * t.bb, xq, xd, xsum, nb);
}
static inline void ifl_gemm_scalar(ifl_type t, float *out, size_t ldo, const int8_t *xq,
                                   const float *xd, const int16_t *xsum, size_t M, const uint8_t *w,
                                   size_t n0, size_t n1, size_t K) {
    for (size_t m = 0; m < M; m++)
        ifl_gemv_scalar(t, out + m * ldo, xq + m * K, xd + m * (K / IF_QL), xsum + m * (K / 16), w,
                        n0, n1, K);
}

/* Q8_0 (34 bytes: f16 d, 32 int8 values). One row's dot product with one L8 activation row:
 * per block dot = sum_j q_j xq_j (int32, exact: at most 32 * 128 * 127), then
 * acc = acc + (d * xd[b]) * (float)dot, Q4_0's float step with no zero point. */
static inline float ifl_row_q80(const uint8_t *row, const int8_t *xq, const float *xd, size_t nb) {
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * IF_Q80_BLOCK_BYTES;
        const int8_t *x = xq + b * IF_QL;
        int32_t dot = 0;
        for (size_t j = 0; j < IF_QL; j++) dot += (int32_t)(int8_t)blk[2 + j] * x[j];
        acc = acc + (ifk_f16(blk) * xd[b]) * (float)dot;
    }
    return acc;
}
static inline void ifl_gemv_q80_scalar(float *out, const int8_t *xq, const float *xd,
                                       const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL;
    for (size_t n = n0; n < n1; n++)
        out[n] = ifl_row_q80(w + n * nb * IF_Q80_BLOCK_BYTES, xq, xd, nb);
}
static inline void ifl_gemm_q80_scalar(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                       size_t M, const uint8_t *w, size_t n0, size_t n1,
                                       size_t K) {
    for (size_t m = 0; m < M; m++)
        ifl_gemv_q80_scalar(out + m * ldo, xq + m * K, xd + m * (K / IF_QL), w, n0, n1, K);
}

#endif
