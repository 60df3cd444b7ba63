/* legacy_smull.h - the Armv8.0 NEON (no SDOT) legacy-block GEMV and GEMM body (legacy/
 * *_neon.c), and the block unpacking the i8mm GEMMs share (legacy_i8mm.h). 4 weight rows per
 * pass on the file's blocks (the GEMM: times 4 activation rows), as the dotprod body
 * (legacy_neon.h) with SDOT replaced: per row and block the 32 unsigned values (at most 31)
 * times the activations through SMULL / SMLAL2 into int16 lanes, 4 products a lane
 * (4 * 31 * 128 = 15872 < 32768: exact), SADALP into int32; the 4 rows' vectors reduced
 * together by pairwise adds (lane r = row r's dot), the float step the scalar kernel's,
 * lane-wise and in its order. Q8_0's values are signed bytes as stored (up to 128 * 127 a
 * product), so its int16 lanes take 2 products each before SADALP (2 * 128 * 127 < 32768) and
 * it has no zero point. */
#ifndef IF_LEGACY_SMULL_H
#define IF_LEGACY_SMULL_H

#include "kquant_neon.h"
#include "legacy_common.h"

/* Q8_0 is the one type whose values are signed bytes (34-byte blocks, no minimum, no qh). */
#define IFLS_S8(t) ((t).bb == IF_Q80_BLOCK_BYTES)

/* A block's values 0..15 (lo) and 16..31 (hi), bit 4 from qh for the five-bit types; Q8_0's
 * signed bytes as stored. */
static inline void ifls_u(ifl_type t, const uint8_t *blk, int8x16_t *lo, int8x16_t *hi) {
    if (IFLS_S8(t)) {
        *lo = vld1q_s8((const int8_t *)(blk + t.qs));
        *hi = vld1q_s8((const int8_t *)(blk + t.qs + 16));
        return;
    }
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

/* MR activation rows (1 or 4, a constant; rows past mr repeat the last, computed, not stored)
 * against 4 weight rows (rows past nr repeat the last): each block of the 4 weight rows is
 * unpacked once for the MR activation rows, whose float accumulators stay in registers. */
static inline __attribute__((always_inline)) void
ifls_tile(ifl_type t, int MR, float *out, size_t ldo, size_t mr, size_t nr,
          const uint8_t *const rows[4], const int8_t *xq, const float *xd, const int16_t *xsum,
          size_t K) {
    const size_t nb = K / IF_QL;
    const int32_t z = IFLS_S8(t) ? 0 : t.qh ? 16 : 8;
    float32x4_t acc[4];
    size_t ar[4]; /* activation row of slot i */
    for (int i = 0; i < MR; i++) {
        acc[i] = vdupq_n_f32(0.0f);
        ar[i] = (size_t)i < mr ? (size_t)i : mr - 1;
    }
    for (size_t b = 0; b < nb; b++) {
        int8x16_t lo[4], hi[4];
        float d[4], m[4];
        for (int r = 0; r < 4; r++) {
            const uint8_t *blk = rows[r] + b * t.bb;
            ifls_u(t, blk, &lo[r], &hi[r]);
            d[r] = ifk_f16(blk);
            m[r] = t.min ? ifk_f16(blk + 2) : 0.0f;
        }
        const float32x4_t dv = vld1q_f32(d), mv = vld1q_f32(m);
        for (int i = 0; i < MR; i++) {
            const int8_t *x = xq + ar[i] * K + b * IF_QL;
            const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
            int32x4_t p[4];
            for (int r = 0; r < 4; r++)
                p[r] = IFLS_S8(t) ? ifkn_dot16(ifkn_dot16(vdupq_n_s32(0), lo[r], x0), hi[r], x1)
                                  : ifkn_dot32(vdupq_n_s32(0), lo[r], x0, hi[r], x1);
            int32x4_t dot = vpaddq_s32(vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]));
            const int16_t *s = xsum + ar[i] * (K / 16) + 2 * b;
            const int32_t xs = (int32_t)s[0] + s[1];
            const float32x4_t xdb = vdupq_n_f32(xd[ar[i] * nb + b]);
            if (!t.min) dot = vsubq_s32(dot, vdupq_n_s32(z * xs));
            acc[i] = vaddq_f32(acc[i], vmulq_f32(vmulq_f32(dv, xdb), vcvtq_f32_s32(dot)));
            if (t.min)
                acc[i] = vaddq_f32(acc[i], vmulq_f32(vmulq_f32(mv, xdb), vdupq_n_f32((float)xs)));
        }
    }
    for (size_t i = 0; i < mr; i++) {
        float o[4];
        vst1q_f32(o, acc[i]);
        for (size_t r = 0; r < nr; r++) out[i * ldo + r] = o[r];
    }
}

/* The 4 rows of the pass at n (past n1 the last repeats); returns how many are real. */
static inline size_t ifls_rows(const uint8_t *rows[4], const uint8_t *w, size_t rowbytes,
                               size_t n, size_t n1) {
    const size_t nr = n1 - n < 4 ? n1 - n : 4;
    for (size_t r = 0; r < 4; r++) rows[r] = w + (n + (r < nr ? r : nr - 1)) * rowbytes;
    return nr;
}

static inline void ifls_gemv(ifl_type t, float *out, const int8_t *xq, const float *xd,
                             const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                             size_t K) {
    const size_t rb = K / IF_QL * t.bb;
    for (size_t n = n0; n < n1; n += 4) {
        const uint8_t *rows[4];
        const size_t nr = ifls_rows(rows, w, rb, n, n1);
        ifls_tile(t, 1, out + n, 0, 1, nr, rows, xq, xd, xsum, K);
    }
}

/* GEMM: 4 activation rows x 4 weight rows per tile. */
static inline void ifls_gemm(ifl_type t, float *out, size_t ldo, const int8_t *xq,
                             const float *xd, const int16_t *xsum, size_t M, const uint8_t *w,
                             size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL, rb = nb * t.bb;
    for (size_t n = n0; n < n1; n += 4) {
        const uint8_t *rows[4];
        const size_t nr = ifls_rows(rows, w, rb, n, n1);
        for (size_t m = 0; m < M; m += 4)
            ifls_tile(t, 4, out + m * ldo + n, ldo, M - m < 4 ? M - m : 4, nr, rows, xq + m * K,
                      xd + m * nb, xsum + m * (K / 16), K);
    }
}

#endif
