/* Q8_0 GEMM, avx512_vnni: legacy_gemm_x86.h's outer-product body, 16 weight rows per 512-bit
 * VPDPBUSD on value + 128, 8 activation rows per step. */
#define IFLG_MR 8
#include "../legacy_gemm_x86.h"

void if_q80_gemm_8x16_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                  const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                  size_t n1, size_t K) {
    iflg_gemm(IFL_Q80, iflg_s8, IFLG_Z80, out, ldo, xq, xd, xsum, M, w, n0, n1, K, 0);
}

const if_kq_gemm_kernel if_k_q80_gemm_8x16_avx512_vnni = {.name = "q80_gemm_8x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 8, .nr = 16,
    .run = if_q80_gemm_8x16_avx512_vnni};
