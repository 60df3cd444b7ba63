/* Q6_K GEMV, AVX-512 VNNI (-mavx512f -mavx512bw -mavx512vl -mavx512vnni): kquant_gemv_avx512.h's
 * body with Q6_K's block step (ifkz_gemv_q6): 4 weight rows per tile, 4 blocks a step, on the
 * file's 210-byte blocks, per row and sub-block VPMADDUBSW of the unsigned 6-bit values
 * u = q + 32 and VPDPWSSD with the int8 scale spread by VPERMW, the 32 * sum(x) part of u taken
 * off with one VPMADDWD per row; then, lane = (block, row), (d * xd) * sumi, added to each
 * row's acc block by block, the scalar kernel's order. */
#include "../kquant_gemv_avx512.h"

void if_q6k_gemv_1x4_avx512_vnni(float *out, const int8_t *xq, const float *xd,
                                 const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                 size_t K) {
    ifkz_gemv(out, xq, xd, xsum, w, n0, n1, K, IFKZ_Q6K);
}

const if_kq_gemv_kernel if_k_q6k_gemv_1x4_avx512_vnni = {.name = "q6k_gemv_1x4_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 1, .nr = 4,
    .run = if_q6k_gemv_1x4_avx512_vnni};
