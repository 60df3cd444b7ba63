/* 4-bit codebook GEMV, AVX2 (-mavx2 -mfma). Tile: 1 activation row x 8 weight rows (one ymm
 * of 8 float accumulators, lane = output row). Per group and row, each block of 32 nibbles is
 * expanded to int8 by a VPSHUFB codebook lookup (q4_avx2_common.h) and dotted with the
 * activation by the Q8 kernels' sign trick (VPMADDUBSW + VPMADDWD; u8 = |x| once per 32 bytes,
 * shared by the 8 rows); the 8 rows' int32 vectors are reduced to one vector of isums
 * (lane = row), and each lane adds ((float)isum * ws) * xs in group order, exactly as
 * q4_gemv_1x1_scalar. The weight stream is prefetched Q8C_PFD tiles ahead. */
#include "../q4_avx2_common.h"

void if_q4_gemv_1x8_avx2(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                         const float *ws, const int8_t *cb, size_t n0, size_t n1, size_t K,
                         size_t gs) {
    if (gs == 0 || gs % 32 || K % gs) {
        if_q4_gemv_1x1_scalar(out, xq, xs, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs;
    const __m256i cbv = q4c_codebook(cb);
    for (size_t n = n0; n < n1; n += 8) {
        const size_t nr = n1 - n < 8 ? n1 - n : 8;
        const uint8_t *wr[8];
        const float *sr[8];
        q4c_rows(wr, sr, w, ws, n, nr, K, ng);
        /* a full tile's 8 rows are contiguous: 4 bytes of the tile per value index k */
        const uintptr_t pf = q8c_addr(w, (n + 8 * Q8C_PFD) * (K / 2));
        __m256 acc = _mm256_setzero_ps();
        for (size_t g0 = 0; g0 < ng; g0 += 8) {
            const size_t gb = ng - g0 < 8 ? ng - g0 : 8;
            __m256 st[8];
            q8c_load_scales(st, sr, g0, gb);
            for (size_t j = 0; j < gb; j++) {
                __m256i v[8];
                for (int r = 0; r < 8; r++) v[r] = _mm256_setzero_si256();
                const size_t k0 = (g0 + j) * gs;
                for (size_t k = k0; k < k0 + gs; k += 32) {
                    q8c_prefetch(pf + 4 * k);
                    q8c_prefetch(pf + 4 * k + 64);
                    const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + k));
                    const __m256i ax = _mm256_abs_epi8(x);
                    for (int r = 0; r < 8; r++)
                        v[r] = q8c_dot(v[r], ax, _mm256_sign_epi8(q4c_expand(wr[r] + k / 2, cbv), x));
                }
                const __m256i is = q8c_hsum8(v);
                const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(is), st[j]),
                                               _mm256_set1_ps(xs[g0 + j]));
                acc = _mm256_add_ps(acc, p);
            }
        }
        q8c_store_out(out + n, acc, nr);
    }
}

const if_q4_gemv_kernel if_k_q4_gemv_1x8_avx2 = {.name = "q4_gemv_1x8_avx2",
    .requires = IF_FEATS_AVX2, .mr = 1, .nr = 8, .run = if_q4_gemv_1x8_avx2};
