/* Q8_0 GEMM, avx2 (legacy_q80_avx2.h's GEMM body; the products by VPSIGNB + VPMADDUBSW + VPMADDWD
 * on the signed values). */
#include "../legacy_q80_avx2.h"

void if_q80_gemm_1x8_avx2(float *out, size_t ldo, const int8_t *xq, const float *xd,
                          const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                          size_t K) {
    ifly_gemm80(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q80_gemm_1x8_avx2 = {.name = "q80_gemm_1x8_avx2",
                                                  .requires = IF_FEATS_AVX2,
                                                  .mr = 1,
                                                  .nr = 8,
                                                  .run = if_q80_gemm_1x8_avx2};
