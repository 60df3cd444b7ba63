/* K8 activation quantization, scalar: the Q8 rule per 256 values (if_q8_quantize_1x1_scalar at
 * gs = 256), then the int16 sum of each 16 consecutive int8 values. */
#include "../kquant_common.h"

void if_k8_sums(int16_t *bsum, const int8_t *q, size_t K) {
    for (size_t i = 0; i < K / 16; i++) {
        int32_t s = 0;
        for (size_t l = 0; l < 16; l++) s += q[16 * i + l];
        bsum[i] = (int16_t)s;
    }
}

void if_k8_quantize_1x1_scalar(int8_t *q, float *d, int16_t *bsum, const float *x, size_t K) {
    if_q8_quantize_1x1_scalar(q, d, x, K, IF_QK);
    if_k8_sums(bsum, q, K);
}

const if_k8_quantize_kernel if_k_k8_quantize_1x1_scalar = {.name = "k8_quantize_1x1_scalar",
    .mr = 1, .nr = 1, .run = if_k8_quantize_1x1_scalar};
