/* Q8_0 GEMV, Armv8.0 NEON without SDOT (legacy_smull.h's body). */
#include "../legacy_smull.h"

void if_q80_gemv_1x4_neon(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                          const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifls_gemv(IFL_Q80, out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q80_gemv_1x4_neon = {.name = "q80_gemv_1x4_neon",
    .requires = IF_FEAT_ASIMD, .mr = 1, .nr = 4,
    .run = if_q80_gemv_1x4_neon};
