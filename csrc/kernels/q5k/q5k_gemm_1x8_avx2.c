/* Q5_K GEMM, avx2 (kquant_avx2.h's GEMM body: each block of the 8-row tile unpacked, the qh bit
 * joined to each value, once for every activation row; the int16 pair product-sums by
 * VPMADDWD + VPADDD). */
#include "../kquant_avx2.h"

void if_q5k_gemm_1x8_avx2(float *out, size_t ldo, const int8_t *xq, const float *xd,
                          const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                          size_t K) {
    ifky_gemm(out, ldo, xq, xd, xsum, M, w, n0, n1, K, IFKY_Q5K);
}

const if_kq_gemm_kernel if_k_q5k_gemm_1x8_avx2 = {.name = "q5k_gemm_1x8_avx2",
    .requires = IF_FEATS_AVX2, .mr = 1, .nr = 8, .run = if_q5k_gemm_1x8_avx2};
