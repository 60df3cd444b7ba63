/* Q4_K GEMV, AVX-512 VNNI (-mavx512f -mavx512bw -mavx512vl -mavx512vnni): kquant_gemv_avx512.h's
 * 4-row body (ifkz_gemv4_q45 with q5 = 0: 4 rows per tile, 4 blocks a step) on the file's
 * 144-byte blocks, per row and block 4 VPDPBUSD packed by pairs to words (VPACKSSDW) and
 * 2 VPDPWSSD with the 6-bit scales spread by VPERMW, the mins through the activations' 32-value
 * sums, then the scalar kernel's float step: acc = (acc + (d * xd) * sumi) - (dmin * xd) * summ. */
#include "../kquant_gemv_avx512.h"

void if_q4k_gemv_1x4_avx512_vnni(float *out, const int8_t *xq, const float *xd,
                                 const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                 size_t K) {
    ifkz_gemv(out, xq, xd, xsum, w, n0, n1, K, IFKZ_Q4K);
}

const if_kq_gemv_kernel if_k_q4k_gemv_1x4_avx512_vnni = {.name = "q4k_gemv_1x4_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 1, .nr = 4,
    .run = if_q4k_gemv_1x4_avx512_vnni};
