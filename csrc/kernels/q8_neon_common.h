/* q8_neon_common.h - the per-ISA helpers of the Arm neon (Armv8.0 Advanced SIMD) and dotprod
 * (Armv8.2 SDOT) Q8 kernels: loads, transposes, the float step, each ISA's integer part and
 * the MR x 4 tile they share (the GEMV runs it at MR = 1; the GEMM at MR = 4 and for its M % 4
 * rows at MR = 1). The loops live in the kernels' files: q8_gemv/q8_gemv_1x4_neon.c and
 * q8_gemm/q8_gemm_4x4_neon.c, which the dotprod files compile again with Q8_ISA = Q8_ISA_DOT
 * (as the AVX-VNNI kernels compile the AVX2 ones). Included by translation units compiled with
 * -mcpu=generic (neon) and -mcpu=generic+dotprod; the SDOT code sits under
 * __ARM_FEATURE_DOTPROD, so the neon objects contain none.
 *
 * Shape of every kernel: a tile of MR activation rows (MR = 1 for the GEMV and the GEMM's
 * M tail, 4 for the GEMM body) x 4 weight rows. Per output tile the float accumulators are
 * MR float32x4_t vectors whose lane r is weight row r. Groups are processed in blocks of 4:
 * the integer part yields, per activation row m and group j, one int32x4_t of isums with lane
 * r = weight row r ("G[m][j]"); the 4 rows' scales ws[r][g..g+3] are loaded with 4 vector loads
 * and transposed 4x4, so each lane does, in group order,
 *     acc = acc + (((float)isum * ws[r][g]) * xs[m][g])
 * with separate FMUL/FADD (never fused; the build uses -ffp-contract=off), starting from
 * acc = 0.0f: bit for bit the scalar kernel. Tail groups (ng % 4) take the one-group path with
 * lane loads of the scales. Tail weight rows (n1 - n0 not a multiple of 4) repeat row n1 - 1 in
 * the unused lanes (reads stay inside rows [n0, n1)) and only the valid lanes are stored.
 *
 * gs = 4, 8, 16, 32, 64, 128, 256 are instantiated with gs as a compile-time constant
 * (Q8_DISPATCH), so the per-group chunk loops have constant trip counts and unroll.
 *
 * Integer kinds (gs must be a multiple of 4; other gs use the scalar kernel):
 *   Q8K_4, Q8K_8  several groups per 16-byte load; per-row sums then a 4x4 int32 transpose.
 *   Q8K_16, Q8K_W gs % 16 == 0: whole 16-byte chunks per group, per-row int32x4 partial sums
 *                 reduced across the 4 weight rows with an ADDP tree (lane r = row r).
 *   Q8K_ANY       any other gs % 4 == 0: as Q8K_W plus a zero-padded 4/8/12-byte remainder
 *                 (reads only the group's own bytes).
 * neon:    SMULL + SMLAL2 (two int8 products per int16 lane: |sum| <= 2*128*127 < 32767) then
 *          SADALP into int32; for gs = 4/8 SMULL/SMULL2 + ADDP (int16 pairs) + SADDLP.
 * dotprod: SDOT. The GEMV (MR = 1) dots whole 16-byte chunks per weight row (two accumulator
 *          chains per row to hide the SDOT latency) and reduces with ADDP; the 4x4 GEMM for
 *          gs = 4/8/16 transposes 16 bytes of the 4 weight rows as a 4x4 matrix of 32-bit words
 *          and uses SDOT-by-element (vdotq_laneq_s32), which leaves lane r = weight row r
 *          directly, no reduction; for larger gs it dots per (m, r) and reduces with ADDP. */
#ifndef IF_Q8_NEON_COMMON_H
#define IF_Q8_NEON_COMMON_H

#include <arm_neon.h>
#include <string.h>

#include "kernels.h"

