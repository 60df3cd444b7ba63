/* Q8 GEMM, Armv8.6 I8MM (-mcpu=generic+dotprod+i8mm). Tile: 2 activation rows x 4 weight rows
 * (output columns) per step. Each 4-column block of weights is packed once, at load (pack
 * below), and each K block of it (up to Q8I_KC bytes of K, whole groups) is reused by every
 * activation-row pair.
 *
 * gs % 8 == 0: per 8 K-bytes the packed block holds [w0 | w1 | w2 | w3] (8 bytes each), so
 *   SMMLA(A = [x0 | x1], B = [w0 | w1]) gives the int32 2x2 tile [x0.w0, x0.w1, x1.w0, x1.w1]
 *   and a second SMMLA with [w2 | w3] the other half: two SMMLAs per 8 K-bytes, x0/x1 being
 *   interleaved by 64-bit zips of 16-byte loads. An 8-byte step never crosses a group, so the
 *   int32 accumulators restart at zero per group and hold the exact group sum.
 * gs % 8 == 4 (gs = 4 above all): an 8-byte SMMLA would span two groups, so these use SDOT
 *   instead: per 4 K-bytes the block holds [w0 | w1 | w2 | w3] (4 bytes each) and
 *   SDOT(B, x's 4 bytes in every lane) gives the 4 exact column dot products of one row; for
 *   gs = 4 that is one group, x loaded 16 bytes (4 groups) at a time and picked by lane.
 * Readout per group, in group order, with the float lanes = outputs:
 *   acc = acc + (((float)isum * ws[n][g]) * xs[m][g])  (two separate vmulq_f32, no FMA)
 * from acc = 0.0f, exactly as q8_gemv_1x1_scalar; the float accumulators live in `out` between
 * K blocks (a float store/load is exact). Tails: an odd last activation row is run as a pair
 * with itself (only one row stored); a last block of 1..3 columns computes the packed block's
 * other rows (zero past N) and stores only the valid ones. gs % 4 != 0 or gs > Q8I_KC keeps
 * the row-major rows and uses the scalar kernel. */
#include <arm_neon.h>
#include <string.h>

#include "../kernels.h"

#define Q8I_KC 2048 /* K bytes per block: 8 KiB of packed weights, 8 KiB of scales on the stack */

/* The packed layout, written once at load (pack): per block of 4 weight rows (rows past N
 * zero), K in units of U bytes (U = 8 when gs % 8 == 0, the SMMLA operand; else 4, the SDOT
 * one), unit u of the 4 rows as [r0 | r1 | r2 | r3] at block + 4 U u: 4 K bytes per K byte,
 * so K block [k0, ...) of a weight block starts at block + 4 k0. Other group sizes keep the
 * row-major rows. */
static int q8i_tiled(size_t gs) { return gs != 0 && gs % 4 == 0 && gs <= Q8I_KC; }

static size_t pack_size(size_t N, size_t K, size_t gs) {
    return q8i_tiled(gs) ? (N + 3) / 4 * 4 * K : N * K;
}

static void pack(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) {
    if (!q8i_tiled(gs)) {
        memcpy(dst, w, N * K);
        return;
    }
    const size_t U = gs % 8 == 0 ? 8 : 4;
    for (size_t nb = 0; nb < N; nb += 4)
        for (size_t u = 0; u < K / U; u++)
            for (size_t r = 0; r < 4; r++) {
                int8_t *d = dst + nb * K + 4 * U * u + U * r;
                if (nb + r < N)
                    memcpy(d, w + (nb + r) * K + U * u, U);
                else
                    memset(d, 0, U);
            }
}

/* Float accumulators of one row (4 columns, nv valid) from / to out. */
static inline float32x4_t q8i_load_row(const float *o, size_t nv) {
    if (nv == 4) return vld1q_f32(o);
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (size_t i = 0; i < nv; i++) t[i] = o[i];
    return vld1q_f32(t);
}

