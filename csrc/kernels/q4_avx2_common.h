/* q4_avx2_common.h - the AVX2 helpers of the 4-bit codebook kernels (q4_gemv/q4_gemv_1x8_avx2.c,
 * q4_gemm/q4_gemm_16x8_avx2.c), on top of the Q8 ones (q8_avx2_common.h: the sign-trick dot
 * product, horizontal sums, scale transposes, masked stores, prefetch).
 *
 * Expansion of one block of 32 values (16 bytes, if_q4_gemv_fn's layout): the bytes are
 * broadcast to both 128-bit lanes, the high lane shifted right by 4 (VPSRLVD), masked to
 * nibbles, and VPSHUFB looks each nibble up in the 16-entry codebook (held in both lanes):
 * lane 0 = values 0..15, lane 1 = values 16..31, in order. Codebook values lie in
 * [-127, 127], so the sign trick's int16 products never saturate (2 * 127 * 127 < 32767). */
#ifndef IF_Q4_AVX2_COMMON_H
#define IF_Q4_AVX2_COMMON_H

#include "q8_avx2_common.h"

Q8C_INLINE __m256i q4c_codebook(const int8_t *cb) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)cb));
}

/* The 32 int8 weights of the block at p. */
Q8C_INLINE __m256i q4c_expand(const uint8_t *p, __m256i cbv) {
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __m256i sh = _mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_shuffle_epi8(cbv, _mm256_and_si256(sh, _mm256_set1_epi8(15)));
}

/* The 8 row pointers (nibbles and scales) of a tile starting at row n with nr valid rows;
 * rows past the end repeat the last valid one (computed, never stored). */
Q8C_INLINE void q4c_rows(const uint8_t *wr[8], const float *sr[8], const uint8_t *w,
                         const float *ws, size_t n, size_t nr, size_t K, size_t ng) {
    for (size_t r = 0; r < 8; r++) {
        const size_t rr = n + (r < nr ? r : nr - 1);
        wr[r] = w + rr * (K / 2);
        sr[r] = ws + rr * ng;
    }
}

#endif
