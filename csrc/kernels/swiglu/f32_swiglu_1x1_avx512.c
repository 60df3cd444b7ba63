/* f32_swiglu_1x1_avx512.c - SwiGLU on 16 lanes with AVX-512F (-mavx512f ..., -ffp-contract=off):
 * exp16 is detmath's if_expf bit for bit, then the same IEEE operations in the same order as
 * f32_swiglu_1x1_scalar.c (negate, add 1, divide 1 by it, multiply by x, multiply by g), so every
 * element equals the scalar kernel's. The tail runs the scalar code. */
#include <immintrin.h>

#include "../kernels.h"
#include "../detmath_avx512.h"

void if_f32_swiglu_1x1_avx512(float *x, const float *g, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        /* if_expf(-val): flip the sign bit (AVX-512F has no float xor) */
        const __m512 e = exp16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), sign)));
        const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_mul_ps(v, s), _mm512_loadu_ps(g + i)));
    }
    if (i < n) if_f32_swiglu_1x1_scalar(x + i, g + i, n - i);
}

const if_swiglu_kernel if_k_f32_swiglu_1x1_avx512 = {.name = "f32_swiglu_1x1_avx512",
    .requires = IF_FEATS_AVX512, .mr = 1, .nr = 1, .run = if_f32_swiglu_1x1_avx512};
