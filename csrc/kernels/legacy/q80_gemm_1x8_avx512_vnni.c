/* Q8_0 GEMM, avx512_vnni (legacy_q80_avx2.h's GEMM body; the products by VPDPBUSD on value + 128,
 * EVEX 256-bit). */
#include "../legacy_q80_avx2.h"

void if_q80_gemm_1x8_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                 const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                 size_t n1, size_t K) {
    ifly_gemm80(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_q80_gemm_1x8_avx512_vnni = {
    .name = "q80_gemm_1x8_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 1,
    .nr = 8,
    .run = if_q80_gemm_1x8_avx512_vnni};