static inline void q8i_store_row(float *o, float32x4_t v, size_t nv) {
    if (nv == 4) {
        vst1q_f32(o, v);
        return;
    }
    float t[4];
    vst1q_f32(t, v);
    for (size_t i = 0; i < nv; i++) o[i] = t[i];
}

static inline int8x16_t q8i_dup4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

/* One acc row += ((float)isum * ws) * xs, lanes = the 4 columns. */
static inline float32x4_t q8i_readout(float32x4_t acc, int32x4_t isum, float32x4_t wsv,
                                      float xsv) {
    float32x4_t p = vmulq_f32(vmulq_f32(vcvtq_f32_s32(isum), wsv), vdupq_n_f32(xsv));
    return vaddq_f32(acc, p);
}

/* SMMLA path (gs % 8 == 0): groups [g0, g0 + G) of the packed block wp / wsT against all M
 * rows. wsT holds per group [s0 s1 s0 s1 s2 s3 s2 s3] (the 2x2 tiles' column scales). Inlined
 * with constant gs for the common group sizes so the K loop unrolls. */
static inline __attribute__((always_inline)) void
q8i_block_mmla_body(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                    const int8_t *wp, const float *wsT, size_t nb, size_t nv, size_t K, size_t gs,
                    size_t ng, size_t g0, size_t G) {
    const size_t k0 = g0 * gs;
    for (size_t m = 0; m < M; m += 2) {
        const int two = m + 1 < M;
        const int8_t *x0 = xq + m * K + k0, *x1 = two ? x0 + K : x0;
        const float *xs0 = xs + m * ng + g0, *xs1 = two ? xs0 + ng : xs0;
        float *o0 = out + m * ldo + nb, *o1 = two ? o0 + ldo : o0;
        /* lanes: a01 = [m0n0 m0n1 m1n0 m1n1], a23 = [m0n2 m0n3 m1n2 m1n3] */
        float32x4_t a01, a23;
        if (g0 == 0) {
            a01 = vdupq_n_f32(0.0f);
            a23 = vdupq_n_f32(0.0f);
        } else {
            float32x4_t r0 = q8i_load_row(o0, nv), r1 = q8i_load_row(o1, nv);
            a01 = vcombine_f32(vget_low_f32(r0), vget_low_f32(r1));
            a23 = vcombine_f32(vget_high_f32(r0), vget_high_f32(r1));
        }
        const int8_t *b = wp;
        for (size_t g = 0; g < G; g++) {
            int32x4_t i01 = vdupq_n_s32(0), i23 = vdupq_n_s32(0);
            const int8_t *p0 = x0 + g * gs, *p1 = x1 + g * gs;
            size_t k = 0;
            for (; k + 16 <= gs; k += 16, b += 64) {
                int64x2_t v0 = vreinterpretq_s64_s8(vld1q_s8(p0 + k));
                int64x2_t v1 = vreinterpretq_s64_s8(vld1q_s8(p1 + k));
                int8x16_t lo = vreinterpretq_s8_s64(vzip1q_s64(v0, v1));
                int8x16_t hi = vreinterpretq_s8_s64(vzip2q_s64(v0, v1));
                i01 = vmmlaq_s32(i01, lo, vld1q_s8(b));
                i23 = vmmlaq_s32(i23, lo, vld1q_s8(b + 16));
                i01 = vmmlaq_s32(i01, hi, vld1q_s8(b + 32));
                i23 = vmmlaq_s32(i23, hi, vld1q_s8(b + 48));
            }
            if (k < gs) { /* gs % 16 == 8: one 8-byte step left */
                int8x16_t a = vcombine_s8(vld1_s8(p0 + k), vld1_s8(p1 + k));
                i01 = vmmlaq_s32(i01, a, vld1q_s8(b));
                i23 = vmmlaq_s32(i23, a, vld1q_s8(b + 16));
                b += 32;
            }
            float32x4_t xsv = vcombine_f32(vdup_n_f32(xs0[g]), vdup_n_f32(xs1[g]));
            float32x4_t p01 =
                vmulq_f32(vmulq_f32(vcvtq_f32_s32(i01), vld1q_f32(wsT + 8 * g)), xsv);
            float32x4_t p23 =
                vmulq_f32(vmulq_f32(vcvtq_f32_s32(i23), vld1q_f32(wsT + 8 * g + 4)), xsv);
            a01 = vaddq_f32(a01, p01);
            a23 = vaddq_f32(a23, p23);
        }
        q8i_store_row(o0, vcombine_f32(vget_low_f32(a01), vget_low_f32(a23)), nv);
        if (two) q8i_store_row(o1, vcombine_f32(vget_high_f32(a01), vget_high_f32(a23)), nv);
    }
}

