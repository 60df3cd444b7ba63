/* Q6_K GEMM, AVX-512 VNNI (kquant_gemm_avx512.h's outer-product body: per 16-row tile and
 * block the values expanded once as [k / 4][row][4 bytes], then 8 activation rows at a time
 * by VPDPBUSD against the activations' broadcast 4-byte groups, no horizontal reduction). */
#include "../kquant_gemm_avx512.h"

void if_q6k_gemm_8x16_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                  const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                  size_t n1, size_t K) {
    ifkg_gemm(out, ldo, xq, xd, xsum, M, w, n0, n1, K, IFKG_Q6K, 0);
}

const if_kq_gemm_kernel if_k_q6k_gemm_8x16_avx512_vnni = {.name = "q6k_gemm_8x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 8, .nr = 16,
    .run = if_q6k_gemm_8x16_avx512_vnni};