#define Q8_INLINE static inline __attribute__((always_inline))
/* unroll a chunk loop by 4 (the neon GEMV's, where the 4-row tile leaves registers free) */
#if defined(__clang__)
#define Q8_UNROLL4 _Pragma("clang loop unroll_count(4)")
#elif defined(__GNUC__)
#define Q8_UNROLL4 _Pragma("GCC unroll 4")
#else
#define Q8_UNROLL4
#endif

enum { Q8_ISA_NEON = 0, Q8_ISA_DOT = 1 };
enum { Q8K_4 = 0, Q8K_8 = 1, Q8K_16 = 2, Q8K_W = 3, Q8K_ANY = 4 };

/* Row pointers of one tile: activation rows x[m] / xs[m] (m < MR) and weight rows w[r] /
 * ws[r] (r < 4). */
typedef struct q8_ptrs {
    const int8_t *x[4];
    const float *xs[4];
    const int8_t *w[4];
    const float *ws[4];
} q8_ptrs;

/* ---- loads, transposes, the float step ------------------------------------------------ */

/* 4 bytes into the low word of a d register, rest zero */
Q8_INLINE int8x8_t q8_load4(const int8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return vcreate_s8((uint64_t)v);
}

/* rem = 4, 8 or 12 bytes, zero-padded to 16; reads exactly rem bytes */
Q8_INLINE int8x16_t q8_load_tail(const int8_t *p, size_t rem) {
    if (rem == 4) return vcombine_s8(q8_load4(p), vdup_n_s8(0));
    if (rem == 8) return vcombine_s8(vld1_s8(p), vdup_n_s8(0));
    return vcombine_s8(vld1_s8(p), q8_load4(p + 8));
}

/* 4x4 transpose of 32-bit elements: v[i] lane j -> v[j] lane i */
Q8_INLINE void q8_tr4_s32(int32x4_t v[4]) {
    const int32x4_t t0 = vtrn1q_s32(v[0], v[1]), t1 = vtrn2q_s32(v[0], v[1]);
    const int32x4_t t2 = vtrn1q_s32(v[2], v[3]), t3 = vtrn2q_s32(v[2], v[3]);
    v[0] = vreinterpretq_s32_s64(vtrn1q_s64(vreinterpretq_s64_s32(t0), vreinterpretq_s64_s32(t2)));
    v[1] = vreinterpretq_s32_s64(vtrn1q_s64(vreinterpretq_s64_s32(t1), vreinterpretq_s64_s32(t3)));
    v[2] = vreinterpretq_s32_s64(vtrn2q_s64(vreinterpretq_s64_s32(t0), vreinterpretq_s64_s32(t2)));
    v[3] = vreinterpretq_s32_s64(vtrn2q_s64(vreinterpretq_s64_s32(t1), vreinterpretq_s64_s32(t3)));
}

Q8_INLINE void q8_tr4_f32(float32x4_t v[4]) {
    const float32x4_t t0 = vtrn1q_f32(v[0], v[1]), t1 = vtrn2q_f32(v[0], v[1]);
    const float32x4_t t2 = vtrn1q_f32(v[2], v[3]), t3 = vtrn2q_f32(v[2], v[3]);
    v[0] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    v[1] = vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
    v[2] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t0), vreinterpretq_f64_f32(t2)));
    v[3] = vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(t1), vreinterpretq_f64_f32(t3)));
}

/* lane r = total of a[r]'s 4 lanes (ADDP tree) */
Q8_INLINE int32x4_t q8_sum4(const int32x4_t a[4]) {
    return vpaddq_s32(vpaddq_s32(a[0], a[1]), vpaddq_s32(a[2], a[3]));
}

/* W[j] lane r = ws[r][g + j], j < 4 */
Q8_INLINE void q8_ws4(float32x4_t W[4], const q8_ptrs *p, size_t g) {
    for (int r = 0; r < 4; r++) W[r] = vld1q_f32(p->ws[r] + g);
    q8_tr4_f32(W);
}

