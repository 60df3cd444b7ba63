/* Q5_1 GEMM, Armv8.2 dotprod (legacy_neon.h's GEMM body). */
#include "../legacy_neon.h"

void if_q51_gemm_1x4_dotprod(float *out, size_t ldo, const int8_t *xq, const float *xd,
                             const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                             size_t K) {
    ifln_gemm(IFL_Q51, out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q51_gemm_1x4_dotprod = {.name = "q51_gemm_1x4_dotprod",
                                                     .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP,
                                                     .mr = 1,
                                                     .nr = 4,
                                                     .run = if_q51_gemm_1x4_dotprod};
