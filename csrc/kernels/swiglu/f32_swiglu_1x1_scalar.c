/* f32_swiglu_1x1_scalar.c - x = silu(x) * g, the reference every tier's SwiGLU equals bit for bit:
 * val = x; val *= 1 / (1 + expf(-val)); val *= g, with detmath's if_expf (as run.c's order). */
#include "../kernels.h"
#include "../../detmath.h"

void if_f32_swiglu_1x1_scalar(float *x, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float val = x[i];
        val *= (1.0f / (1.0f + if_expf(-val)));
        val *= g[i];
        x[i] = val;
    }
}

const if_swiglu_kernel if_k_f32_swiglu_1x1_scalar = {.name = "f32_swiglu_1x1_scalar", .mr = 1,
    .nr = 1, .run = if_f32_swiglu_1x1_scalar};
