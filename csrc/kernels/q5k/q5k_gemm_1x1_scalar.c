/* Q5_K GEMM, scalar: the GEMV per activation row (the per-output arithmetic is the GEMV's). */
#include "../kquant_common.h"

void if_q5k_gemm_1x1_scalar(float *out, size_t ldo, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                            size_t K) {
    for (size_t m = 0; m < M; m++)
        if_q5k_gemv_1x1_scalar(out + m * ldo, xq + m * K, xd + m * (K / IF_QK), xsum + m * (K / 16),
                               w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q5k_gemm_1x1_scalar = {.name = "q5k_gemm_1x1_scalar", .mr = 1,
    .nr = 1, .run = if_q5k_gemm_1x1_scalar};