static void q8i_block_mmla(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                           const int8_t *wp, const float *wsT, size_t nb, size_t nv, size_t K,
                           size_t gs, size_t ng, size_t g0, size_t G) {
#define Q8I_MMLA(GS) q8i_block_mmla_body(out, ldo, xq, xs, M, wp, wsT, nb, nv, K, GS, ng, g0, G)
    switch (gs) {
    case 8: Q8I_MMLA(8); break;
    case 16: Q8I_MMLA(16); break;
    case 32: Q8I_MMLA(32); break;
    case 64: Q8I_MMLA(64); break;
    default: Q8I_MMLA(gs); break;
    }
#undef Q8I_MMLA
}

/* SDOT path (gs % 8 == 4): groups [g0, g0 + G) of the packed block wp (4-byte chunks) / wsT
 * (per group [s0 s1 s2 s3]) against all M rows; lanes = the 4 columns of one row. */
static void q8i_block_dot(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                          const int8_t *wp, const float *wsT, size_t nb, size_t nv, size_t K,
                          size_t gs, size_t ng, size_t g0, size_t G) {
    const size_t k0 = g0 * gs;
    const int32x4_t z = vdupq_n_s32(0);
    for (size_t m = 0; m < M; m += 2) {
        const int two = m + 1 < M;
        const int8_t *x0 = xq + m * K + k0, *x1 = two ? x0 + K : x0;
        const float *xs0 = xs + m * ng + g0, *xs1 = two ? xs0 + ng : xs0;
        float *o0 = out + m * ldo + nb, *o1 = two ? o0 + ldo : o0;
        float32x4_t a0, a1;
        if (g0 == 0) {
            a0 = vdupq_n_f32(0.0f);
            a1 = vdupq_n_f32(0.0f);
        } else {
            a0 = q8i_load_row(o0, nv);
            a1 = q8i_load_row(o1, nv);
        }
        size_t g = 0;
        if (gs == 4) {
            /* 4 groups per 16-byte activation load; lane j of the load is group g + j */
            for (; g + 4 <= G; g += 4) {
                int8x16_t v0 = vld1q_s8(x0 + 4 * g), v1 = vld1q_s8(x1 + 4 * g);
                const int8_t *b = wp + 16 * g;
                const float *s = wsT + 4 * g;
                int8x16_t b0 = vld1q_s8(b), b1 = vld1q_s8(b + 16);
                int8x16_t b2 = vld1q_s8(b + 32), b3 = vld1q_s8(b + 48);
                a0 = q8i_readout(a0, vdotq_laneq_s32(z, b0, v0, 0), vld1q_f32(s), xs0[g]);
                a1 = q8i_readout(a1, vdotq_laneq_s32(z, b0, v1, 0), vld1q_f32(s), xs1[g]);
                a0 = q8i_readout(a0, vdotq_laneq_s32(z, b1, v0, 1), vld1q_f32(s + 4), xs0[g + 1]);
                a1 = q8i_readout(a1, vdotq_laneq_s32(z, b1, v1, 1), vld1q_f32(s + 4), xs1[g + 1]);
                a0 = q8i_readout(a0, vdotq_laneq_s32(z, b2, v0, 2), vld1q_f32(s + 8), xs0[g + 2]);
                a1 = q8i_readout(a1, vdotq_laneq_s32(z, b2, v1, 2), vld1q_f32(s + 8), xs1[g + 2]);
                a0 = q8i_readout(a0, vdotq_laneq_s32(z, b3, v0, 3), vld1q_f32(s + 12), xs0[g + 3]);
                a1 = q8i_readout(a1, vdotq_laneq_s32(z, b3, v1, 3), vld1q_f32(s + 12), xs1[g + 3]);
            }
        }
        for (; g < G; g++) {
            int32x4_t i0 = z, i1 = z;
            const int8_t *b = wp + 4 * g * gs;
            for (size_t k = 0; k < gs; k += 4, b += 16) {
                int8x16_t bv = vld1q_s8(b);
                i0 = vdotq_s32(i0, bv, q8i_dup4(x0 + g * gs + k));
                i1 = vdotq_s32(i1, bv, q8i_dup4(x1 + g * gs + k));
            }
            float32x4_t sv = vld1q_f32(wsT + 4 * g);
            a0 = q8i_readout(a0, i0, sv, xs0[g]);
            a1 = q8i_readout(a1, i1, sv, xs1[g]);
        }
        q8i_store_row(o0, a0, nv);
        if (two) q8i_store_row(o1, a1, nv);
    }
}

