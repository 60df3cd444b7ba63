/* Activation quantization to Q8, Armv8.0 Advanced SIMD (-mcpu=generic; the quantizer of every
 * Arm tier). Per group: max |x| by compare-and-select (FABS, FCMGT, BSL: a NaN input is
 * skipped exactly like the scalar `if (a > wmax)`), scale = wmax / 127.0f (a true division),
 * then 16 (or 4) values at a time v = x / scale with FDIV (vdivq_f32, no reciprocal) and
 * FCVTAS (vcvtaq_s32_f32: round to nearest, ties away from zero = roundf, saturating to int32
 * like the scalar conversion), narrowed with XTN keeping the low byte (as the scalar cast
 * compiles: with a denormal scale x / scale can round past 127, which the scalar wraps).
 * Leftover gs % 4 values use the scalar FCVTAS. Bit-identical to q8_quantize_1x1_scalar. */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "../kernels.h"

/* m = a > m ? a : m per lane */
static inline float32x4_t absmax_step(float32x4_t m, float32x4_t x) {
    const float32x4_t a = vabsq_f32(x);
    return vbslq_f32(vcgtq_f32(a, m), a, m);
}

void if_q8_quantize_1x1_neon(int8_t *q, float *s, const float *x, size_t K, size_t gs) {
    if (gs == 0) {
        if_q8_quantize_1x1_scalar(q, s, x, K, gs);
        return;
    }
    for (size_t g = 0; g < K / gs; g++) {
        const float *xg = x + g * gs;
        int8_t *qg = q + g * gs;
        float32x4_t m0 = vdupq_n_f32(0.0f), m1 = vdupq_n_f32(0.0f);
        size_t i = 0;
        for (; i + 8 <= gs; i += 8) {
            m0 = absmax_step(m0, vld1q_f32(xg + i));
            m1 = absmax_step(m1, vld1q_f32(xg + i + 4));
        }
        if (i + 4 <= gs) {
            m0 = absmax_step(m0, vld1q_f32(xg + i));
            i += 4;
        }
        /* lanes hold only +0 or positive non-NaN values here, so FMAXV is exact */
        float wmax = vmaxvq_f32(vbslq_f32(vcgtq_f32(m1, m0), m1, m0));
        for (; i < gs; i++) {
            const float a = fabsf(xg[i]);
            if (a > wmax) wmax = a;
        }
        const float scale = wmax / 127.0f;
        s[g] = scale;
        if (scale == 0.0f) {
            memset(qg, 0, gs);
            continue;
        }
        const float32x4_t sc = vdupq_n_f32(scale);
        for (i = 0; i + 16 <= gs; i += 16) {
            const int32x4_t a = vcvtaq_s32_f32(vdivq_f32(vld1q_f32(xg + i), sc));
            const int32x4_t b = vcvtaq_s32_f32(vdivq_f32(vld1q_f32(xg + i + 4), sc));
            const int32x4_t c = vcvtaq_s32_f32(vdivq_f32(vld1q_f32(xg + i + 8), sc));
            const int32x4_t d = vcvtaq_s32_f32(vdivq_f32(vld1q_f32(xg + i + 12), sc));
            const int16x8_t ab = vmovn_high_s32(vmovn_s32(a), b);
            const int16x8_t cd = vmovn_high_s32(vmovn_s32(c), d);
            vst1q_s8(qg + i, vmovn_high_s16(vmovn_s16(ab), cd));
        }
        for (; i + 4 <= gs; i += 4) {
            const int32x4_t a = vcvtaq_s32_f32(vdivq_f32(vld1q_f32(xg + i), sc));
            const int16x4_t h = vmovn_s32(a);
            const int8x8_t b = vmovn_s16(vcombine_s16(h, h));
            const int32_t v = vget_lane_s32(vreinterpret_s32_s8(b), 0);
            memcpy(qg + i, &v, 4);
        }
        for (; i < gs; i++) qg[i] = (int8_t)vcvtas_s32_f32(xg[i] / scale);
    }
}

const if_quantize_kernel if_k_q8_quantize_1x1_neon = {.name = "q8_quantize_1x1_neon",
    .requires = IF_FEAT_ASIMD, .mr = 1, .nr = 1, .run = if_q8_quantize_1x1_neon};
