/* Q4_K GEMM, Armv8.0 NEON without SDOT (kquant_neon.h's GEMM body): one weight row
 * at a time, its block unpacked once for every activation row. */
#include "../kquant_neon.h"

void if_q4k_gemm_1x1_neon(float *out, size_t ldo, const int8_t *xq, const float *xd,
                          const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                          size_t K) {
    ifkn_gemm(IFKN_Q4K, out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q4k_gemm_1x1_neon = {.name = "q4k_gemm_1x1_neon",
    .requires = IF_FEAT_ASIMD, .mr = 1, .nr = 1,
    .run = if_q4k_gemm_1x1_neon};
