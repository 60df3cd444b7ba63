/* Q5_K GEMV, avx-vnni (kquant_avx2.h's Q4_K body with the qh bit as bit 4 of each value; the
 * int16 pair product-sums by VPDPWSSD). */
#include "../kquant_avx2.h"

void if_q5k_gemv_1x8_avx_vnni(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                              const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifky_q45k(out, xq, xd, xsum, w, n0, n1, K, 1);
}

const if_kq_gemv_kernel if_k_q5k_gemv_1x8_avx_vnni = {.name = "q5k_gemv_1x8_avx_vnni",
    .requires = IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI, .mr = 1, .nr = 8,
    .run = if_q5k_gemv_1x8_avx_vnni};
