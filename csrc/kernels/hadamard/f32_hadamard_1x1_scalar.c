/* Activation rotation, scalar: zero-pad x (K) to kpad, multiply by the +-1 signs (exact), then
 * the unnormalized fast Walsh-Hadamard transform of each group of gs in the fixed order of
 * if_hadamard_fn (stage h = 1, 2, .., gs/2; pair (i, i + h) -> (a + b, a - b)). Every output
 * is the same chain of adds and subtracts whatever the vector width, so SIMD variants that run
 * the same stages are bit-exact. The 1/sqrt(gs) normalization lives in the weights' scales. */
#include <string.h>

#include "../kernels.h"

void if_f32_hadamard_1x1_scalar(float *y, const float *x, const float *signs, size_t K,
                                size_t kpad, size_t gs) {
    if (y != x) memmove(y, x, K * sizeof(float));
    for (size_t k = K; k < kpad; k++) y[k] = 0.0f;
    if (!signs) return;
    for (size_t k = 0; k < kpad; k++) y[k] *= signs[k];
    for (size_t g = 0; g < kpad; g += gs) {
        float *v = y + g;
        for (size_t h = 1; h < gs; h *= 2)
            for (size_t i = 0; i < gs; i += 2 * h)
                for (size_t j = i; j < i + h; j++) {
                    const float a = v[j], b = v[j + h];
                    v[j] = a + b;
                    v[j + h] = a - b;
                }
    }
}

const if_hadamard_kernel if_k_f32_hadamard_1x1_scalar = {.name = "f32_hadamard_1x1_scalar",
    .mr = 1, .nr = 1, .run = if_f32_hadamard_1x1_scalar};
