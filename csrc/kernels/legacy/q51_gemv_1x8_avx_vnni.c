/* Q5_1 GEMV, avx_vnni (legacy_gemv_x86.h's body, 8-row tiles; the products by VPDPBUSD, VEX). */
#include "../legacy_gemv_x86.h"

void if_q51_gemv_1x8_avx_vnni(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                              const uint8_t *w, size_t n0, size_t n1, size_t K) {
    iflg_gemv(IFL_Q51, out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q51_gemv_1x8_avx_vnni = {.name = "q51_gemv_1x8_avx_vnni",
                                                      .requires = IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI,
                                                      .mr = 1,
                                                      .nr = 8,
                                                      .run = if_q51_gemv_1x8_avx_vnni};