/* lane r = ws[r][g] */
Q8_INLINE float32x4_t q8_ws1(const q8_ptrs *p, size_t g) {
    float32x4_t v = vld1q_dup_f32(p->ws[0] + g);
    v = vld1q_lane_f32(p->ws[1] + g, v, 1);
    v = vld1q_lane_f32(p->ws[2] + g, v, 2);
    return vld1q_lane_f32(p->ws[3] + g, v, 3);
}

/* acc + (((float)isum * ws) * xs): SCVTF, FMUL, FMUL (by scalar), FADD - never fused */
Q8_INLINE float32x4_t q8_step(float32x4_t acc, int32x4_t isum, float32x4_t ws, float xs) {
    return vaddq_f32(acc, vmulq_n_f32(vmulq_f32(vcvtq_f32_s32(isum), ws), xs));
}

/* store the first cnt (>= 1) lanes */
Q8_INLINE void q8_store(float *o, float32x4_t v, size_t cnt) {
    if (cnt >= 4) {
        vst1q_f32(o, v);
    } else {
        float t[4];
        vst1q_f32(t, v);
        memcpy(o, t, cnt * sizeof(float));
    }
}

/* ---- Armv8.0 integer part: SMULL/SMLAL2 + SADALP ---------------------------------------- */

/* a += the 16 products of X . W folded into 4 int32 lanes */
Q8_INLINE int32x4_t q8n_mac16(int32x4_t a, int8x16_t X, int8x16_t W) {
    return vpadalq_s16(a, vmlal_high_s8(vmull_s8(vget_low_s8(X), vget_low_s8(W)), X, W));
}

/* a[m][r] += the 16 bytes at k of x[m] . w[r] */
Q8_INLINE void q8n_chunk(const int MR, int32x4_t a[4][4], const q8_ptrs *p, size_t k) {
    int8x16_t W[4];
    for (int r = 0; r < 4; r++) W[r] = vld1q_s8(p->w[r] + k);
    for (int m = 0; m < MR; m++) {
        const int8x16_t X = vld1q_s8(p->x[m] + k);
        for (int r = 0; r < 4; r++) a[m][r] = q8n_mac16(a[m][r], X, W[r]);
    }
}

/* G[m] lane r = isum of the gs bytes at k of x[m] and w[r] (chunk counts, not end pointers,
 * so a constant gs gives constant trip counts) */
Q8_INLINE void q8n_group(const int MR, const int anyrem, int32x4_t G[4], const q8_ptrs *p,
                         size_t k, size_t gs) {
    int32x4_t a[4][4];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < 4; r++) a[m][r] = vdupq_n_s32(0);
    const size_t nch = gs / 16;
    if (MR == 1) {
        Q8_UNROLL4
        for (size_t c = 0; c < nch; c++) q8n_chunk(MR, a, p, k + 16 * c);
    } else {
        for (size_t c = 0; c < nch; c++) q8n_chunk(MR, a, p, k + 16 * c);
    }
    if (anyrem && gs % 16 != 0) {
        const size_t kk = k + 16 * nch, rem = gs % 16;
        int8x16_t W[4];
        for (int r = 0; r < 4; r++) W[r] = q8_load_tail(p->w[r] + kk, rem);
        for (int m = 0; m < MR; m++) {
            const int8x16_t X = q8_load_tail(p->x[m] + kk, rem);
            for (int r = 0; r < 4; r++) a[m][r] = q8n_mac16(a[m][r], X, W[r]);
        }
    }
    for (int m = 0; m < MR; m++) G[m] = q8_sum4(a[m]);
}

/* gs = 4: the 16 bytes at k are groups 0..3 of the block */
Q8_INLINE void q8n_block4(const int MR, int32x4_t G[4][4], const q8_ptrs *p, size_t k) {
    int8x16_t W[4];
    for (int r = 0; r < 4; r++) W[r] = vld1q_s8(p->w[r] + k);
    for (int m = 0; m < MR; m++) {
        const int8x16_t X = vld1q_s8(p->x[m] + k);
        int32x4_t q[4];
        for (int r = 0; r < 4; r++) {
            /* int16 pair sums [g0 g0 g1 g1 g2 g2 g3 g3], widened pairwise: [g0 g1 g2 g3] */
            const int16x8_t lo = vmull_s8(vget_low_s8(X), vget_low_s8(W[r]));
            const int16x8_t hi = vmull_high_s8(X, W[r]);
            q[r] = vpaddlq_s16(vpaddq_s16(lo, hi));
        }
        q8_tr4_s32(q);
        for (int j = 0; j < 4; j++) G[m][j] = q[j];
    }
}

