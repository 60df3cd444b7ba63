/* Q6_K GEMV, avx-vnni (kquant_avx2.h's body; the int16 pair product-sums by VPDPWSSD). */
#include "../kquant_avx2.h"

void if_q6k_gemv_1x8_avx_vnni(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                          const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifky_q6k(out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q6k_gemv_1x8_avx_vnni = {.name = "q6k_gemv_1x8_avx_vnni",
    .requires = IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI, .mr = 1, .nr = 8, .run = if_q6k_gemv_1x8_avx_vnni};
