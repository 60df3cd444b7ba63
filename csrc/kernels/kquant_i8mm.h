/* kquant_i8mm.h - the Armv8.6 I8MM K-quant GEMM body (q4k/q5k/q6k *_gemm_2x2_i8mm.c): a tile
 * of 2 activation rows x 2 weight rows. Per weight-row pair and block the two rows' values are
 * unpacked once (kquant_neon.h) and 64-bit zipped into SMMLA operands [w0 8 bytes | w1 8
 * bytes]; every activation-row pair zips its 16-byte loads the same way, and one SMMLA adds the
 * 2x2 int32 tile [x0.w0, x0.w1, x1.w0, x1.w1] of 8 K values. Per sub-block the tile is added
 * times the two rows' scales [s0 s1 s0 s1] (MLA), so sumi is exact in int32; summ and the float
 * step are the scalar kernel's, lane-wise in its order (two separate multiplies, no FMA). Each
 * output's float accumulator waits in out between blocks (exact). Tails: an odd last
 * activation row or weight row is run as a pair with itself and stored once. */
#ifndef IF_KQUANT_I8MM_H
#define IF_KQUANT_I8MM_H

#include "kquant_neon.h"

/* The 4 lanes [m0n0 m0n1 m1n0 m1n1] from / to out (rows o0, o1; columns n, n + 1 if two). */
static inline float32x4_t ifki_load(const float *o0, const float *o1, int twon) {
    const float t[4] = {o0[0], twon ? o0[1] : 0.0f, o1[0], twon ? o1[1] : 0.0f};
    return vld1q_f32(t);
}

static inline void ifki_store(float *o0, float *o1, int twom, int twon, float32x4_t v) {
    float t[4];
    vst1q_f32(t, v);
    o0[0] = t[0];
    if (twon) o0[1] = t[1];
    if (twom) {
        o1[0] = t[2];
        if (twon) o1[1] = t[3];
    }
}

static inline void ifki_gemm(int t, float *out, size_t ldo, const int8_t *xq, const float *xd,
                             const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                             size_t n1, size_t K) {
    const size_t nb = K / IF_QK, bb = ifkn_bytes(t), rb = nb * bb;
    const int nsub = t == IFKN_Q6K ? 16 : 8, vps = 16 / nsub; /* sub-blocks, vectors each */
    for (size_t n = n0; n < n1; n += 2) {
        const int twon = n + 1 < n1;
        const uint8_t *r0 = w + n * rb, *r1 = twon ? r0 + rb : r0;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *k0 = r0 + b * bb, *k1 = r1 + b * bb;
            int8x16_t u0[16], u1[16], blo[16], bhi[16];
            ifkn_unpack(t, k0, u0);
            ifkn_unpack(t, k1, u1);
            for (int v = 0; v < 16; v++) {
                const int64x2_t a = vreinterpretq_s64_s8(u0[v]), c = vreinterpretq_s64_s8(u1[v]);
                blo[v] = vreinterpretq_s8_s64(vzip1q_s64(a, c));
                bhi[v] = vreinterpretq_s8_s64(vzip2q_s64(a, c));
            }
            int32_t sc0[16], sc1[16], m0[8], m1[8];
            ifkn_scales(t, k0, sc0, m0);
            ifkn_scales(t, k1, sc1, m1);
            const float f0 = ifk_f16(t == IFKN_Q6K ? k0 + 208 : k0);
            const float f1 = ifk_f16(t == IFKN_Q6K ? k1 + 208 : k1);
            const float32x4_t dv = {f0, f1, f0, f1};
            float32x4_t dminv = vdupq_n_f32(0.0f);
            if (t != IFKN_Q6K) {
                const float g0 = ifk_f16(k0 + 2), g1 = ifk_f16(k1 + 2);
                dminv = (float32x4_t){g0, g1, g0, g1};
            }
            int32x4_t sv[16]; /* per sub-block [s0 s1 s0 s1] */
            for (int j = 0; j < nsub; j++) sv[j] = (int32x4_t){sc0[j], sc1[j], sc0[j], sc1[j]};
            for (size_t m = 0; m < M; m += 2) {
                const int twom = m + 1 < M;
                const int8_t *x0 = xq + m * K + b * IF_QK, *x1 = twom ? x0 + K : x0;
                const int16_t *s0 = xsum + m * (K / 16) + b * 16, *s1 = twom ? s0 + K / 16 : s0;
                int32x4_t is = vdupq_n_s32(0);
#pragma GCC unroll 16
                for (int j = 0; j < nsub; j++) {
                    int32x4_t d = vdupq_n_s32(0);
                    for (int v = vps * j; v < vps * (j + 1); v++) {
                        const int64x2_t a = vreinterpretq_s64_s8(vld1q_s8(x0 + 16 * v));
                        const int64x2_t c = vreinterpretq_s64_s8(vld1q_s8(x1 + 16 * v));
                        d = vmmlaq_s32(d, vreinterpretq_s8_s64(vzip1q_s64(a, c)), blo[v]);
                        d = vmmlaq_s32(d, vreinterpretq_s8_s64(vzip2q_s64(a, c)), bhi[v]);
                    }
                    is = vmlaq_s32(is, d, sv[j]);
                }
                const int32x4_t mt = {ifkn_minterm(t, sc0, m0, s0), ifkn_minterm(t, sc1, m1, s0),
                                      ifkn_minterm(t, sc0, m0, s1), ifkn_minterm(t, sc1, m1, s1)};
                const float xa = xd[m * nb + b], xb = twom ? xd[(m + 1) * nb + b] : xa;
                const float32x4_t xv = {xa, xa, xb, xb};
                float *o0 = out + m * ldo + n, *o1 = twom ? o0 + ldo : o0;
                float32x4_t acc = b ? ifki_load(o0, o1, twon) : vdupq_n_f32(0.0f);
                if (t == IFKN_Q6K) {
                    const float32x4_t q = vcvtq_f32_s32(vsubq_s32(is, mt));
                    acc = vaddq_f32(acc, vmulq_f32(vmulq_f32(dv, xv), q));
                } else {
                    acc = vaddq_f32(acc, vmulq_f32(vmulq_f32(dv, xv), vcvtq_f32_s32(is)));
                    acc = vsubq_f32(acc, vmulq_f32(vmulq_f32(dminv, xv), vcvtq_f32_s32(mt)));
                }
                ifki_store(o0, o1, twom, twon, acc);
            }
        }
    }
}

#endif