/* gs = 8: the 32 bytes at k are groups 0..3 of the block */
Q8_INLINE void q8n_block8(const int MR, int32x4_t G[4][4], const q8_ptrs *p, size_t k) {
    int8x16_t W0[4], W1[4];
    for (int r = 0; r < 4; r++) {
        W0[r] = vld1q_s8(p->w[r] + k);
        W1[r] = vld1q_s8(p->w[r] + k + 16);
    }
    for (int m = 0; m < MR; m++) {
        const int8x16_t X0 = vld1q_s8(p->x[m] + k), X1 = vld1q_s8(p->x[m] + k + 16);
        int32x4_t q[4];
        for (int r = 0; r < 4; r++) {
            /* [g0 g0 g1 g1] and [g2 g2 g3 g3] in int32, then ADDP: [g0 g1 g2 g3] */
            const int32x4_t a = vpaddlq_s16(vpaddq_s16(vmull_s8(vget_low_s8(X0), vget_low_s8(W0[r])),
                                                       vmull_high_s8(X0, W0[r])));
            const int32x4_t b = vpaddlq_s16(vpaddq_s16(vmull_s8(vget_low_s8(X1), vget_low_s8(W1[r])),
                                                       vmull_high_s8(X1, W1[r])));
            q[r] = vpaddq_s32(a, b);
        }
        q8_tr4_s32(q);
        for (int j = 0; j < 4; j++) G[m][j] = q[j];
    }
}

/* ---- Armv8.2 dotprod integer part: SDOT --------------------------------------------------- */
#if defined(__ARM_FEATURE_DOTPROD)

/* G[m] lane r = isum of the gs bytes at k, one SDOT per 16 bytes per (m, r); with MR = 1 two
 * accumulator chains per weight row (even and odd chunks) */
Q8_INLINE void q8d_group(const int MR, const int anyrem, int32x4_t G[4], const q8_ptrs *p,
                         size_t k, size_t gs) {
    int32x4_t a[4][4], b[4];
    for (int m = 0; m < MR; m++)
        for (int r = 0; r < 4; r++) a[m][r] = vdupq_n_s32(0);
    for (int r = 0; r < 4; r++) b[r] = vdupq_n_s32(0);
    const size_t nch = gs / 16;
    size_t c = 0;
    if (MR == 1) {
        for (; c < nch / 2 * 2; c += 2) {
            const size_t kk = k + 16 * c;
            const int8x16_t X0 = vld1q_s8(p->x[0] + kk), X1 = vld1q_s8(p->x[0] + kk + 16);
            for (int r = 0; r < 4; r++) {
                a[0][r] = vdotq_s32(a[0][r], X0, vld1q_s8(p->w[r] + kk));
                b[r] = vdotq_s32(b[r], X1, vld1q_s8(p->w[r] + kk + 16));
            }
        }
    }
    for (; c < nch; c++) {
        const size_t kk = k + 16 * c;
        int8x16_t W[4];
        for (int r = 0; r < 4; r++) W[r] = vld1q_s8(p->w[r] + kk);
        for (int m = 0; m < MR; m++) {
            const int8x16_t X = vld1q_s8(p->x[m] + kk);
            for (int r = 0; r < 4; r++) a[m][r] = vdotq_s32(a[m][r], X, W[r]);
        }
    }
    if (anyrem && gs % 16 != 0) {
        const size_t kk = k + 16 * nch, rem = gs % 16;
        int8x16_t W[4];
        for (int r = 0; r < 4; r++) W[r] = q8_load_tail(p->w[r] + kk, rem);
        for (int m = 0; m < MR; m++) {
            const int8x16_t X = q8_load_tail(p->x[m] + kk, rem);
            for (int r = 0; r < 4; r++) a[m][r] = vdotq_s32(a[m][r], X, W[r]);
        }
    }
    if (MR == 1)
        for (int r = 0; r < 4; r++) a[0][r] = vaddq_s32(a[0][r], b[r]);
    for (int m = 0; m < MR; m++) G[m] = q8_sum4(a[m]);
}

