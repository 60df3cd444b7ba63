/* q8_sme2_common.h - pieces shared by the SME2 GEMV and GEMM (static/macros only; included by
 * files compiled with the sme2 tier flags). */
#ifndef ISAFORGE_Q8_SME2_COMMON_H
#define ISAFORGE_Q8_SME2_COMMON_H

#include <arm_sme.h>

#define MAX_VL 64 /* 32-bit lanes at the architectural maximum SVL of 2048 bits */

/* Load n rows of a ZA tile horizontally: row r <- 32-bit words [k, k+VL) of base + r * stride
 * (bytes), lanes past `lim` words off. Rows >= n keep stale data; each caller makes sure such
 * rows are masked out by its SMOPA/SDOT predicates or only feed lanes that are never stored. */
#define LOAD_ROWS(tile, base, stride, n, k, lim)                                              \
    do {                                                                                      \
        const svbool_t pl_ = svwhilelt_b32_u64((k), (lim));                                   \
        const char *p_ = (const char *)(base) + 4 * (k);                                      \
        for (size_t r_ = 0; r_ < (n); r_++)                                                   \
            svld1_hor_za32((tile), (uint32_t)r_, pl_, p_ + r_ * (stride));                    \
    } while (0)

/* The SME2 GEMMs' (q8_gemm_vlxvl_sme2.c, q4_gemm_vlxvl_sme2.c) readout of one output row for
 * group g, in a scope holding pw (the lanes' predicate), wsv (the weight scales), acc and vl:
 * acc[row] += (cvt(isums) * ws_vec) * xs_scalar, with two rounded multiplies and a rounded
 * add, exactly the scalar order per lane (lane = output n). */
#define READOUT_ROW(isums, row, xscale)                                                        \
    do {                                                                                      \
        svfloat32_t p_ = svmul_f32_x(pw, svcvt_f32_s32_x(pw, (isums)), wsv);                  \
        p_ = svmul_n_f32_x(pw, p_, (xscale));                                                 \
        float *a_ = acc + (row) * vl;                                                         \
        svst1_f32(pw, a_, svadd_f32_x(pw, svld1_f32(pw, a_), p_));                            \
    } while (0)

#endif
