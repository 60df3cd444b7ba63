/* Q8_0 GEMV, avx512_vnni (legacy_gemv_x86.h's body: 4-row tiles read 4 blocks a step by
 * iflg_step80, the products by VPDPBUSD on value + 128, 512-bit). */
#include "../legacy_gemv_x86.h"

void if_q80_gemv_1x4_avx512_vnni(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                                 const uint8_t *w, size_t n0, size_t n1, size_t K) {
    iflg_gemv(IFL_Q80, out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q80_gemv_1x4_avx512_vnni = {
    .name = "q80_gemv_1x4_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 1,
    .nr = 4,
    .run = if_q80_gemv_1x4_avx512_vnni};
