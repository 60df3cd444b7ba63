/* 4-bit codebook GEMV, Armv8.2 dotprod (-mcpu=generic+dotprod). Tile: 1 activation row x 4
 * weight rows. Per block of 32 values and row: one 16-byte load of nibbles, AND / USHR split
 * into the low (values 0..15) and high (16..31) nibbles, TBL looks each up in the 16-entry
 * codebook (one q register), and two SDOTs with the activation's two 16-byte halves add into
 * an int32x4 partial sum (signed x signed: no sign trick). Per group the 4 rows' partials are
 * reduced (ADDV) and each row adds ((float)isum * ws) * xs in group order (FMUL, FMUL, FADD,
 * never fused), exactly as q4_gemv_1x1_scalar. */
#include <arm_neon.h>

#include "../kernels.h"

void if_q4_gemv_1x4_dotprod(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                            const float *ws, const int8_t *cb, size_t n0, size_t n1, size_t K,
                            size_t gs) {
    if (gs == 0 || gs % 32 || K % gs) {
        if_q4_gemv_1x1_scalar(out, xq, xs, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs;
    const int8x16_t cbv = vld1q_s8(cb);
    const uint8x16_t m4 = vdupq_n_u8(15);
    for (size_t n = n0; n < n1; n += 4) {
        const size_t nr = n1 - n < 4 ? n1 - n : 4;
        const uint8_t *wr[4];
        const float *sr[4];
        for (size_t r = 0; r < 4; r++) {
            const size_t rr = n + (r < nr ? r : nr - 1);
            wr[r] = w + rr * (K / 2);
            sr[r] = ws + rr * ng;
        }
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (size_t g = 0; g < ng; g++) {
            int32x4_t v[4];
            for (int r = 0; r < 4; r++) v[r] = vdupq_n_s32(0);
            for (size_t k = g * gs; k < (g + 1) * gs; k += 32) {
                const int8x16_t x0 = vld1q_s8(xq + k), x1 = vld1q_s8(xq + k + 16);
                for (int r = 0; r < 4; r++) {
                    const uint8x16_t b = vld1q_u8(wr[r] + k / 2);
                    const int8x16_t lo = vqtbl1q_s8(cbv, vandq_u8(b, m4));
                    const int8x16_t hi = vqtbl1q_s8(cbv, vshrq_n_u8(b, 4));
                    v[r] = vdotq_s32(vdotq_s32(v[r], lo, x0), hi, x1);
                }
            }
            for (int r = 0; r < 4; r++)
                acc[r] += ((float)vaddvq_s32(v[r]) * sr[r][g]) * xs[g];
        }
        for (size_t r = 0; r < nr; r++) out[n + r] = acc[r];
    }
}

const if_q4_gemv_kernel if_k_q4_gemv_1x4_dotprod = {.name = "q4_gemv_1x4_dotprod",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP, .mr = 1, .nr = 4, .run = if_q4_gemv_1x4_dotprod};
