/* f32_geglu_1x1_scalar.c - x = gelu_tanh(x) * g, the reference every tier's GeGLU equals bit for
 * bit. gelu_tanh(v) = v * (1 + tanh(u)) / 2 with u = sqrt(2/pi) * (v + 0.044715 v^3), written
 * as v * sigmoid(2u) = v / (1 + expf(-2u)) so it needs only detmath's if_expf, in this order:
 * a = v * v; a *= 0.044715; a *= v; a += v; a *= -2 sqrt(2/pi); v *= 1 / (1 + expf(a)); v *= g. */
#include "../kernels.h"
#include "../../detmath.h"

void if_f32_geglu_1x1_scalar(float *x, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float val = x[i];
        float a = val * val;
        a *= IF_GELU_C3;
        a *= val;
        a += val;
        a *= IF_GELU_M2K;
        val *= (1.0f / (1.0f + if_expf(a)));
        val *= g[i];
        x[i] = val;
    }
}

const if_swiglu_kernel if_k_f32_geglu_1x1_scalar = {.name = "f32_geglu_1x1_scalar", .mr = 1,
    .nr = 1, .run = if_f32_geglu_1x1_scalar};
