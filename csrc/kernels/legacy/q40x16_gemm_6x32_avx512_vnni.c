/* Q4_0 GEMM on 16-row groups (if_q40_pack_x16), avx512_vnni: legacy_gemm_x86.h's body, whose
 * block expansion is then 4 aligned loads split into low and high nibbles, two groups side by
 * side, 6 activation rows a step. */
#define IFLG_MR 6
#include "../legacy_gemm_x86.h"

void if_q40x16_gemm_6x32_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                     const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                     size_t n1, size_t K) {
    iflg_gemm(IFL_Q40, iflg_u4, 8, out, ldo, xq, xd, xsum, M, w, n0, n1, K, 1);
}

const if_kq_gemm_kernel if_k_q40x16_gemm_6x32_avx512_vnni = {
    .name = "q40x16_gemm_6x32_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 6, .nr = 32,
    .run = if_q40x16_gemm_6x32_avx512_vnni};