/* Q8 GEMM out[m, n] for m < M, n0 <= n < n1 (n0 a multiple of 4) with SMMLA 2x4 tiles (SDOT
 * for gs % 8 == 4) over the weights pack wrote to w; see the file comment for the exact
 * per-group readout. */
void if_q8_gemm_2x4_i8mm(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                         const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                         size_t gs) {
    if (!q8i_tiled(gs)) { /* w: the row-major rows */
        if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
        return;
    }
    if (M == 0 || n0 >= n1 || K == 0) {
        if (K == 0) /* no groups: every output is the empty sum 0.0f, as scalar */
            for (size_t m = 0; m < M; m++)
                for (size_t n = n0; n < n1; n++) out[m * ldo + n] = 0.0f;
        return;
    }
    const size_t ng = K / gs, gpb = Q8I_KC / gs; /* groups per K block */
    const int mmla = gs % 8 == 0;
    float wsT[Q8I_KC] __attribute__((aligned(16))); /* <= 8 (mmla) or 4 floats per group */
    for (size_t nb = n0; nb < n1; nb += 4) {
        const size_t nv = n1 - nb < 4 ? n1 - nb : 4;
        const int8_t *blk = w + nb * K; /* block nb / 4: 4 K bytes */
        const float *srows[4];
        for (size_t r = 0; r < 4; r++) srows[r] = ws + (nb + (r < nv ? r : nv - 1)) * ng;
        for (size_t g0 = 0; g0 < ng; g0 += gpb) {
            const size_t G = ng - g0 < gpb ? ng - g0 : gpb;
            const int8_t *wp = blk + 4 * g0 * gs;
            if (mmla) {
                for (size_t g = 0; g < G; g++) {
                    float *t = wsT + 8 * g;
                    t[0] = t[2] = srows[0][g0 + g];
                    t[1] = t[3] = srows[1][g0 + g];
                    t[4] = t[6] = srows[2][g0 + g];
                    t[5] = t[7] = srows[3][g0 + g];
                }
                q8i_block_mmla(out, ldo, xq, xs, M, wp, wsT, nb, nv, K, gs, ng, g0, G);
            } else {
                for (size_t g = 0; g < G; g++)
                    for (size_t r = 0; r < 4; r++) wsT[4 * g + r] = srows[r][g0 + g];
                q8i_block_dot(out, ldo, xq, xs, M, wp, wsT, nb, nv, K, gs, ng, g0, G);
            }
        }
    }
}

const if_q8_gemm_kernel if_k_q8_gemm_2x4_i8mm = {.name = "q8_gemm_2x4_i8mm",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP | IF_FEAT_I8MM, .mr = 2, .nr = 4,
    .pack_size = pack_size, .pack = pack, .run = if_q8_gemm_2x4_i8mm};
