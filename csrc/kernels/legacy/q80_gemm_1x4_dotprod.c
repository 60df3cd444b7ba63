/* Q8_0 GEMM, Armv8.2 dotprod (legacy_neon.h's Q8_0 GEMM body). */
#include "../legacy_neon.h"

void if_q80_gemm_1x4_dotprod(float *out, size_t ldo, const int8_t *xq, const float *xd,
                             const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                             size_t K) {
    (void)xsum;
    ifln_gemm80(out, ldo, xq, xd, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q80_gemm_1x4_dotprod = {.name = "q80_gemm_1x4_dotprod",
                                                     .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP,
                                                     .mr = 1,
                                                     .nr = 4,
                                                     .run = if_q80_gemm_1x4_dotprod};
