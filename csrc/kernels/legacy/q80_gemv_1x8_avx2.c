/* Q8_0 GEMV, avx2 (legacy_q80_avx2.h's body; the products by VPSIGNB + VPMADDUBSW + VPMADDWD on
 * the signed values). */
#include "../legacy_q80_avx2.h"

void if_q80_gemv_1x8_avx2(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                          const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifly_gemv80(out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q80_gemv_1x8_avx2 = {.name = "q80_gemv_1x8_avx2",
                                                  .requires = IF_FEATS_AVX2,
                                                  .mr = 1,
                                                  .nr = 8,
                                                  .run = if_q80_gemv_1x8_avx2};
