/* Q8_0 GEMV, Armv8.2 dotprod (legacy_neon.h's Q8_0 body: SDOT on the int8 values as stored). */
#include "../legacy_neon.h"

void if_q80_gemv_1x4_dotprod(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                             const uint8_t *w, size_t n0, size_t n1, size_t K) {
    (void)xsum;
    ifln_gemv80(out, xq, xd, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q80_gemv_1x4_dotprod = {.name = "q80_gemv_1x4_dotprod",
                                                     .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP,
                                                     .mr = 1,
                                                     .nr = 4,
                                                     .run = if_q80_gemv_1x4_dotprod};
