/* detmath_avx512.h - detmath.c's if_expf on AVX-512 lanes, the same bits (internal; static
 * inline, compiled with the including kernel file's AVX-512 flags). Lane by lane the
 * operations of if_expf: the same constants and table (detmath.h), the same fused
 * multiply-adds, roundings and order. The twin of detmath_avx2.h on 8 double lanes. */
#ifndef ISAFORGE_DETMATH_AVX512_H
#define ISAFORGE_DETMATH_AVX512_H

#include <immintrin.h>

#include "../detmath.h"

/* if_expf's double part on 8 lanes: 2^(k/32) from the table (gathered), times the cubic in r */
static inline __m512d exp8d(__m512d xd) {
    const __m512d invln2n = _mm512_set1_pd(IF_EXPF_INVLN2N), shift = _mm512_set1_pd(IF_EXPF_SHIFT);
    __m512d kd = _mm512_fmadd_pd(invln2n, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    const __m512d r = _mm512_fmsub_pd(invln2n, xd, kd);
    const __m512i t = _mm512_i64gather_epi64(_mm512_and_si512(ki, _mm512_set1_epi64(31)),
                                             (const void *)if_exp2_tab, 8);
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(ki, 47)));
    const __m512d p = _mm512_fmadd_pd(_mm512_set1_pd(IF_EXPF_C0), r, _mm512_set1_pd(IF_EXPF_C1));
    __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(IF_EXPF_C2), r, _mm512_set1_pd(1.0));
    y = _mm512_fmadd_pd(p, _mm512_mul_pd(r, r), y);
    return _mm512_mul_pd(y, s);
}

/* if_expf on 16 lanes: NaN lanes give x + x, lanes above IF_EXPF_OFLOW +inf, below
 * IF_EXPF_UFLOW 0 (the double part's value there is discarded). */
static inline __m512 exp16(__m512 x) {
    const __m512d lo = exp8d(_mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    const __m512d hi = exp8d(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
        _mm512_castps_pd(x), 1))));
    __m512 e = _mm512_castps256_ps512(_mm512_cvtpd_ps(lo));
    e = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(e),
                                            _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(IF_EXPF_UFLOW), _CMP_LT_OQ),
                             e, _mm512_setzero_ps());
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(IF_EXPF_OFLOW), _CMP_GT_OQ),
                             e, _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, _mm512_add_ps(x, x));
}

#endif
