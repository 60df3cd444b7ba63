/* Q8 GEMV, scalar: one output row at a time, int32 per group, float accumulation in group
 * order: acc += ((float)isum * w_scale) * x_scale. This fixes the float order every other
 * tier must reproduce. */
#include "../kernels.h"

void if_q8_gemv_1x1_scalar(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                           const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    const size_t ng = K / gs;
    for (size_t n = n0; n < n1; n++) {
        const int8_t *wr = w + n * K;
        const float *wsr = ws + n * ng;
        float acc = 0.0f;
        for (size_t g = 0; g < ng; g++) {
            int32_t isum = 0;
            for (size_t k = 0; k < gs; k++) {
                isum += (int32_t)xq[g * gs + k] * (int32_t)wr[g * gs + k];
            }
            acc += ((float)isum * wsr[g]) * xs[g];
        }
        out[n] = acc;
    }
}

const if_q8_gemv_kernel if_k_q8_gemv_1x1_scalar = {.name = "q8_gemv_1x1_scalar", .mr = 1, .nr = 1,
    .run = if_q8_gemv_1x1_scalar};
