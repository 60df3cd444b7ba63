/* f32_geglu_1x1_avx2.c - GeGLU on 8 lanes with AVX2 (-mavx2 -mfma, -ffp-contract=off: no FMA is
 * formed): the same IEEE operations in the same order as f32_geglu_1x1_scalar.c, with exp8
 * (detmath's if_expf bit for bit), so every element equals the scalar kernel's. The tail runs
 * the scalar code. */
#include <immintrin.h>

#include "../kernels.h"
#include "../detmath_avx2.h"

void if_f32_geglu_1x1_avx2(float *x, const float *g, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), c3 = _mm256_set1_ps(IF_GELU_C3);
    const __m256 m2k = _mm256_set1_ps(IF_GELU_M2K);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        __m256 a = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(v, v), c3), v);
        a = _mm256_mul_ps(_mm256_add_ps(a, v), m2k);
        const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp8(a)));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(v, s), _mm256_loadu_ps(g + i)));
    }
    if (i < n) if_f32_geglu_1x1_scalar(x + i, g + i, n - i);
}

const if_swiglu_kernel if_k_f32_geglu_1x1_avx2 = {.name = "f32_geglu_1x1_avx2",
    .requires = IF_FEATS_AVX2, .mr = 1, .nr = 1, .run = if_f32_geglu_1x1_avx2};
