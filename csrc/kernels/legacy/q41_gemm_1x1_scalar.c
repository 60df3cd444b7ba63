/* Q4_1 GEMM, scalar: the GEMV per activation row (legacy_common.h). */
#include "../legacy_common.h"

void if_q41_gemm_1x1_scalar(float *out, size_t ldo, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                            size_t K) {
    ifl_gemm_scalar(IFL_Q41, out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q41_gemm_1x1_scalar = {
    .name = "q41_gemm_1x1_scalar", .mr = 1, .nr = 1, .run = if_q41_gemm_1x1_scalar};
