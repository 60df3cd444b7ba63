/* Q6_K GEMM on 16-row groups (if_kq_pack_x16), AVX-512 VNNI: kquant_gemm_avx512.h's body, whose
 * block expansion is then one aligned load per dword of the 16 rows (no transpose), so the
 * same bits as the file-layout kernel. n0 is a multiple of 16 and whole groups are read. */
#include "../kquant_gemm_avx512.h"

void if_q6kx16_gemm_8x16_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                     const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                     size_t n1, size_t K) {
    ifkg_gemm(out, ldo, xq, xd, xsum, M, w, n0, n1, K, IFKG_Q6K, 1);
}

const if_kq_gemm_kernel if_k_q6kx16_gemm_8x16_avx512_vnni = {.name = "q6kx16_gemm_8x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 8, .nr = 16,
    .run = if_q6kx16_gemm_8x16_avx512_vnni};