/* gs = 4, per (m, r) SDOT: lane j = group j of row r; then a 4x4 transpose */
Q8_INLINE void q8d_block4(const int MR, int32x4_t G[4][4], const q8_ptrs *p, size_t k) {
    int8x16_t W[4];
    for (int r = 0; r < 4; r++) W[r] = vld1q_s8(p->w[r] + k);
    for (int m = 0; m < MR; m++) {
        const int8x16_t X = vld1q_s8(p->x[m] + k);
        int32x4_t q[4];
        for (int r = 0; r < 4; r++) q[r] = vdotq_s32(vdupq_n_s32(0), X, W[r]);
        q8_tr4_s32(q);
        for (int j = 0; j < 4; j++) G[m][j] = q[j];
    }
}

/* gs = 8, per (m, r) two SDOTs give [g0 g0 g1 g1] [g2 g2 g3 g3], ADDP, transpose */
Q8_INLINE void q8d_block8(const int MR, int32x4_t G[4][4], const q8_ptrs *p, size_t k) {
    int8x16_t W0[4], W1[4];
    for (int r = 0; r < 4; r++) {
        W0[r] = vld1q_s8(p->w[r] + k);
        W1[r] = vld1q_s8(p->w[r] + k + 16);
    }
    for (int m = 0; m < MR; m++) {
        const int8x16_t X0 = vld1q_s8(p->x[m] + k), X1 = vld1q_s8(p->x[m] + k + 16);
        int32x4_t q[4];
        for (int r = 0; r < 4; r++)
            q[r] = vpaddq_s32(vdotq_s32(vdupq_n_s32(0), X0, W0[r]),
                              vdotq_s32(vdupq_n_s32(0), X1, W1[r]));
        q8_tr4_s32(q);
        for (int j = 0; j < 4; j++) G[m][j] = q[j];
    }
}

/* 16 bytes at k of the 4 weight rows as a 4x4 matrix of 32-bit words, transposed: T[s] holds
 * bytes 4s..4s+3 of row r in lane r, ready for SDOT by element against x's word s */
Q8_INLINE void q8d_wt(int8x16_t T[4], const q8_ptrs *p, size_t k) {
    int32x4_t v[4];
    for (int r = 0; r < 4; r++) v[r] = vreinterpretq_s32_s8(vld1q_s8(p->w[r] + k));
    q8_tr4_s32(v);
    for (int s = 0; s < 4; s++) T[s] = vreinterpretq_s8_s32(v[s]);
}

/* gs = 4, SDOT by element: group j of x row m is word j of X */
Q8_INLINE void q8d_lblock4(const int MR, int32x4_t G[4][4], const q8_ptrs *p, size_t k) {
    int8x16_t T[4];
    q8d_wt(T, p, k);
    const int32x4_t z = vdupq_n_s32(0);
    for (int m = 0; m < MR; m++) {
        const int8x16_t X = vld1q_s8(p->x[m] + k);
        G[m][0] = vdotq_laneq_s32(z, T[0], X, 0);
        G[m][1] = vdotq_laneq_s32(z, T[1], X, 1);
        G[m][2] = vdotq_laneq_s32(z, T[2], X, 2);
        G[m][3] = vdotq_laneq_s32(z, T[3], X, 3);
    }
}

