/* Q8_0 GEMM, Armv8.6 I8MM (legacy_i8mm.h's body): 8 activation rows x 2 weight rows
 * per tile (2 x 2 per SMMLA). */
#include "../legacy_i8mm.h"

void if_q80_gemm_8x2_i8mm(float *out, size_t ldo, const int8_t *xq, const float *xd,
                          const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                          size_t K) {
    iflm_gemm(IFL_Q80, out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q80_gemm_8x2_i8mm = {.name = "q80_gemm_8x2_i8mm",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP | IF_FEAT_I8MM, .mr = 8, .nr = 2,
    .run = if_q80_gemm_8x2_i8mm};
