/* Q4_1 GEMV, avx2 (legacy_gemv_x86.h's body, 8-row tiles; products by VPMADDUBSW +
 * VPMADDWD). */
#include "../legacy_gemv_x86.h"

void if_q41_gemv_1x8_avx2(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                          const uint8_t *w, size_t n0, size_t n1, size_t K) {
    iflg_gemv(IFL_Q41, out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q41_gemv_1x8_avx2 = {.name = "q41_gemv_1x8_avx2",
                                                  .requires = IF_FEATS_AVX2,
                                                  .mr = 1,
                                                  .nr = 8,
                                                  .run = if_q41_gemv_1x8_avx2};
