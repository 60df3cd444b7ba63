/* IQ4_NL GEMV, scalar (the reference of the IQ4 arithmetic (iq4_common.h)). */
#include "../iq4_common.h"

void if_iq4nl_gemv_1x1_scalar(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                              const uint8_t *w, size_t n0, size_t n1, size_t K) {
    (void)xsum;
    ifq_gemv_scalar(0, out, xq, xd, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_iq4nl_gemv_1x1_scalar = {
    .name = "iq4nl_gemv_1x1_scalar",
    .mr = 1,
    .nr = 1,
    .run = if_iq4nl_gemv_1x1_scalar};
