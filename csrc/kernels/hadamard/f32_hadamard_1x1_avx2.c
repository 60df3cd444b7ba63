/* Activation rotation, AVX2 (-mavx2 -mfma): the scalar kernel's stages on 8 floats per ymm.
 * Stages h = 1, 2, 4 pair lanes inside a vector (a permute brings each lane's partner, a blend
 * keeps a + b in the lower and a - b in the upper member of each pair); stages h >= 8 pair whole
 * vectors. Each output is the same add/subtract chain as in f32_hadamard_1x1_scalar (IEEE
 * addition is commutative), so the bits are equal. Groups below 8 values go to the scalar
 * kernel. */
#include <immintrin.h>
#include <string.h>

#include "../kernels.h"

void if_f32_hadamard_1x1_avx2(float *y, const float *x, const float *signs, size_t K,
                              size_t kpad, size_t gs) {
    if (!signs || gs < 8 || gs % 8 || kpad % gs) {
        if_f32_hadamard_1x1_scalar(y, x, signs, K, kpad, gs);
        return;
    }
    if (y != x) memmove(y, x, K * sizeof(float));
    for (size_t k = K; k < kpad; k++) y[k] = 0.0f;
    for (size_t k = 0; k < kpad; k += 8)
        _mm256_storeu_ps(y + k, _mm256_mul_ps(_mm256_loadu_ps(y + k), _mm256_loadu_ps(signs + k)));
    for (size_t g = 0; g < kpad; g += gs) {
        float *v = y + g;
        for (size_t i = 0; i < gs; i += 8) {
            __m256 a = _mm256_loadu_ps(v + i), s;
            s = _mm256_permute_ps(a, 0xB1); /* h = 1: partner of lane j is j ^ 1 */
            a = _mm256_blend_ps(_mm256_add_ps(a, s), _mm256_sub_ps(s, a), 0xAA);
            s = _mm256_permute_ps(a, 0x4E); /* h = 2: j ^ 2 */
            a = _mm256_blend_ps(_mm256_add_ps(a, s), _mm256_sub_ps(s, a), 0xCC);
            s = _mm256_permute2f128_ps(a, a, 0x01); /* h = 4: j ^ 4 */
            a = _mm256_blend_ps(_mm256_add_ps(a, s), _mm256_sub_ps(s, a), 0xF0);
            _mm256_storeu_ps(v + i, a);
        }
        for (size_t h = 8; h < gs; h *= 2)
            for (size_t i = 0; i < gs; i += 2 * h)
                for (size_t j = i; j < i + h; j += 8) {
                    const __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + h);
                    _mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
                    _mm256_storeu_ps(v + j + h, _mm256_sub_ps(a, b));
                }
    }
}

const if_hadamard_kernel if_k_f32_hadamard_1x1_avx2 = {.name = "f32_hadamard_1x1_avx2",
    .requires = IF_FEATS_AVX2, .mr = 1, .nr = 1, .run = if_f32_hadamard_1x1_avx2};
