/* Q5_K GEMV, scalar: the reference of isaforge.h's K-quant arithmetic for Q5_K, one output row
 * and one 256-value block at a time, on the file's blocks. Q4_K's kernel with the fifth bit:
 * per block the 5-bit values (nibble | qh bit << 4) times the int8 activations per 32-value
 * sub-block, times the 6-bit scale, summed in int32 (sumi); the 6-bit mins times the
 * activations' sub-block sums (summ); then Q4_K's float step. */
#include "../kquant_common.h"

/* One row's dot product with one K8 activation row. */
static float q5k_row(const uint8_t *row, const int8_t *xq, const float *xd, const int16_t *xsum,
                     size_t nb) {
    float acc = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *blk = row + b * IF_Q5K_BLOCK_BYTES, *qh = blk + 16, *qs = blk + 48;
        const int8_t *x = xq + b * IF_QK;
        const int16_t *bs = xsum + b * 16;
        uint8_t sc[8], m[8];
        ifk_q4k_scales(blk + 4, sc, m);
        int32_t sumi = 0, summ = 0;
        for (size_t c = 0; c < 4; c++) {
            int32_t lo = 0, hi = 0;
            for (size_t l = 0; l < 32; l++) {
                const int32_t ql = (qs[32 * c + l] & 15) | ((qh[l] >> (2 * c)) & 1) << 4;
                const int32_t qu = (qs[32 * c + l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4;
                lo += ql * x[64 * c + l];
                hi += qu * x[64 * c + 32 + l];
            }
            sumi += sc[2 * c] * lo + sc[2 * c + 1] * hi;
        }
        for (size_t j = 0; j < 8; j++) summ += m[j] * ((int32_t)bs[2 * j] + bs[2 * j + 1]);
        const float d = ifk_f16(blk), dmin = ifk_f16(blk + 2);
        acc = (acc + (d * xd[b]) * (float)sumi) - (dmin * xd[b]) * (float)summ;
    }
    return acc;
}

void if_q5k_gemv_1x1_scalar(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                            const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK;
    for (size_t n = n0; n < n1; n++)
        out[n] = q5k_row(w + n * nb * IF_Q5K_BLOCK_BYTES, xq, xd, xsum, nb);
}

const if_kq_gemv_kernel if_k_q5k_gemv_1x1_scalar = {.name = "q5k_gemv_1x1_scalar", .mr = 1,
    .nr = 1, .run = if_q5k_gemv_1x1_scalar};