/* gs = 8, SDOT by element: group j = words 2j, 2j+1 of the 32 bytes */
Q8_INLINE void q8d_lblock8(const int MR, int32x4_t G[4][4], const q8_ptrs *p, size_t k) {
    int8x16_t T[4], U[4];
    q8d_wt(T, p, k);
    q8d_wt(U, p, k + 16);
    const int32x4_t z = vdupq_n_s32(0);
    for (int m = 0; m < MR; m++) {
        const int8x16_t X0 = vld1q_s8(p->x[m] + k), X1 = vld1q_s8(p->x[m] + k + 16);
        G[m][0] = vdotq_laneq_s32(vdotq_laneq_s32(z, T[0], X0, 0), T[1], X0, 1);
        G[m][1] = vdotq_laneq_s32(vdotq_laneq_s32(z, T[2], X0, 2), T[3], X0, 3);
        G[m][2] = vdotq_laneq_s32(vdotq_laneq_s32(z, U[0], X1, 0), U[1], X1, 1);
        G[m][3] = vdotq_laneq_s32(vdotq_laneq_s32(z, U[2], X1, 2), U[3], X1, 3);
    }
}

/* gs % 16 == 0 (used for gs = 16: for gs >= 64 the per-(m, r) SDOT + ADDP path executes fewer
 * instructions, at 32 they tie), SDOT by element: per 16 bytes one weight transpose serves the
 * MR activation rows; two accumulator chains per row (words 0, 2 and 1, 3) */
Q8_INLINE void q8d_lgroup(const int MR, int32x4_t G[4], const q8_ptrs *p, size_t k, size_t gs) {
    int32x4_t a[4], b[4];
    for (int m = 0; m < MR; m++) a[m] = b[m] = vdupq_n_s32(0);
    for (size_t c = 0; c < gs / 16; c++) {
        const size_t kk = k + 16 * c;
        int8x16_t T[4];
        q8d_wt(T, p, kk);
        for (int m = 0; m < MR; m++) {
            const int8x16_t X = vld1q_s8(p->x[m] + kk);
            a[m] = vdotq_laneq_s32(a[m], T[0], X, 0);
            b[m] = vdotq_laneq_s32(b[m], T[1], X, 1);
            a[m] = vdotq_laneq_s32(a[m], T[2], X, 2);
            b[m] = vdotq_laneq_s32(b[m], T[3], X, 3);
        }
    }
    for (int m = 0; m < MR; m++) G[m] = vaddq_s32(a[m], b[m]);
}

#endif /* __ARM_FEATURE_DOTPROD */

/* ---- the tile: integer blocks + the float step, groups in order ------------------------- */

/* gs = 4 or 8: isums of the 4 groups starting at byte k, G[m][j] */
Q8_INLINE void q8_isum_block(const int isa, const int kind, const int MR, int32x4_t G[4][4],
                             const q8_ptrs *p, size_t k) {
    if (isa == Q8_ISA_NEON) {
        if (kind == Q8K_4)
            q8n_block4(MR, G, p, k);
        else
            q8n_block8(MR, G, p, k);
        return;
    }
#if defined(__ARM_FEATURE_DOTPROD)
    if (MR > 1 && kind == Q8K_4)
        q8d_lblock4(MR, G, p, k);
    else if (MR > 1)
        q8d_lblock8(MR, G, p, k);
    else if (kind == Q8K_4)
        q8d_block4(MR, G, p, k);
    else
        q8d_block8(MR, G, p, k);
#else
    (void)kind, (void)MR, (void)G, (void)p, (void)k;
    __builtin_unreachable();
#endif
}

/* isums of the one group starting at byte k, G[m]; tail = the group is not a whole number of
 * 16-byte chunks (gs = 4, 8 in the ng % 4 tail, or Q8K_ANY) */
