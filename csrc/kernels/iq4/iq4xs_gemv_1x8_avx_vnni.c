/* IQ4_XS GEMV, avx_vnni (iq4_avx2.h; VEX VNNI: VPDPBUSD of level + 128, VPMULLD by the scales). */
#include "../iq4_avx2.h"

void if_iq4xs_gemv_1x8_avx_vnni(float *out, const int8_t *xq, const float *xd,
                                const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                size_t K) {
    ifqy_xs_gemv(out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_iq4xs_gemv_1x8_avx_vnni = {
    .name = "iq4xs_gemv_1x8_avx_vnni",
    .requires = IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI,
    .mr = 1,
    .nr = 8,
    .run = if_iq4xs_gemv_1x8_avx_vnni};
