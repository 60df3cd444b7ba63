/* Q5_1 GEMM, avx2: legacy_gemm_x86.h's outer-product body, 8 weight rows per 256-bit
 * VPMADDUBSW + VPMADDWD, 4 activation rows per step. */
#define IFLG_MR 4
#include "../legacy_gemm_x86.h"

void if_q51_gemm_4x8_avx2(float *out, size_t ldo, const int8_t *xq, const float *xd,
                          const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                          size_t n1, size_t K) {
    iflg_gemm(IFL_Q51, iflg_u5, 0, out, ldo, xq, xd, xsum, M, w, n0, n1, K, 0);
}

const if_kq_gemm_kernel if_k_q51_gemm_4x8_avx2 = {.name = "q51_gemm_4x8_avx2",
    .requires = IF_FEATS_AVX2, .mr = 4, .nr = 8,
    .run = if_q51_gemm_4x8_avx2};