Q8_INLINE void q8_isum_group(const int isa, const int kind, const int MR, int32x4_t G[4],
                             const q8_ptrs *p, size_t k, size_t gs) {
    const int tail = kind == Q8K_4 || kind == Q8K_8 || kind == Q8K_ANY;
    if (isa == Q8_ISA_NEON) {
        q8n_group(MR, tail, G, p, k, gs);
        return;
    }
#if defined(__ARM_FEATURE_DOTPROD)
    if (MR > 1 && kind == Q8K_16)
        q8d_lgroup(MR, G, p, k, gs);
    else
        q8d_group(MR, tail, G, p, k, gs);
#else
    (void)kind, (void)MR, (void)G, (void)p, (void)k, (void)gs;
    __builtin_unreachable();
#endif
}

/* acc[m] lane r = out(x row m, w row r) over all ng groups, exactly the scalar float order */
Q8_INLINE void q8_tile(const int isa, const int kind, const int MR, float32x4_t acc[4],
                       const q8_ptrs *p, size_t ng, size_t gs) {
    for (int m = 0; m < MR; m++) acc[m] = vdupq_n_f32(0.0f);
    size_t g = 0;
    for (; g + 4 <= ng; g += 4) {
        float32x4_t W[4];
        q8_ws4(W, p, g);
        if (kind == Q8K_4 || kind == Q8K_8) {
            int32x4_t G[4][4];
            q8_isum_block(isa, kind, MR, G, p, g * gs);
            for (int j = 0; j < 4; j++)
                for (int m = 0; m < MR; m++)
                    acc[m] = q8_step(acc[m], G[m][j], W[j], p->xs[m][g + (size_t)j]);
        } else {
            for (int j = 0; j < 4; j++) {
                int32x4_t G[4];
                q8_isum_group(isa, kind, MR, G, p, (g + (size_t)j) * gs, gs);
                for (int m = 0; m < MR; m++)
                    acc[m] = q8_step(acc[m], G[m], W[j], p->xs[m][g + (size_t)j]);
            }
        }
    }
    for (; g < ng; g++) {
        int32x4_t G[4];
        q8_isum_group(isa, kind, MR, G, p, g * gs, gs);
        const float32x4_t W = q8_ws1(p, g);
        for (int m = 0; m < MR; m++) acc[m] = q8_step(acc[m], G[m], W, p->xs[m][g]);
    }
}

/* point p->w / p->ws at rows n .. n+3, repeating row n1 - 1 past the end */
Q8_INLINE void q8_set_wrows(q8_ptrs *p, const int8_t *w, const float *ws, size_t n, size_t n1,
                            size_t K, size_t ng) {
    for (int r = 0; r < 4; r++) {
        const size_t row = n + (size_t)r < n1 ? n + (size_t)r : n1 - 1;
        p->w[r] = w + row * K;
        p->ws[r] = ws + row * ng;
    }
}

/* Instantiate IMPL(isa, kind, args..., gs) for the kind of gs; the group sizes models use
 * (4 .. 256) get gs as a compile-time constant so the chunk and group loops unroll. */
#define Q8_DISPATCH(IMPL, isa, gs, ...)                                   \
    do {                                                                  \
        switch (gs) {                                                     \
        case 4: IMPL(isa, Q8K_4, __VA_ARGS__, 4); break;                  \
        case 8: IMPL(isa, Q8K_8, __VA_ARGS__, 8); break;                  \
        case 16: IMPL(isa, Q8K_16, __VA_ARGS__, 16); break;               \
        case 32: IMPL(isa, Q8K_W, __VA_ARGS__, 32); break;                \
        case 64: IMPL(isa, Q8K_W, __VA_ARGS__, 64); break;                \
        case 128: IMPL(isa, Q8K_W, __VA_ARGS__, 128); break;              \
        case 256: IMPL(isa, Q8K_W, __VA_ARGS__, 256); break;              \
        default:                                                          \
            if ((gs) % 16 == 0)                                           \
                IMPL(isa, Q8K_W, __VA_ARGS__, gs);                        \
            else                                                          \
                IMPL(isa, Q8K_ANY, __VA_ARGS__, gs);                      \
            break;                                                        \
        }                                                                 \
    } while (0)

#endif /* IF_Q8_NEON_COMMON_H */
