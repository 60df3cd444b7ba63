/* Q5_K GEMV, Armv8.0 NEON without SDOT (kquant_neon.h's body): one weight row at a
 * time, the int8 products through SMULL / SMLAL2 / SADALP. */
#include "../kquant_neon.h"

void if_q5k_gemv_1x1_neon(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                          const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifkn_gemv(IFKN_Q5K, out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q5k_gemv_1x1_neon = {.name = "q5k_gemv_1x1_neon",
    .requires = IF_FEAT_ASIMD, .mr = 1, .nr = 1,
    .run = if_q5k_gemv_1x1_neon};
