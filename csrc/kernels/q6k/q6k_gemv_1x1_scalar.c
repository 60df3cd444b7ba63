/* Q6_K GEMV, scalar: the reference of isaforge.h's K-quant arithmetic, one output row and one
 * 256-value block at a time, on the file's blocks. The unsigned 6-bit values u = q + 32 times
 * the int8 activations per 16-value sub-block, minus 32 times the activations' sub-block sum
 * (so the products are of q itself), times the int8 scale, summed in int32; then the float
 * step. */
#include "../kquant_common.h"

static float q6k_row(const uint8_t *row, const int8_t *xq, const float *xd, const int16_t *xsum,
                     size_t nb) {
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * IF_Q6K_BLOCK_BYTES;
        const int8_t *sc = (const int8_t *)(blk + 192), *x = xq + b * IF_QK;
        int32_t sumi = 0;
        for (size_t j = 0; j < 16; j++) {
            int32_t dot = 0;
            for (size_t l = 0; l < 16; l++) dot += ifk_q6k_u(blk, 16 * j + l) * x[16 * j + l];
            sumi += sc[j] * (dot - 32 * (int32_t)xsum[b * 16 + j]);
        }
        acc = acc + (ifk_f16(blk + 208) * xd[b]) * (float)sumi;
    }
    return acc;
}

void if_q6k_gemv_1x1_scalar(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                            const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK;
    for (size_t n = n0; n < n1; n++)
        out[n] = q6k_row(w + n * nb * IF_Q6K_BLOCK_BYTES, xq, xd, xsum, nb);
}

const if_kq_gemv_kernel if_k_q6k_gemv_1x1_scalar = {.name = "q6k_gemv_1x1_scalar", .mr = 1,
    .nr = 1, .run = if_q6k_gemv_1x1_scalar};
