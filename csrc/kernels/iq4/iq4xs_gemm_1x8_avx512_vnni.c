/* IQ4_XS GEMM, avx512_vnni (iq4_avx2.h; EVEX 256-bit: VPDPBUSD of level + 128, VPMULLD). */
#include "../iq4_avx2.h"

void if_iq4xs_gemm_1x8_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                   const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                   size_t n1, size_t K) {
    ifqy_xs_gemm(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

const if_kq_gemm_kernel if_k_iq4xs_gemm_1x8_avx512_vnni = {
    .name = "iq4xs_gemm_1x8_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 1,
    .nr = 8,
    .run = if_iq4xs_gemm_1x8_avx512_vnni};
