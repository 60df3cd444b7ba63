/* legacy_i8mm.h - the Armv8.6 I8MM legacy-block GEMM body (legacy/ *_gemm_8x2_i8mm.c): a tile
 * of 8 activation rows x 2 weight rows on the file's blocks. Per block the two weight rows' 32
 * values (legacy_smull.h) are 64-bit zipped into SMMLA operands [w0 8 bytes | w1 8 bytes] once
 * for the 4 activation-row pairs, each pair's 32 bytes likewise, and 4 SMMLAs give the exact
 * 2x2 int32 tile of block dots [x0.w0, x0.w1, x1.w0, x1.w1]; the float step is the scalar
 * kernel's, lane-wise and in its order. Tails: activation rows past M repeat the last one and
 * an odd last weight row pairs with itself (computed, not stored). Q8_0's signed values go to
 * SMMLA as stored (exact in int32) with no zero point. */
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

/* Up to 4 activation-row pairs (8 rows, m .. m + mr - 1; rows past them repeat the last,
 * computed, not stored) against weight rows k0 / k1 of a pair: per block the two rows are
 * unpacked and zipped once for the 4 pairs, whose float accumulators stay in registers. */
static inline void iflm_tile(ifl_type t, float *out, size_t ldo, size_t mr, int twon,
                             const uint8_t *r0, const uint8_t *r1, const int8_t *xq,
                             const float *xd, const int16_t *xsum, size_t K) {
    const size_t nb = K / IF_QL;
    const int32_t z = IFLS_S8(t) ? 0 : t.qh ? 16 : 8;
    float32x4_t acc[4];
    size_t ra[4], rb[4]; /* the activation rows of pair i */
    for (size_t i = 0; i < 4; i++) {
        acc[i] = vdupq_n_f32(0.0f);
        ra[i] = 2 * i < mr ? 2 * i : mr - 1;
        rb[i] = 2 * i + 1 < mr ? 2 * i + 1 : mr - 1;
    }
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *k0 = r0 + b * t.bb, *k1 = r1 + b * t.bb;
        int8x16_t l0, h0, l1, h1;
        ifls_u(t, k0, &l0, &h0);
        ifls_u(t, k1, &l1, &h1);
        const int8x16_t w0 = iflm_zip1(l0, l1), w1 = iflm_zip2(l0, l1);
        const int8x16_t w2 = iflm_zip1(h0, h1), w3 = iflm_zip2(h0, h1);
        const float f0 = ifk_f16(k0), f1 = ifk_f16(k1);
        const float g0 = t.min ? ifk_f16(k0 + 2) : 0.0f, g1 = t.min ? ifk_f16(k1 + 2) : 0.0f;
        const float32x4_t dv = {f0, f1, f0, f1}, mv = {g0, g1, g0, g1};
        for (size_t i = 0; i < 4; i++) {
            const int8_t *x0 = xq + ra[i] * K + b * IF_QL, *x1 = xq + rb[i] * K + b * IF_QL;
            const int8x16_t a0 = vld1q_s8(x0), a1 = vld1q_s8(x0 + 16);
            const int8x16_t c0 = vld1q_s8(x1), c1 = vld1q_s8(x1 + 16);
            int32x4_t dot = vmmlaq_s32(vdupq_n_s32(0), iflm_zip1(a0, c0), w0);
            dot = vmmlaq_s32(dot, iflm_zip2(a0, c0), w1);
            dot = vmmlaq_s32(dot, iflm_zip1(a1, c1), w2);
            dot = vmmlaq_s32(dot, iflm_zip2(a1, c1), w3);
            const int16_t *s0 = xsum + ra[i] * (K / 16) + 2 * b;
            const int16_t *s1 = xsum + rb[i] * (K / 16) + 2 * b;
            const int32_t xa = (int32_t)s0[0] + s0[1], xb = (int32_t)s1[0] + s1[1];
            const float da = xd[ra[i] * nb + b], db = xd[rb[i] * nb + b];
            const float32x4_t xv = {da, da, db, db};
            if (t.min) {
                const float32x4_t xs = {(float)xa, (float)xa, (float)xb, (float)xb};
                acc[i] = vaddq_f32(acc[i], vmulq_f32(vmulq_f32(dv, xv), vcvtq_f32_s32(dot)));
                acc[i] = vaddq_f32(acc[i], vmulq_f32(vmulq_f32(mv, xv), xs));
            } else {
                const int32x4_t zx = {z * xa, z * xa, z * xb, z * xb};
                const float32x4_t q = vcvtq_f32_s32(vsubq_s32(dot, zx));
                acc[i] = vaddq_f32(acc[i], vmulq_f32(vmulq_f32(dv, xv), q));
            }
        }
    }
    for (size_t i = 0; i < 4 && 2 * i < mr; i++) {
        float o[4];
        vst1q_f32(o, acc[i]);
        float *o0 = out + 2 * i * ldo;
        o0[0] = o[0];
        if (twon) o0[1] = o[1];
        if (2 * i + 1 < mr) {
            o0[ldo] = o[2];
            if (twon) o0[ldo + 1] = o[3];
        }
    }
}

/* GEMM: 8 activation rows x 2 weight rows per tile. */
static inline void iflm_gemm(ifl_type t, float *out, size_t ldo, const int8_t *xq,
                             const float *xd, const int16_t *xsum, size_t M, const uint8_t *w,
                             size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL, rb = nb * t.bb;
    for (size_t n = n0; n < n1; n += 2) {
        const int twon = n + 1 < n1;
        const uint8_t *r0 = w + n * rb, *r1 = twon ? r0 + rb : r0;
        for (size_t m = 0; m < M; m += 8)
            iflm_tile(t, out + m * ldo + n, ldo, M - m < 8 ? M - m : 8, twon, r0, r1, xq + m * K,
                      xd + m * nb, xsum + m * (K / 16), K);
    }
}

#endif
