/* legacy_neon.h - the Armv8.2 dotprod legacy-block GEMV and GEMM body (legacy/ *_dotprod.c;
 * the i8mm and sme2 tiers run it too). 4 rows per pass on the file's blocks: per row and block
 * the 32 unsigned values (at most 31: int8 as they are) through two SDOTs against the block's
 * activations, the 4 rows' product vectors reduced together by pairwise adds (lane r = row
 * r's dot, no per-row ADDV), the float step the scalar kernel's, lane-wise. */
#ifndef IF_LEGACY_NEON_H
#define IF_LEGACY_NEON_H

#include <arm_neon.h>

#include "legacy_common.h"

/* A block's values 0..15 (lo) and 16..31 (hi), bit 4 from qh for the five-bit types. */
static inline void ifln_u(ifl_type t, const uint8_t *blk, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t q = vld1q_u8(blk + t.qs), m4 = vdupq_n_u8(15);
    uint8x16_t l = vandq_u8(q, m4), h = vshrq_n_u8(q, 4);
    if (t.qh) {
        static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        const uint8x16_t bm = vld1q_u8(bits), s16 = vdupq_n_u8(16);
        const uint8x16_t h0 = vcombine_u8(vdup_n_u8(blk[t.qh]), vdup_n_u8(blk[t.qh + 1]));
        const uint8x16_t h1 = vcombine_u8(vdup_n_u8(blk[t.qh + 2]), vdup_n_u8(blk[t.qh + 3]));
        l = vorrq_u8(l, vandq_u8(vtstq_u8(h0, bm), s16));
        h = vorrq_u8(h, vandq_u8(vtstq_u8(h1, bm), s16));
    }
    *lo = vreinterpretq_s8_u8(l);
    *hi = vreinterpretq_s8_u8(h);
}

/* Store the first nr lanes of v at out. */
static inline void ifln_store(float *out, float32x4_t v, size_t nr) {
    float t[4];
    vst1q_f32(t, v);
    for (size_t r = 0; r < nr; r++) out[r] = t[r];
}

/* One activation row against 4 rows (rows past n1 repeat the last; nr real): out[0..nr). */
static inline void ifln_tile(ifl_type t, float *out, size_t nr, const uint8_t *const rows[4],
                             const int8_t *xq, const float *xd, const int16_t *xsum, size_t nb) {
    const int32_t z = t.qh ? 16 : 8;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (size_t b = 0; b < nb; b++) {
        const int8x16_t x0 = vld1q_s8(xq + b * IF_QL), x1 = vld1q_s8(xq + b * IF_QL + 16);
        int32x4_t p[4];
        float d[4], m[4];
        for (int r = 0; r < 4; r++) {
            const uint8_t *blk = rows[r] + b * t.bb;
            int8x16_t lo, hi;
            ifln_u(t, blk, &lo, &hi);
            p[r] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, x0), hi, x1);
            d[r] = ifk_f16(blk);
            m[r] = t.min ? ifk_f16(blk + 2) : 0.0f;
        }
        int32x4_t dot = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));
        const int32_t xs = (int32_t)xsum[2 * b] + xsum[2 * b + 1];
        const float32x4_t xdb = vdupq_n_f32(xd[b]);
        if (!t.min) dot = vsubq_s32(dot, vdupq_n_s32(z * xs));
        acc = vaddq_f32(acc, vmulq_f32(vmulq_f32(vld1q_f32(d), xdb), vcvtq_f32_s32(dot)));
        if (t.min)
            acc = vaddq_f32(acc, vmulq_f32(vmulq_f32(vld1q_f32(m), xdb), vdupq_n_f32((float)xs)));
    }
    ifln_store(out, acc, nr);
}

static inline size_t ifln_rows(const uint8_t *rows[4], const uint8_t *w, size_t rowbytes, size_t n,
                               size_t n1) {
    const size_t nr = n1 - n < 4 ? n1 - n : 4;
    for (size_t r = 0; r < 4; r++) rows[r] = w + (n + (r < nr ? r : nr - 1)) * rowbytes;
    return nr;
}

static inline void ifln_gemv(ifl_type t, float *out, const int8_t *xq, const float *xd,
                             const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                             size_t K) {
    const size_t nb = K / IF_QL;
    for (size_t n = n0; n < n1; n += 4) {
        const uint8_t *rows[4];
        const size_t nr = ifln_rows(rows, w, nb * t.bb, n, n1);
        ifln_tile(t, out + n, nr, rows, xq, xd, xsum, nb);
    }
}

static inline void ifln_gemm(ifl_type t, float *out, size_t ldo, const int8_t *xq, const float *xd,
                             const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                             size_t K) {
    const size_t nb = K / IF_QL;
    for (size_t n = n0; n < n1; n += 4) {
        const uint8_t *rows[4];
        const size_t nr = ifln_rows(rows, w, nb * t.bb, n, n1);
        for (size_t m = 0; m < M; m++)
            ifln_tile(t, out + m * ldo + n, nr, rows, xq + m * K, xd + m * nb, xsum + m * (K / 16),
                      nb);
    }
}

/* Q8_0: the 32 int8 values as they are (SDOT is signed x signed), one row against an
 * activation row in 4-row tiles as ifln_tile, no zero point. */
static inline void ifln_tile80(float *out, size_t nr, const uint8_t *const rows[4],
                               const int8_t *xq, const float *xd, size_t nb) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (size_t b = 0; b < nb; b++) {
        const int8x16_t x0 = vld1q_s8(xq + b * IF_QL), x1 = vld1q_s8(xq + b * IF_QL + 16);
        int32x4_t p[4];
        float d[4];
        for (int r = 0; r < 4; r++) {
            const uint8_t *blk = rows[r] + b * IF_Q80_BLOCK_BYTES;
            const int8x16_t lo = vld1q_s8((const int8_t *)(blk + 2));
            const int8x16_t hi = vld1q_s8((const int8_t *)(blk + 18));
            p[r] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, x0), hi, x1);
            d[r] = ifk_f16(blk);
        }
        const int32x4_t dot = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));
        acc = vaddq_f32(acc, vmulq_f32(vmulq_f32(vld1q_f32(d), vdupq_n_f32(xd[b])),
                                       vcvtq_f32_s32(dot)));
    }
    ifln_store(out, acc, nr);
}

static inline void ifln_gemv80(float *out, const int8_t *xq, const float *xd, const uint8_t *w,
                               size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL;
    for (size_t n = n0; n < n1; n += 4) {
        const uint8_t *rows[4];
        const size_t nr = ifln_rows(rows, w, nb * IF_Q80_BLOCK_BYTES, n, n1);
        ifln_tile80(out + n, nr, rows, xq, xd, nb);
    }
}

static inline void ifln_gemm80(float *out, size_t ldo, const int8_t *xq, const float *xd,
                               size_t M, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL;
    for (size_t n = n0; n < n1; n += 4) {
        const uint8_t *rows[4];
        const size_t nr = ifln_rows(rows, w, nb * IF_Q80_BLOCK_BYTES, n, n1);
        for (size_t m = 0; m < M; m++)
            ifln_tile80(out + m * ldo + n, nr, rows, xq + m * K, xd + m * nb, nb);
    }
}

#endif
