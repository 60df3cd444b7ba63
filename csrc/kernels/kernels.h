/* kernels.h - declarations of every compiled kernel variant (one translation unit per ISA).
 * Names state op, data types, tile and ISA, e.g. q8_gemv_1x1_scalar. */
#ifndef ISAFORGE_KERNELS_H
#define ISAFORGE_KERNELS_H

#include "isaforge.h"

/* scalar tier: plain C, -O3, no -march (the baseline every other tier must equal) */
void if_quantize_q8_scalar(int8_t *q, float *s, const float *x, size_t K, size_t gs);
void if_q8_gemv_1x1_scalar(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                           const float *ws, size_t n0, size_t n1, size_t K, size_t gs);
void if_q8_gemm_1x1_scalar(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                           const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                           size_t gs);
void if_f32_gemv_1x1_scalar(float *out, const float *x, const float *w, size_t n0, size_t n1,
                            size_t K);

#endif
