/* kquant_neon.h - the Armv8.0 NEON (no SDOT) K-quant GEMV and GEMM bodies (q4k/q5k/q6k
 * *_neon.c), and the block unpacking the i8mm GEMMs share (kquant_i8mm.h).
 *
 * A block's 256 values are unpacked to 16 int8x16 vectors in K order (vector v = values
 * 16 v .. 16 v + 15; unsigned, at most 63, so valid int8). Without SDOT the int8 products go
 * through SMULL / SMLAL2 into int16 lanes and SADALP into int32: a lane takes at most 4 products
 * of |w| <= 63 and |x| <= 128 before the pairwise add, 4 * 63 * 128 = 32256 < 32768, so the
 * int16 sums are exact. Per sub-block the int32x4 is added times its scale (MLA by a scalar),
 * one ADDV per block: sumi, summ and the float step are the scalar kernel's, in its order. */
#ifndef IF_KQUANT_NEON_H
#define IF_KQUANT_NEON_H

#include <arm_neon.h>

#include "kquant_common.h"

/* The three K-quant types as the bodies below tell them apart (a constant in each file). */
enum { IFKN_Q4K, IFKN_Q5K, IFKN_Q6K };

static inline size_t ifkn_bytes(int t) {
    return t == IFKN_Q4K   ? IF_Q4K_BLOCK_BYTES
           : t == IFKN_Q5K ? IF_Q5K_BLOCK_BYTES
                           : IF_Q6K_BLOCK_BYTES;
}

/* acc + the 16 products w . x (2 per int16 lane before SADALP). */
static inline int32x4_t ifkn_dot16(int32x4_t acc, int8x16_t w, int8x16_t x) {
    int16x8_t p = vmull_s8(vget_low_s8(w), vget_low_s8(x));
    p = vmlal_high_s8(p, w, x);
    return vpadalq_s16(acc, p);
}

/* acc + the 32 products w0 . x0 + w1 . x1 (4 per int16 lane before SADALP). */
static inline int32x4_t ifkn_dot32(int32x4_t acc, int8x16_t w0, int8x16_t x0, int8x16_t w1,
                                   int8x16_t x1) {
    int16x8_t p = vmull_s8(vget_low_s8(w0), vget_low_s8(x0));
    p = vmlal_high_s8(p, w0, x0);
    p = vmlal_s8(p, vget_low_s8(w1), vget_low_s8(x1));
    p = vmlal_high_s8(p, w1, x1);
    return vpadalq_s16(acc, p);
}

/* A block's 256 unsigned values, in K order, into u[16]. Q4_K: chunk c's 32 bytes hold
 * sub-block 2c in the low nibbles and 2c + 1 in the high ones. Q5_K: the same with bit 4 from
 * bit 2c / 2c + 1 of the 32 qh bytes. Q6_K: per 128-value half, quarter t lanes 0..31 take
 * ql[l + 32 (t & 1)]'s low (t < 2) or high nibble and bits 2t, 2t + 1 of qh[l]. */
static inline void ifkn_unpack(int t, const uint8_t *blk, int8x16_t u[16]) {
    const uint8x16_t m4 = vdupq_n_u8(15);
    if (t == IFKN_Q6K) {
        const uint8x16_t m3 = vdupq_n_u8(3);
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 2; s++) { /* lanes l = 16 s + 0..15 */
                const uint8_t *ql = blk + 64 * h + 16 * s;
                const uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 32);
                const uint8x16_t qh = vld1q_u8(blk + 128 + 32 * h + 16 * s);
                int8x16_t *o = u + 8 * h + s;
                o[0] = vreinterpretq_s8_u8(
                    vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(qh, m3), 4)));
                o[2] = vreinterpretq_s8_u8(
                    vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 2), m3), 4)));
                o[4] = vreinterpretq_s8_u8(
                    vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 4), m3), 4)));
                o[6] = vreinterpretq_s8_u8(
                    vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(qh, 6), 4)));
            }
        return;
    }
    const uint8_t *qs = blk + (t == IFKN_Q5K ? 48 : 16);
    uint8x16_t h0 = vdupq_n_u8(0), h1 = vdupq_n_u8(0);
    if (t == IFKN_Q5K) {
        h0 = vld1q_u8(blk + 16);
        h1 = vld1q_u8(blk + 32);
    }
    const uint8x16_t b1 = vdupq_n_u8(1);
    for (int c = 0; c < 4; c++) {
        const uint8x16_t q0 = vld1q_u8(qs + 32 * c), q1 = vld1q_u8(qs + 32 * c + 16);
        uint8x16_t l0 = vandq_u8(q0, m4), l1 = vandq_u8(q1, m4);
        uint8x16_t g0 = vshrq_n_u8(q0, 4), g1 = vshrq_n_u8(q1, 4);
        if (t == IFKN_Q5K) { /* qh shifted right by 2c: bits 0 / 1 are sub-blocks 2c / 2c + 1 */
            l0 = vorrq_u8(l0, vshlq_n_u8(vandq_u8(h0, b1), 4));
            l1 = vorrq_u8(l1, vshlq_n_u8(vandq_u8(h1, b1), 4));
            g0 = vorrq_u8(g0, vshlq_n_u8(vandq_u8(vshrq_n_u8(h0, 1), b1), 4));
            g1 = vorrq_u8(g1, vshlq_n_u8(vandq_u8(vshrq_n_u8(h1, 1), b1), 4));
            h0 = vshrq_n_u8(h0, 2);
            h1 = vshrq_n_u8(h1, 2);
        }
        u[4 * c] = vreinterpretq_s8_u8(l0);
        u[4 * c + 1] = vreinterpretq_s8_u8(l1);
        u[4 * c + 2] = vreinterpretq_s8_u8(g0);
        u[4 * c + 3] = vreinterpretq_s8_u8(g1);
    }
}

