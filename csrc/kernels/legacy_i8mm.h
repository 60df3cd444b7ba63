/* legacy_i8mm.h - the Armv8.6 I8MM legacy-block GEMM body (legacy/ *_gemm_2x2_i8mm.c): a tile
 * of 2 activation rows x 2 weight rows on the file's blocks. Per block the two rows' 32 values
 * (legacy_smull.h) are 64-bit zipped into SMMLA operands [w0 8 bytes | w1 8 bytes], the two
 * activation rows' 32 bytes likewise, and 4 SMMLAs give the exact 2x2 int32 tile of block dots
 * [x0.w0, x0.w1, x1.w0, x1.w1]; the float step is the scalar kernel's, lane-wise and in its
 * order. Tails: an odd last activation row or weight row is run as a pair with itself and
 * stored once. */
#ifndef IF_LEGACY_I8MM_H
#define IF_LEGACY_I8MM_H

#include "legacy_smull.h"

/* [a's 8 bytes | c's 8 bytes] of 16-byte vectors, low (first) or high (second) halves. */
static inline int8x16_t iflm_zip1(int8x16_t a, int8x16_t c) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(c)));
}
static inline int8x16_t iflm_zip2(int8x16_t a, int8x16_t c) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(c)));
}

static inline void iflm_gemm(ifl_type t, float *out, size_t ldo, const int8_t *xq,
                             const float *xd, const int16_t *xsum, size_t M, const uint8_t *w,
                             size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL, rb = nb * t.bb;
    const int32_t z = t.qh ? 16 : 8;
    for (size_t n = n0; n < n1; n += 2) {
        const int twon = n + 1 < n1;
        const uint8_t *r0 = w + n * rb, *r1 = twon ? r0 + rb : r0;
        for (size_t m = 0; m < M; m += 2) {
            const int twom = m + 1 < M;
            const size_t m1 = twom ? m + 1 : m;
            float32x4_t acc = vdupq_n_f32(0.0f);
            for (size_t b = 0; b < nb; b++) {
                const uint8_t *k0 = r0 + b * t.bb, *k1 = r1 + b * t.bb;
                int8x16_t l0, h0, l1, h1;
                ifls_u(t, k0, &l0, &h0);
                ifls_u(t, k1, &l1, &h1);
                const int8_t *x0 = xq + m * K + b * IF_QL, *x1 = xq + m1 * K + b * IF_QL;
                const int8x16_t a0 = vld1q_s8(x0), a1 = vld1q_s8(x0 + 16);
                const int8x16_t c0 = vld1q_s8(x1), c1 = vld1q_s8(x1 + 16);
                int32x4_t dot = vmmlaq_s32(vdupq_n_s32(0), iflm_zip1(a0, c0), iflm_zip1(l0, l1));
                dot = vmmlaq_s32(dot, iflm_zip2(a0, c0), iflm_zip2(l0, l1));
                dot = vmmlaq_s32(dot, iflm_zip1(a1, c1), iflm_zip1(h0, h1));
                dot = vmmlaq_s32(dot, iflm_zip2(a1, c1), iflm_zip2(h0, h1));
                const int16_t *s0 = xsum + m * (K / 16) + 2 * b, *s1 = xsum + m1 * (K / 16) + 2 * b;
                const int32_t xa = (int32_t)s0[0] + s0[1], xb = (int32_t)s1[0] + s1[1];
                const float f0 = ifk_f16(k0), f1 = ifk_f16(k1);
                const float da = xd[m * nb + b], db = xd[m1 * nb + b];
                const float32x4_t dv = {f0, f1, f0, f1}, xv = {da, da, db, db};
                if (t.min) {
                    const float g0 = ifk_f16(k0 + 2), g1 = ifk_f16(k1 + 2);
                    const float32x4_t mv = {g0, g1, g0, g1};
                    const float32x4_t xs = {(float)xa, (float)xa, (float)xb, (float)xb};
                    acc = vaddq_f32(acc, vmulq_f32(vmulq_f32(dv, xv), vcvtq_f32_s32(dot)));
                    acc = vaddq_f32(acc, vmulq_f32(vmulq_f32(mv, xv), xs));
                } else {
                    const int32x4_t zx = {z * xa, z * xa, z * xb, z * xb};
                    acc = vaddq_f32(acc,
                                    vmulq_f32(vmulq_f32(dv, xv), vcvtq_f32_s32(vsubq_s32(dot, zx))));
                }
            }
            float o[4];
            vst1q_f32(o, acc);
            float *o0 = out + m * ldo + n;
            o0[0] = o[0];
            if (twon) o0[1] = o[1];
            if (twom) {
                o0[ldo] = o[2];
                if (twon) o0[ldo + 1] = o[3];
            }
        }
    }
}

#endif
