/* IQ4_NL GEMM, dotprod (iq4_neon.h's body; SDOT of the signed levels). */
#include "../iq4_neon.h"

void if_iq4nl_gemm_1x4_dotprod(float *out, size_t ldo, const int8_t *xq, const float *xd,
                               const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                               size_t n1, size_t K) {
    (void)xsum;
    ifqn_gemm(0, out, ldo, xq, xd, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_iq4nl_gemm_1x4_dotprod = {
    .name = "iq4nl_gemm_1x4_dotprod",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP,
    .mr = 1,
    .nr = 4,
    .run = if_iq4nl_gemm_1x4_dotprod};
