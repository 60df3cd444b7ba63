/* f32_geglu_1x1_avx512.c - GeGLU on 16 lanes with AVX-512F (-mavx512f ..., -ffp-contract=off):
 * the same IEEE operations in the same order as f32_geglu_1x1_scalar.c, with exp16 (detmath's
 * if_expf bit for bit), so every element equals the scalar kernel's. The tail runs the scalar
 * code. */
#include <immintrin.h>

#include "../kernels.h"
#include "../detmath_avx512.h"

void if_f32_geglu_1x1_avx512(float *x, const float *g, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), c3 = _mm512_set1_ps(IF_GELU_C3);
    const __m512 m2k = _mm512_set1_ps(IF_GELU_M2K);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        __m512 a = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(v, v), c3), v);
        a = _mm512_mul_ps(_mm512_add_ps(a, v), m2k);
        const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, exp16(a)));
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_mul_ps(v, s), _mm512_loadu_ps(g + i)));
    }
    if (i < n) if_f32_geglu_1x1_scalar(x + i, g + i, n - i);
}

const if_swiglu_kernel if_k_f32_geglu_1x1_avx512 = {.name = "f32_geglu_1x1_avx512",
    .requires = IF_FEATS_AVX512, .mr = 1, .nr = 1, .run = if_f32_geglu_1x1_avx512};
