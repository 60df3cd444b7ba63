/* Q6_K GEMM on 8-row groups (if_kq_pack_x8), avx2 (kquant_gemm_avx2.h's body, whose block
 * expansion then loads the groups' dwords instead of transposing rows; the u8 x s8
 * product-sums by two VPMADDUBSW added in int16, then VPMADDWD by ones). */
#include "../kquant_gemm_avx2.h"

void if_q6kx8_gemm_4x8_avx2(float *out, size_t ldo, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                            size_t n1, size_t K) {
    ifkyg_gemm(out, ldo, xq, xd, xsum, M, w, n0, n1, K, IFKY_Q6K, 1);
}

const if_kq_gemm_kernel if_k_q6kx8_gemm_4x8_avx2 = {.name = "q6kx8_gemm_4x8_avx2",
    .requires = IF_FEATS_AVX2, .mr = 4, .nr = 8, .run = if_q6kx8_gemm_4x8_avx2};
