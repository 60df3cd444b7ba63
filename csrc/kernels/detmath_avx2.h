/* detmath_avx2.h - detmath.c's if_expf on AVX2 lanes, the same bits (internal; static inline,
 * compiled with the including kernel file's AVX2 flags). The twin of detmath_avx512.h: the
 * double-precision steps are exactly exp_d's (same constants, same order, no FMA). */
#ifndef ISAFORGE_DETMATH_AVX2_H
#define ISAFORGE_DETMATH_AVX2_H

#include <immintrin.h>
#include <math.h>

/* exp_d of detmath.c on 4 double lanes: y = k ln2 + r, Taylor series of exp(r) to r^14 by
 * Horner, scaled by 2^(k/2) * 2^(k - k/2) (C's truncating k/2). */
static inline __m256d exp4d(__m256d y) {
    static const double inv_fact[] = {
        1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
        1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
        1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        1.0 / 2.0,
        1.0,                1.0};
    const __m256d t = _mm256_mul_pd(y, _mm256_set1_pd(1.44269504088896338700e+00));
    /* round half away from zero: trunc(t +- 0.5) */
    const __m256d neg = _mm256_cmp_pd(t, _mm256_setzero_pd(), _CMP_LT_OQ);
    const __m256d h = _mm256_blendv_pd(_mm256_set1_pd(0.5), _mm256_set1_pd(-0.5), neg);
    const __m256d kd =
        _mm256_round_pd(_mm256_add_pd(t, h), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_sub_pd(y, _mm256_mul_pd(kd, _mm256_set1_pd(6.93147180369123816490e-01)));
    r = _mm256_sub_pd(r, _mm256_mul_pd(kd, _mm256_set1_pd(1.90821492927058770002e-10)));
    __m256d p = _mm256_set1_pd(1.0 / 87178291200.0);
    for (int i = 0; i < 14; i++)
        p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(inv_fact[i]));
    const __m128i k = _mm256_cvttpd_epi32(kd);
    const __m128i k1 = _mm_srai_epi32(_mm_add_epi32(k, _mm_srli_epi32(k, 31)), 1);
    const __m128i k2 = _mm_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi64x(1023);
    const __m256d s1 = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(k1), bias), 52));
    const __m256d s2 = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(k2), bias), 52));
    return _mm256_mul_pd(_mm256_mul_pd(p, s1), s2);
}

/* if_expf on 8 lanes: the same bits (NaN passes through, > 88.8 is +inf, < -104 is 0). */
static inline __m256 exp8(__m256 x) {
    const __m256d lo = exp4d(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    const __m256d hi = exp4d(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    __m256 e = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
    e = _mm256_blendv_ps(e, _mm256_setzero_ps(),
                         _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OQ));
    e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY),
                         _mm256_cmp_ps(x, _mm256_set1_ps(88.8f), _CMP_GT_OQ));
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

#endif