/* A block's scales as int32: Q4_K / Q5_K sc[8] and mins m[8] per 32 values; Q6_K sc[16]
 * (int8) per 16 values. Q4_K's 12 scale bytes s (ifk_q4k_scales' fields) lane-wise: bytes
 * 0..7 & 63 are sc[0..3], m[0..3]; bytes 8..11 give sc[4..7] (low nibbles) and m[4..7] (high
 * nibbles), each | (the top 2 bits of bytes 0..7) << 4. */
static inline void ifkn_scales(int t, const uint8_t *blk, int32_t sc[16], int32_t m[8]) {
    if (t == IFKN_Q6K) {
        const int16x8_t a = vmovl_s8(vld1_s8((const int8_t *)blk + 192));
        const int16x8_t b = vmovl_s8(vld1_s8((const int8_t *)blk + 200));
        vst1q_s32(sc, vmovl_s16(vget_low_s16(a)));
        vst1q_s32(sc + 4, vmovl_high_s16(a));
        vst1q_s32(sc + 8, vmovl_s16(vget_low_s16(b)));
        vst1q_s32(sc + 12, vmovl_high_s16(b));
        return;
    }
    static const int8_t shr[8] = {0, 0, 0, 0, -4, -4, -4, -4};
    const uint8x8_t lo = vld1_u8(blk + 4); /* s[0..7] */
    uint32_t c32;
    memcpy(&c32, blk + 12, 4); /* s[8..11] */
    const uint8x8_t c = vreinterpret_u8_u32(vdup_n_u32(c32));
    const uint8x8_t hi = vorr_u8(vand_u8(vshl_u8(c, vld1_s8(shr)), vdup_n_u8(15)),
                                 vshl_n_u8(vshr_n_u8(lo, 6), 4));
    const uint8x8_t l6 = vand_u8(lo, vdup_n_u8(63));
    /* [sc0..3 | sc4..7] and [m0..3 | m4..7] */
    const uint16x8_t s16 = vmovl_u8(vreinterpret_u8_u32(
        vzip1_u32(vreinterpret_u32_u8(l6), vreinterpret_u32_u8(hi))));
    const uint16x8_t m16 = vmovl_u8(vreinterpret_u8_u32(
        vzip2_u32(vreinterpret_u32_u8(l6), vreinterpret_u32_u8(hi))));
    vst1q_s32(sc, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(s16))));
    vst1q_s32(sc + 4, vreinterpretq_s32_u32(vmovl_high_u16(s16)));
    vst1q_s32(m, vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(m16))));
    vst1q_s32(m + 4, vreinterpretq_s32_u32(vmovl_high_u16(m16)));
}

/* The minimum term of one activation row's block: Q4_K / Q5_K summ = m . (pairs of 16-value
 * sums); Q6_K 32 * (sc . 16-value sums), subtracted from sumi (the scalar's identity). Lane-wise
 * int32 products and one ADDV: the same integer as the scalar's sum. */
