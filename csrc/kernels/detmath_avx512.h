/* detmath_avx512.h - detmath.c's if_expf on AVX-512 lanes, the same bits (internal; static
 * inline, so each kernel file that includes it compiles it with its own AVX-512 flags). The
 * double-precision steps are exactly exp_d's: same constants, same operation order, no FMA. */
#ifndef ISAFORGE_DETMATH_AVX512_H
#define ISAFORGE_DETMATH_AVX512_H

#include <immintrin.h>
#include <math.h>

/* exp_d of detmath.c on 8 double lanes: y = k ln2 + r, Taylor series of exp(r) to r^14 by
 * Horner, scaled by 2^(k/2) * 2^(k - k/2) (C's truncating k/2). */
static inline __m512d exp8d(__m512d y) {
    static const double inv_fact[] = {
        1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
        1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
        1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        1.0 / 2.0,
        1.0,                1.0};
    const __m512d t = _mm512_mul_pd(y, _mm512_set1_pd(1.44269504088896338700e+00));
    /* round half away from zero: trunc(t +- 0.5) */
    const __mmask8 neg = _mm512_cmp_pd_mask(t, _mm512_setzero_pd(), _CMP_LT_OQ);
    __m512d h = _mm512_mask_blend_pd(neg, _mm512_set1_pd(0.5), _mm512_set1_pd(-0.5));
    const __m512d kd =
        _mm512_roundscale_pd(_mm512_add_pd(t, h), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_sub_pd(y, _mm512_mul_pd(kd, _mm512_set1_pd(6.93147180369123816490e-01)));
    r = _mm512_sub_pd(r, _mm512_mul_pd(kd, _mm512_set1_pd(1.90821492927058770002e-10)));
    __m512d p = _mm512_set1_pd(1.0 / 87178291200.0);
    for (int i = 0; i < 14; i++)
        p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(inv_fact[i]));
    const __m256i k = _mm512_cvttpd_epi32(kd);
    const __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(k, _mm256_srli_epi32(k, 31)), 1);
    const __m256i k2 = _mm256_sub_epi32(k, k1);
    const __m512i bias = _mm512_set1_epi64(1023);
    const __m512d s1 = _mm512_castsi512_pd(
        _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(k1), bias), 52));
    const __m512d s2 = _mm512_castsi512_pd(
        _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(k2), bias), 52));
    return _mm512_mul_pd(_mm512_mul_pd(p, s1), s2);
}

/* if_expf on 16 lanes: the same bits (NaN passes through, > 88.8 is +inf, < -104 is 0). */
static inline __m512 exp16(__m512 x) {
    const __m512d lo = exp8d(_mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    const __m512d hi = exp8d(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
        _mm512_castps_pd(x), 1))));
    __m512 e = _mm512_castps256_ps512(_mm512_cvtpd_ps(lo));
    e = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(e),
                                            _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OQ), e,
                             _mm512_setzero_ps());
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(88.8f), _CMP_GT_OQ), e,
                             _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, x);
}

#endif
