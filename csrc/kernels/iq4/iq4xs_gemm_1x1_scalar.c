/* IQ4_XS GEMM, scalar (the reference of the IQ4 arithmetic (iq4_common.h)). */
#include "../iq4_common.h"

void if_iq4xs_gemm_1x1_scalar(float *out, size_t ldo, const int8_t *xq, const float *xd,
                              const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                              size_t n1, size_t K) {
    (void)xsum;
    ifq_gemm_scalar(1, out, ldo, xq, xd, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_iq4xs_gemm_1x1_scalar = {
    .name = "iq4xs_gemm_1x1_scalar",
    .mr = 1,
    .nr = 1,
    .run = if_iq4xs_gemm_1x1_scalar};
