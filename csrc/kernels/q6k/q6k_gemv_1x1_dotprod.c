/* Q6_K GEMV, Armv8.2 dotprod (-march=armv8.2-a+dotprod): one row at a time on the file's
 * blocks. Per 128-value half, the 6-bit values of each 16-value sub-block assembled from a
 * low-nibble byte and 2 high bits (unsigned u = q + 32, 0..63, valid as int8), SDOT against
 * their 16 activations, added times the sub-block's int8 scale (MLA by a scalar); one ADDV per
 * block, less 32 * (scales . 16-value activation sums); the float step as the scalar kernel. */
#include <arm_neon.h>

#include "../kquant_common.h"

void if_q6k_gemv_1x1_dotprod(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                             const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK;
    const uint8x16_t m4 = vdupq_n_u8(15), m3 = vdupq_n_u8(3);
    for (size_t n = n0; n < n1; n++) {
        const uint8_t *row = w + n * nb * IF_Q6K_BLOCK_BYTES;
        float acc = 0.0f;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + b * IF_Q6K_BLOCK_BYTES;
            const int8_t *sc = (const int8_t *)(blk + 192), *x = xq + b * IF_QK;
            int32x4_t is = vdupq_n_s32(0);
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = blk + 64 * h, *qhp = blk + 128 + 32 * h;
                for (int half16 = 0; half16 < 2; half16++) { /* lanes l = 16 half16 + 0..15 */
                    const uint8x16_t l0 = vld1q_u8(ql + 16 * half16), l1 = vld1q_u8(ql + 32 + 16 * half16);
                    const uint8x16_t qh = vld1q_u8(qhp + 16 * half16);
                    uint8x16_t u[4];
                    u[0] = vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(qh, m3), 4));
                    u[1] = vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 2), m3), 4));
                    u[2] = vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 4), m3), 4));
                    u[3] = vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(qh, 6), 4));
                    for (int t = 0; t < 4; t++) { /* sub-block 2 t + half16 of the half */
                        const int k = 2 * t + half16;
                        const int32x4_t dot = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(u[t]),
                                                        vld1q_s8(x + 128 * h + 16 * k));
                        is = vmlaq_n_s32(is, dot, sc[8 * h + k]);
                    }
                }
            }
            int32_t corr = 0;
            for (int j = 0; j < 16; j++) corr += sc[j] * (int32_t)xsum[b * 16 + j];
            const int32_t sumi = vaddvq_s32(is) - 32 * corr;
            acc = acc + (ifk_f16(blk + 208) * xd[b]) * (float)sumi;
        }
        out[n] = acc;
    }
}

const if_kq_gemv_kernel if_k_q6k_gemv_1x1_dotprod = {.name = "q6k_gemv_1x1_dotprod",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP, .mr = 1, .nr = 1, .run = if_q6k_gemv_1x1_dotprod};
