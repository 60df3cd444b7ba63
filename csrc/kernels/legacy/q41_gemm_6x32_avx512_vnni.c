/* Q4_1 GEMM, avx512_vnni: legacy_gemm_x86.h's outer-product body, two 16-row tiles
 * side by side (each broadcast activation feeds two 512-bit VPDPBUSD), 6 activation rows a step. */
#define IFLG_MR 6
#include "../legacy_gemm_x86.h"

void if_q41_gemm_6x32_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                  const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                  size_t n1, size_t K) {
    iflg_gemm(IFL_Q41, iflg_u4, 0, out, ldo, xq, xd, xsum, M, w, n0, n1, K, 0);
}

const if_kq_gemm_kernel if_k_q41_gemm_6x32_avx512_vnni = {.name = "q41_gemm_6x32_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 6, .nr = 32,
    .run = if_q41_gemm_6x32_avx512_vnni};