static inline int32_t ifkn_minterm(int t, const int32_t sc[16], const int32_t m[8],
                                   const int16_t *bs) {
    const int16x8_t b0 = vld1q_s16(bs), b1 = vld1q_s16(bs + 8);
    if (t == IFKN_Q6K) {
        int32x4_t a = vmulq_s32(vmovl_s16(vget_low_s16(b0)), vld1q_s32(sc));
        a = vmlaq_s32(a, vmovl_high_s16(b0), vld1q_s32(sc + 4));
        a = vmlaq_s32(a, vmovl_s16(vget_low_s16(b1)), vld1q_s32(sc + 8));
        a = vmlaq_s32(a, vmovl_high_s16(b1), vld1q_s32(sc + 12));
        return 32 * vaddvq_s32(a);
    }
    const int32x4_t a = vmulq_s32(vpaddlq_s16(b0), vld1q_s32(m));
    return vaddvq_s32(vmlaq_s32(a, vpaddlq_s16(b1), vld1q_s32(m + 4)));
}

/* A block's f16 scales as floats: d (Q6_K: its one scale) and dmin (Q6_K: unused). */
static inline void ifkn_d(int t, const uint8_t *blk, float *d, float *dmin) {
    *d = ifk_f16(t == IFKN_Q6K ? blk + 208 : blk);
    *dmin = t == IFKN_Q6K ? 0.0f : ifk_f16(blk + 2);
}

/* The float step of one block, as the scalar kernel: Q4_K / Q5_K
 * acc = (acc + (d * xd) * (float)sumi) - (dmin * xd) * (float)summ; Q6_K
 * acc = acc + (d * xd) * (float)(sumi - 32 corr). */
static inline float ifkn_step(int t, float acc, float d, float dmin, float xd, int32_t sumi,
                              int32_t mt) {
    if (t == IFKN_Q6K) return acc + (d * xd) * (float)(sumi - mt);
    return (acc + (d * xd) * (float)sumi) - (dmin * xd) * (float)mt;
}

/* sumi of one activation block x against unpacked values u with scales sc. */
static inline int32_t ifkn_sumi(int t, const int8x16_t u[16], const int32_t sc[16],
                                const int8_t *x) {
    int32x4_t is = vdupq_n_s32(0);
    if (t == IFKN_Q6K) {
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            is = vmlaq_n_s32(is, ifkn_dot16(vdupq_n_s32(0), u[j], vld1q_s8(x + 16 * j)), sc[j]);
    } else {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const int32x4_t d = ifkn_dot32(vdupq_n_s32(0), u[2 * j], vld1q_s8(x + 32 * j),
                                           u[2 * j + 1], vld1q_s8(x + 32 * j + 16));
            is = vmlaq_n_s32(is, d, sc[j]);
        }
    }
    return vaddvq_s32(is);
}

/* GEMV: one weight row at a time. */
static inline void ifkn_gemv(int t, float *out, const int8_t *xq, const float *xd,
                             const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                             size_t K) {
    const size_t nb = K / IF_QK, bb = ifkn_bytes(t);
    for (size_t n = n0; n < n1; n++) {
        float acc = 0.0f;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + (n * nb + b) * bb;
            int8x16_t u[16];
            int32_t sc[16], m[8];
            float d, dmin;
            ifkn_unpack(t, blk, u);
            ifkn_scales(t, blk, sc, m);
            ifkn_d(t, blk, &d, &dmin);
            const int32_t sumi = ifkn_sumi(t, u, sc, xq + b * IF_QK);
            acc = ifkn_step(t, acc, d, dmin, xd[b], sumi, ifkn_minterm(t, sc, m, xsum + b * 16));
        }
        out[n] = acc;
    }
}

/* GEMM: per weight row and block, the values are unpacked once and every activation row takes
 * its block; each output's float accumulator waits in out between blocks (a float store and
 * load are exact), so each output still sees the scalar's block order. */
static inline void ifkn_gemm(int t, float *out, size_t ldo, const int8_t *xq, const float *xd,
                             const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                             size_t K) {
    const size_t nb = K / IF_QK, bb = ifkn_bytes(t);
    for (size_t n = n0; n < n1; n++)
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = w + (n * nb + b) * bb;
            int8x16_t u[16];
            int32_t sc[16], m[8];
            float d, dmin;
            ifkn_unpack(t, blk, u);
            ifkn_scales(t, blk, sc, m);
            ifkn_d(t, blk, &d, &dmin);
            for (size_t r = 0; r < M; r++) {
                const int32_t sumi = ifkn_sumi(t, u, sc, xq + r * K + b * IF_QK);
                const int32_t mt = ifkn_minterm(t, sc, m, xsum + r * (K / 16) + b * 16);
                float *o = out + r * ldo + n;
                *o = ifkn_step(t, b ? *o : 0.0f, d, dmin, xd[r * nb + b], sumi, mt);
            }
        }
}

#endif
