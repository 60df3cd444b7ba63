/* Q8_0 GEMM, Armv8.0 NEON without SDOT (legacy_smull.h's GEMM body): a tile of 4 activation
 * rows x 4 weight rows. */
#include "../legacy_smull.h"

void if_q80_gemm_4x4_neon(float *out, size_t ldo, const int8_t *xq, const float *xd,
                          const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                          size_t K) {
    ifls_gemm(IFL_Q80, out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q80_gemm_4x4_neon = {.name = "q80_gemm_4x4_neon",
    .requires = IF_FEAT_ASIMD, .mr = 4, .nr = 4,
    .run = if_q80_gemm_4x4_neon};
