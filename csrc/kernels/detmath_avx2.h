/* detmath_avx2.h - detmath.c's if_expf on AVX2 lanes, the same bits (internal; static inline,
 * compiled with the including kernel file's AVX2+FMA flags). Lane by lane the operations of
 * if_expf: the same constants and table (detmath.h), the same fused multiply-adds (VFMADD),
 * roundings and order, so every lane equals if_expf of its input. The twin of
 * detmath_avx512.h, which does the same on 8 double lanes. */
#ifndef ISAFORGE_DETMATH_AVX2_H
#define ISAFORGE_DETMATH_AVX2_H

#include <immintrin.h>

#include "../detmath.h"

/* if_expf's double part on 4 lanes: 2^(k/32) from the table (gathered), times the cubic in r */
static inline __m256d exp4d(__m256d xd) {
    const __m256d invln2n = _mm256_set1_pd(IF_EXPF_INVLN2N), shift = _mm256_set1_pd(IF_EXPF_SHIFT);
    __m256d kd = _mm256_fmadd_pd(invln2n, xd, shift);
    const __m256i ki = _mm256_castpd_si256(kd);
    kd = _mm256_sub_pd(kd, shift);
    const __m256d r = _mm256_fmsub_pd(invln2n, xd, kd);
    const __m256i t = _mm256_i64gather_epi64((const long long *)if_exp2_tab,
                                             _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
    const __m256d p = _mm256_fmadd_pd(_mm256_set1_pd(IF_EXPF_C0), r, _mm256_set1_pd(IF_EXPF_C1));
    __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(IF_EXPF_C2), r, _mm256_set1_pd(1.0));
    y = _mm256_fmadd_pd(p, _mm256_mul_pd(r, r), y);
    return _mm256_mul_pd(y, s);
}

/* if_expf on 8 lanes: NaN lanes give x + x, lanes above IF_EXPF_OFLOW +inf, below
 * IF_EXPF_UFLOW 0 (the double part's value there is discarded). */
static inline __m256 exp8(__m256 x) {
    const __m256d lo = exp4d(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    const __m256d hi = exp4d(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    __m256 e = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
    e = _mm256_blendv_ps(e, _mm256_setzero_ps(),
                         _mm256_cmp_ps(x, _mm256_set1_ps(IF_EXPF_UFLOW), _CMP_LT_OQ));
    e = _mm256_blendv_ps(e, _mm256_set1_ps(__builtin_inff()),
                         _mm256_cmp_ps(x, _mm256_set1_ps(IF_EXPF_OFLOW), _CMP_GT_OQ));
    return _mm256_blendv_ps(e, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

#endif
