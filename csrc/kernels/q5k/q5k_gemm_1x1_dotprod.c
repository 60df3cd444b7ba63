/* Q5_K GEMM, Armv8.2 dotprod: the tier's GEMV per activation row (the same per-output
 * arithmetic; a GEMM that shares each weight load across rows is later work). */
#include "../kquant_common.h"

void if_q5k_gemm_1x1_dotprod(float *out, size_t ldo, const int8_t *xq, const float *xd,
                             const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                             size_t K) {
    for (size_t m = 0; m < M; m++)
        if_q5k_gemv_1x1_dotprod(out + m * ldo, xq + m * K, xd + m * (K / IF_QK),
                                xsum + m * (K / 16), w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q5k_gemm_1x1_dotprod = {.name = "q5k_gemm_1x1_dotprod",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP, .mr = 1, .nr = 1,
    .run = if_q5k_gemm_1x1_dotprod};
