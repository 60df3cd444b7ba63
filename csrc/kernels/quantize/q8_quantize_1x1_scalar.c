/* Activation quantization to Q8, scalar. Matches llama2.c runq.c's quantize(), except that
 * an all-zero group gets scale 0 and q 0 (runq.c would divide 0 by 0). */
#include <math.h>

#include "../kernels.h"

void if_q8_quantize_1x1_scalar(int8_t *q, float *s, const float *x, size_t K, size_t gs) {
    for (size_t g = 0; g < K / gs; g++) {
        const float *xg = x + g * gs;
        float wmax = 0.0f;
        for (size_t i = 0; i < gs; i++) {
            float a = fabsf(xg[i]);
            if (a > wmax) wmax = a;
        }
        float scale = wmax / 127.0f;
        s[g] = scale;
        for (size_t i = 0; i < gs; i++) {
            q[g * gs + i] = scale != 0.0f ? (int8_t)roundf(xg[i] / scale) : 0;
        }
    }
}

const if_quantize_kernel if_k_q8_quantize_1x1_scalar = {.name = "q8_quantize_1x1_scalar", .mr = 1,
    .nr = 1, .run = if_q8_quantize_1x1_scalar};
