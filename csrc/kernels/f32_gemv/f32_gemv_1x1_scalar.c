/* fp32 GEMV, scalar: sequential sum over k, as llama2.c run.c's matmul. */
#include "../kernels.h"

void if_f32_gemv_1x1_scalar(float *out, const float *x, const float *w, size_t n0, size_t n1,
                            size_t K) {
    for (size_t n = n0; n < n1; n++) {
        const float *wr = w + n * K;
        float val = 0.0f;
        for (size_t k = 0; k < K; k++) val += wr[k] * x[k];
        out[n] = val;
    }
}

const if_f32_gemv_kernel if_k_f32_gemv_1x1_scalar = {.name = "f32_gemv_1x1_scalar", .mr = 1,
    .nr = 1, .run = if_f32_gemv_1x1_scalar};
