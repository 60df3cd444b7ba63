/* Q6_K GEMM, Armv8.6 I8MM (kquant_i8mm.h's body): 2 activation rows x 2 weight rows
 * per SMMLA tile. */
#include "../kquant_i8mm.h"

void if_q6k_gemm_2x2_i8mm(float *out, size_t ldo, const int8_t *xq, const float *xd,
                          const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                          size_t K) {
    ifki_gemm(IFKN_Q6K, out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q6k_gemm_2x2_i8mm = {.name = "q6k_gemm_2x2_i8mm",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP | IF_FEAT_I8MM, .mr = 2, .nr = 2,
    .run = if_q6k_gemm_2x2_i8mm};
