/* IQ4_XS GEMV, dotprod (iq4_neon.h's body; SDOT of the signed levels). */
#include "../iq4_neon.h"

void if_iq4xs_gemv_1x4_dotprod(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                               const uint8_t *w, size_t n0, size_t n1, size_t K) {
    (void)xsum;
    ifqn_gemm(1, out, 0, xq, xd, 1, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_iq4xs_gemv_1x4_dotprod = {
    .name = "iq4xs_gemv_1x4_dotprod",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP,
    .mr = 1,
    .nr = 4,
    .run = if_iq4xs_gemv_1x4_dotprod};
