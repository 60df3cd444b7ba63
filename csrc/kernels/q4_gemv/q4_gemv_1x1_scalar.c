/* 4-bit codebook GEMV, scalar: one output row at a time. Each weight is cb[nibble] (the 16-entry
 * int8 codebook), the nibbles in if_q4_gemv_fn's layout (per block of 32 values, byte j: value
 * j low, value j + 16 high). Per group an int32 sum of xq * cb[nibble], then
 * acc += ((float)isum * ws) * xs, groups in order: the float order every other tier must
 * reproduce (Q8's). */
#include "../kernels.h"

void if_q4_gemv_1x1_scalar(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                           const float *ws, const int8_t *cb, size_t n0, size_t n1, size_t K,
                           size_t gs) {
    const size_t ng = K / gs;
    for (size_t n = n0; n < n1; n++) {
        const uint8_t *wr = w + n * (K / 2);
        const float *wsr = ws + n * ng;
        float acc = 0.0f;
        for (size_t g = 0; g < ng; g++) {
            int32_t isum = 0;
            for (size_t b = g * gs; b < (g + 1) * gs; b += 32) {
                const uint8_t *p = wr + b / 2;
                const int8_t *x = xq + b;
                for (size_t j = 0; j < 16; j++) {
                    isum += (int32_t)x[j] * (int32_t)cb[p[j] & 15];
                    isum += (int32_t)x[j + 16] * (int32_t)cb[p[j] >> 4];
                }
            }
            acc += ((float)isum * wsr[g]) * xs[g];
        }
        out[n] = acc;
    }
}

const if_q4_gemv_kernel if_k_q4_gemv_1x1_scalar = {.name = "q4_gemv_1x1_scalar", .mr = 1,
    .nr = 1, .run = if_q4_gemv_1x1_scalar};
