/* kquant_dotprod.h - the Armv8.2 dotprod Q4_K / Q5_K GEMV (q4k/q4k_gemv_1x1_dotprod.c,
 * q5k/q5k_gemv_1x1_dotprod.c: each calls ifkd_gemv_q45 with its type). Q5_K is Q4_K with a
 * fifth bit per value, so one body with a constant flag serves both.
 * Include only from translation units compiled with -march=armv8.2-a+dotprod (SDOT). */
#ifndef IF_KQUANT_DOTPROD_H
#define IF_KQUANT_DOTPROD_H

#include <arm_neon.h>

#include "kquant_common.h"

/* One row at a time on the file's blocks. Per 32-byte chunk c the low nibbles (sub-block 2c)
 * and the high ones (2c + 1) go through SDOT against their 32 activations; Q5_K (q5 = 1) first
 * gives each bit 2c / 2c + 1 of the 32 qh bytes as its bit 4 (0..31: still a signed byte for
 * SDOT). Each sub-block's int32x4 is added times its 6-bit scale (MLA by a scalar), so a
 * block ends in one vector and one ADDV. The mins and the float step as the scalar kernel. */
static inline void ifkd_gemv_q45(float *out, const int8_t *xq, const float *xd,
                                 const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                 size_t K, const int q5) {
    const size_t nb = K / IF_QK, bb = q5 ? IF_Q5K_BLOCK_BYTES : IF_Q4K_BLOCK_BYTES;
    const uint8x16_t m4 = vdupq_n_u8(15), b1 = vdupq_n_u8(1);
    for (size_t n = n0; n < n1; n++) {
        const uint8_t *row = w + n * nb * bb;
        float acc = 0.0f;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + b * bb, *qs = blk + (q5 ? 48 : 16);
            const int8_t *x = xq + b * IF_QK;
            const int16_t *bs = xsum + b * 16;
            uint8_t sc[8], m[8];
            ifk_q4k_scales(blk + 4, sc, m);
            /* Q5_K: qh shifted right by 2c each chunk: bit 0 / bit 1 are sub-blocks 2c / 2c + 1 */
            uint8x16_t h0 = vld1q_u8(blk + 16), h1 = vld1q_u8(blk + 32);
            int32x4_t is = vdupq_n_s32(0);
            for (int c = 0; c < 4; c++) {
                const uint8x16_t q0 = vld1q_u8(qs + 32 * c), q1 = vld1q_u8(qs + 32 * c + 16);
                uint8x16_t l0 = vandq_u8(q0, m4), l1 = vandq_u8(q1, m4);
                uint8x16_t u0 = vshrq_n_u8(q0, 4), u1 = vshrq_n_u8(q1, 4);
                if (q5) {
                    l0 = vorrq_u8(l0, vshlq_n_u8(vandq_u8(h0, b1), 4));
                    l1 = vorrq_u8(l1, vshlq_n_u8(vandq_u8(h1, b1), 4));
                    u0 = vorrq_u8(u0, vshlq_n_u8(vandq_u8(vshrq_n_u8(h0, 1), b1), 4));
                    u1 = vorrq_u8(u1, vshlq_n_u8(vandq_u8(vshrq_n_u8(h1, 1), b1), 4));
                    h0 = vshrq_n_u8(h0, 2);
                    h1 = vshrq_n_u8(h1, 2);
                }
                const int8_t *xc = x + 64 * c;
                int32x4_t lo = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(l0), vld1q_s8(xc));
                lo = vdotq_s32(lo, vreinterpretq_s8_u8(l1), vld1q_s8(xc + 16));
                int32x4_t hi =
                    vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(u0), vld1q_s8(xc + 32));
                hi = vdotq_s32(hi, vreinterpretq_s8_u8(u1), vld1q_s8(xc + 48));
                is = vmlaq_n_s32(is, lo, sc[2 * c]);
                is = vmlaq_n_s32(is, hi, sc[2 * c + 1]);
            }
            int32_t summ = 0;
            for (int j = 0; j < 8; j++) summ += m[j] * ((int32_t)bs[2 * j] + bs[2 * j + 1]);
            const int32_t sumi = vaddvq_s32(is);
            const float d = ifk_f16(blk), dmin = ifk_f16(blk + 2);
            acc = (acc + (d * xd[b]) * (float)sumi) - (dmin * xd[b]) * (float)summ;
        }
        out[n] = acc;
    }
}

#endif
