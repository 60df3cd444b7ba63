/* Q4_K GEMM, AVX-512 VNNI (kquant_gemm_avx512.h's outer-product body: per 32-row tile and
 * block the values expanded once as two 16-row halves [k / 4][row][4 bytes], then 6 activation
 * rows at a time by VPDPBUSD against the activations' broadcast 4-byte groups, each feeding
 * both halves, no horizontal reduction; the mins by VPDPBUSD of the 32-value sums' bytes). */
#include "../kquant_gemm_avx512.h"

void if_q4k_gemm_6x32_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                  const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                  size_t n1, size_t K) {
    ifkg_gemm(out, ldo, xq, xd, xsum, M, w, n0, n1, K, IFKG_Q4K, 0);
}

const if_kq_gemm_kernel if_k_q4k_gemm_6x32_avx512_vnni = {.name = "q4k_gemm_6x32_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 6, .nr = 32,
    .run = if_q4k_gemm_6x32_avx512_vnni};
