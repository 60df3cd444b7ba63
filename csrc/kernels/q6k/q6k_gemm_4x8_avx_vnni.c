/* Q6_K GEMM, avx-vnni (kquant_gemm_avx2.h's outer-product body: per 8-row tile and block the
 * values expanded once as [k / 4][row][4 bytes], then 4 activation rows at a time against
 * their broadcast 4-byte groups, the u8 x s8 product-sums by VPDPBUSD). */
#include "../kquant_gemm_avx2.h"

void if_q6k_gemm_4x8_avx_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                          const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                          size_t K) {
    ifkyg_gemm(out, ldo, xq, xd, xsum, M, w, n0, n1, K, IFKY_Q6K, 0);
}

const if_kq_gemm_kernel if_k_q6k_gemm_4x8_avx_vnni = {.name = "q6k_gemm_4x8_avx_vnni",
    .requires = IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI, .mr = 4, .nr = 8,
    .run = if_q6k_gemm_4x8_avx_vnni};
