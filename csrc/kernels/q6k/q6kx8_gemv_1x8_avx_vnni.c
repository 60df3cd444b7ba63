/* Q6_K GEMV on 8-row groups (if_kq_pack_x8), avx_vnni (kquant_avx2.h's ifkx_q6k: lane = row, the
 * int16 pair product-sums by the row's scale by VPDPWSSD). */
#include "../kquant_avx2.h"

void if_q6kx8_gemv_1x8_avx_vnni(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                            const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifkx_q6k(out, xq, xd, xsum, w, n0, n1, K);
}

const if_kq_gemv_kernel if_k_q6kx8_gemv_1x8_avx_vnni = {.name = "q6kx8_gemv_1x8_avx_vnni",
    .requires = IF_FEATS_AVX2 | IF_FEAT_AVX_VNNI, .mr = 1, .nr = 8, .run = if_q6kx8_gemv_1x8_avx_vnni};
