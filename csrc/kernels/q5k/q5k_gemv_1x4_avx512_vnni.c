/* Q5_K GEMV, AVX-512 VNNI (-mavx512f -mavx512bw -mavx512vl -mavx512vnni): kquant_gemv_avx512.h's
 * 4-row body (ifkz_gemv4_q45 with q5 = 1: 4 rows per tile, 4 blocks a step) on the file's
 * 176-byte blocks, Q4_K's block step with each value's bit 4 from qh by VPTESTMB and a masked
 * VPADDB of 16. Values 0..31 against int8 activations keep VPDPBUSD's dwords within
 * 4 * 31 * 128 < 2^15 (VPACKSSDW exact); the scales, mins and float step are Q4_K's. */
#include "../kquant_gemv_avx512.h"

void if_q5k_gemv_1x4_avx512_vnni(float *out, const int8_t *xq, const float *xd,
                                 const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                 size_t K) {
    ifkz_gemv(out, xq, xd, xsum, w, n0, n1, K, IFKZ_Q5K);
}

const if_kq_gemv_kernel if_k_q5k_gemv_1x4_avx512_vnni = {.name = "q5k_gemv_1x4_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 1, .nr = 4,
    .run = if_q5k_gemv_1x4_avx512_vnni};
