/* Q8_0 GEMM, scalar: the GEMV per activation row (legacy_common.h). */
#include "../legacy_common.h"

void if_q80_gemm_1x1_scalar(float *out, size_t ldo, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                            size_t K) {
    (void)xsum; /* signed values: no zero point, the sums are not needed */
    ifl_gemm_q80_scalar(out, ldo, xq, xd, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q80_gemm_1x1_scalar = {
    .name = "q80_gemm_1x1_scalar", .mr = 1, .nr = 1, .run = if_q80_gemm_1x1_scalar};
