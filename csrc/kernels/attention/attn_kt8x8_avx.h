/* attn_kt8x8_avx.h - an 8x8 float transposition on 256-bit vectors (AVX instructions only),
 * the KT8X8 of attn_f32_simd_body.h for both x86 includers (internal; static inline, compiled
 * with the including file's flags: -mavx2 or -mavx512f, which both include AVX). Pure data
 * movement: every value is copied, none computed. */
#ifndef ISAFORGE_ATTN_KT8X8_AVX_H
#define ISAFORGE_ATTN_KT8X8_AVX_H

#include <immintrin.h>
#include <stddef.h>

/* d[m * ld + k] = s[k][i + m] for k, m < 8: eight rows' floats i .. i+7 as eight columns. */
static inline void attn_kt8x8_avx(const float *const *s, size_t i, float *d, size_t ld) {
    /* rows k and k+4 in the two 128-bit halves: r_k = (s[k][i..i+3], s[k+4][i..i+3]), and
     * h_k the same for i+4 .. i+7 */
    __m256 r[4], h[4];
    for (int k = 0; k < 4; k++) {
        r[k] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(s[k] + i)),
                                    _mm_loadu_ps(s[k + 4] + i), 1);
        h[k] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(s[k] + i + 4)),
                                    _mm_loadu_ps(s[k + 4] + i + 4), 1);
    }
    /* 4x4 transpositions in each 128-bit half: column m of rows 0-3 | of rows 4-7 */
    const __m256 a0 = _mm256_unpacklo_ps(r[0], r[1]), a1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 a2 = _mm256_unpacklo_ps(r[2], r[3]), a3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 b0 = _mm256_unpacklo_ps(h[0], h[1]), b1 = _mm256_unpackhi_ps(h[0], h[1]);
    const __m256 b2 = _mm256_unpacklo_ps(h[2], h[3]), b3 = _mm256_unpackhi_ps(h[2], h[3]);
    _mm256_storeu_ps(d + 0 * ld, _mm256_shuffle_ps(a0, a2, 0x44));
    _mm256_storeu_ps(d + 1 * ld, _mm256_shuffle_ps(a0, a2, 0xee));
    _mm256_storeu_ps(d + 2 * ld, _mm256_shuffle_ps(a1, a3, 0x44));
    _mm256_storeu_ps(d + 3 * ld, _mm256_shuffle_ps(a1, a3, 0xee));
    _mm256_storeu_ps(d + 4 * ld, _mm256_shuffle_ps(b0, b2, 0x44));
    _mm256_storeu_ps(d + 5 * ld, _mm256_shuffle_ps(b0, b2, 0xee));
    _mm256_storeu_ps(d + 6 * ld, _mm256_shuffle_ps(b1, b3, 0x44));
    _mm256_storeu_ps(d + 7 * ld, _mm256_shuffle_ps(b1, b3, 0xee));
}

#endif
