/* 4-bit codebook GEMM, AVX2 (-mavx2 -mfma). Tile: up to 16 activation rows x 8 weight rows.
 * Per group, the 8 rows' nibbles are expanded once to int8 (VPSHUFB codebook lookup,
 * q4_avx2_common.h) into a small buffer that the tile's activation rows then reuse: each row
 * dots it with the Q8 sign trick (VPMADDUBSW + VPMADDWD) into 8 int32 vectors reduced to
 * one vector of isums (lane = weight row), and its accumulator adds ((float)isum * ws) * xs
 * in group order, exactly as q4_gemv_1x1_scalar. Groups above 256 values fall back to the
 * GEMV kernel row by row (same bits). */
#include "../q4_avx2_common.h"

#define Q4G_MR 16
#define Q4G_MAX_GS 256

void if_q4_gemm_16x8_avx2(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                          const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                          size_t n1, size_t K, size_t gs) {
    const size_t ng = gs ? K / gs : 0;
    if (gs == 0 || gs % 32 || K % gs || gs > Q4G_MAX_GS) {
        for (size_t m = 0; m < M; m++)
            if_q4_gemv_1x8_avx2(out + m * ldo, xq + m * K, xs + m * ng, w, ws, cb, n0, n1, K,
                                gs);
        return;
    }
    const __m256i cbv = q4c_codebook(cb);
    int8_t buf[8][Q4G_MAX_GS] __attribute__((aligned(32)));
    for (size_t m0 = 0; m0 < M; m0 += Q4G_MR) {
        const size_t mb = M - m0 < Q4G_MR ? M - m0 : Q4G_MR;
        for (size_t n = n0; n < n1; n += 8) {
            const size_t nr = n1 - n < 8 ? n1 - n : 8;
            const uint8_t *wr[8];
            const float *sr[8];
            q4c_rows(wr, sr, w, ws, n, nr, K, ng);
            __m256 acc[Q4G_MR];
            for (size_t i = 0; i < mb; i++) acc[i] = _mm256_setzero_ps();
            for (size_t g0 = 0; g0 < ng; g0 += 8) {
                const size_t gb = ng - g0 < 8 ? ng - g0 : 8;
                __m256 st[8];
                q8c_load_scales(st, sr, g0, gb);
                for (size_t j = 0; j < gb; j++) {
                    const size_t k0 = (g0 + j) * gs;
                    for (int r = 0; r < 8; r++)
                        for (size_t k = 0; k < gs; k += 32)
                            _mm256_store_si256((__m256i *)(void *)(buf[r] + k),
                                               q4c_expand(wr[r] + (k0 + k) / 2, cbv));
                    for (size_t i = 0; i < mb; i++) {
                        const int8_t *x = xq + (m0 + i) * K + k0;
                        __m256i v[8];
                        for (int r = 0; r < 8; r++) v[r] = _mm256_setzero_si256();
                        for (size_t k = 0; k < gs; k += 32) {
                            const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(x + k));
                            const __m256i ax = _mm256_abs_epi8(xv);
                            for (int r = 0; r < 8; r++) {
                                const __m256i wv = _mm256_load_si256((const __m256i *)(const void *)(buf[r] + k));
                                v[r] = q8c_dot(v[r], ax, _mm256_sign_epi8(wv, xv));
                            }
                        }
                        const __m256i is = q8c_hsum8(v);
                        const float xsc = xs[(m0 + i) * ng + g0 + j];
                        const __m256 p = _mm256_mul_ps(
                            _mm256_mul_ps(_mm256_cvtepi32_ps(is), st[j]), _mm256_set1_ps(xsc));
                        acc[i] = _mm256_add_ps(acc[i], p);
                    }
                }
            }
            for (size_t i = 0; i < mb; i++) q8c_store_out(out + (m0 + i) * ldo + n, acc[i], nr);
        }
    }
}

const if_q4_gemm_kernel if_k_q4_gemm_16x8_avx2 = {.name = "q4_gemm_16x8_avx2",
    .requires = IF_FEATS_AVX2, .mr = 16, .nr = 8, .run = if_q4_gemm_16x8_avx2};
