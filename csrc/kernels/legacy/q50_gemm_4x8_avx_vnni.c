/* Q5_0 GEMM, avx_vnni: legacy_gemm_x86.h's outer-product body, 8 weight rows per 256-bit
 * VPDPBUSD (VEX), 4 activation rows per step. */
#define IFLG_MR 4
#include "../legacy_gemm_x86.h"

void if_q50_gemm_4x8_avx_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                              const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                              size_t n1, size_t K) {
    iflg_gemm(IFL_Q50, iflg_u5, 16, out, ldo, xq, xd, xsum, M, w, n0, n1, K, 0);
}

const if_kq_gemm_kernel if_k_q50_gemm_4x8_avx_vnni = {.name = "q50_gemm_4x8_avx_vnni",
    .requires = IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI, .mr = 4, .nr = 8,
    .run = if_q50_gemm_4x8_avx_vnni};
