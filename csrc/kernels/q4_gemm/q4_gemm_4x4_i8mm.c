/* 4-bit codebook GEMM, Armv8.6 I8MM (-mcpu=generic+dotprod+i8mm). Tile: 4 activation rows
 * (two pairs) x 4 weight rows (two pairs) per step.
 *
 * Layout (pack below, once at load; the nibbles only rearranged, scales and codebook as they
 * are): per pair of weight rows (2p, 2p + 1; past N zero bytes) K bytes at w + p K; per block
 * b of 32 values the rows' 16-byte blocks (if_q4_gemv_fn's layout: byte j = value j low,
 * j + 16 high) interleaved per 8-byte lane, 32 bytes at w + p K + 32 b:
 *   [r0 bytes 0..7 | r1 bytes 0..7 | r0 bytes 8..15 | r1 bytes 8..15].
 * So each SMMLA B operand is one lookup of contiguous bytes: AND / USHR and TBL into the
 * 16-entry codebook of the first 16 bytes give [r0 values 0..7 | r1 values 0..7] (K step 0)
 * and [r0 16..23 | r1 16..23] (step 2), of the second 16 bytes steps 1 and 3; 4 TBLs per pair
 * and block (2 per row, as the row-major lookup) and no zips on the weights. The activation
 * A operands are 64-bit zips of two rows' 16-byte halves (M = 1: the row's 8 bytes in both
 * halves, LD1R). SMMLA(A, B) adds the int32 2x2 tile [x0.w0, x0.w1, x1.w0, x1.w1] of one
 * 8-value K step: 4 SMMLAs per block and (activation pair, weight pair). A K step never
 * crosses a group (gs % 32 == 0), so the int32 accumulators restart per group and hold the
 * exact group sums.
 * Readout per group, in group order, lanes = the 2x2 tile's outputs:
 *   acc = acc + (((float)isum * ws[n][g]) * xs[m][g])  (SCVTF, FMUL, FMUL, FADD; never fused)
 * from acc = 0.0f, exactly as q4_gemv_1x1_scalar, so decode runs this kernel at M = 1 over the
 * packed copy (decode_packed) with the GEMV's bits. Tails: an odd last activation row is run
 * as a pair with itself, a weight pair past n1 repeats the pair holding row n1 - 1 (reads stay
 * in the pairs of [n0, n1)); only valid outputs are stored. gs % 32 != 0 or gs not dividing
 * K: pack copies the row-major nibbles and run is the scalar kernel over them. */
#include <string.h>

#include "../q4_neon_common.h"

static inline int8x16_t q4i_zlo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
static inline int8x16_t q4i_zhi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* The layout covers the contract's shapes; others keep the row-major nibbles. */
static int q4i_tiled(size_t K, size_t gs) { return gs != 0 && gs % 32 == 0 && K % gs == 0; }

static size_t q4i_pack_size(size_t N, size_t K, size_t gs) {
    return q4i_tiled(K, gs) ? (N + 1) / 2 * K : N * (K / 2);
}

static void q4i_pack(uint8_t *dst, const uint8_t *w, size_t N, size_t K, size_t gs) {
    if (!q4i_tiled(K, gs)) {
        memcpy(dst, w, N * (K / 2));
        return;
    }
    for (size_t p = 0; p < (N + 1) / 2; p++)
        for (size_t b = 0; b < K / 32; b++)
            for (size_t h = 0; h < 2; h++)     /* bytes 8h .. 8h + 7 of the block */
                for (size_t r = 0; r < 2; r++) { /* of row 2p + r */
                    uint8_t *d = dst + p * K + 32 * b + 16 * h + 8 * r;
                    if (2 * p + r < N)
                        memcpy(d, w + (2 * p + r) * (K / 2) + 16 * b + 8 * h, 8);
                    else
                        memset(d, 0, 8);
                }
}

static void q4i_unpack(uint8_t *w, const uint8_t *src, size_t N, size_t K, size_t gs) {
    if (!q4i_tiled(K, gs)) {
        memcpy(w, src, N * (K / 2));
        return;
    }
    for (size_t n = 0; n < N; n++)
        for (size_t b = 0; b < K / 32; b++)
            for (size_t h = 0; h < 2; h++)
                memcpy(w + n * (K / 2) + 16 * b + 8 * h,
                       src + n / 2 * K + 32 * b + 16 * h + 8 * (n % 2), 8);
}

/* lanes [m0n0 m0n1 m1n0 m1n1] of a pair (a01: weight rows 0, 1; a23: rows 2, 3) -> row m */
static inline void q4i_store_pair(float *o0, float *o1, float32x4_t a01, float32x4_t a23,
                                  size_t nv, int two) {
    q8_store(o0, vcombine_f32(vget_low_f32(a01), vget_low_f32(a23)), nv);
    if (two) q8_store(o1, vcombine_f32(vget_high_f32(a01), vget_high_f32(a23)), nv);
}

/* 8 activation bytes in both halves (the A operand of a single row) */
static inline int8x16_t q4i_dup8(const int8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return vreinterpretq_s8_s64(vdupq_n_s64(v));
}

void if_q4_gemm_4x4_i8mm(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                         const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                         size_t n1, size_t K, size_t gs) {
    if (!q4i_tiled(K, gs)) {
        if_q4_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs;
    const int8x16_t cbv = vld1q_s8(cb);
    const uint8x16_t m15 = vdupq_n_u8(15);
    for (size_t m0 = 0; m0 < M; m0 += 4) {
        /* activation rows of the two pairs (a missing row repeats its pair's first, a missing
         * second pair repeats the first; neither is stored) */
        const size_t mb = M - m0 < 4 ? M - m0 : 4;
        const int8_t *x[4];
        const float *xsr[4];
        for (size_t i = 0; i < 4; i++) {
            const size_t mm = m0 + (i < mb ? i : (i & 2) && mb > 2 ? 2 : 0);
            x[i] = xq + mm * K;
            xsr[i] = xs + mm * ng;
        }
        const int pairs = mb > 2 ? 2 : 1;
        for (size_t n = n0; n < n1; n += 4) {
            const size_t nv = n1 - n < 4 ? n1 - n : 4;
            /* weight pairs n / 2 and n / 2 + 1 (past n1: the pair of row n1 - 1) */
            const size_t plast = (n1 - 1) / 2;
            const uint8_t *wp[2];
            for (size_t q = 0; q < 2; q++) {
                const size_t p = n / 2 + q <= plast ? n / 2 + q : plast;
                wp[q] = w + p * K;
            }
            const uint8_t *wr[4];
            const float *sr[4];
            q4n_wrows(wr, sr, w, ws, n, n1, K, ng); /* sr: the rows' scales (wr unused) */
            /* acc[p][0]: pair p x weight rows 0, 1; acc[p][1]: x rows 2, 3 */
            float32x4_t acc[2][2];
            for (int p = 0; p < 2; p++) acc[p][0] = acc[p][1] = vdupq_n_f32(0.0f);
            for (size_t g = 0; g < ng; g++) {
                int32x4_t is[2][2];
                for (int p = 0; p < 2; p++) is[p][0] = is[p][1] = vdupq_n_s32(0);
                for (size_t k = g * gs; k < (g + 1) * gs; k += 32) {
                    /* B operands: [q][s] = weight pair q, K step s (values 8s .. 8s + 7) */
                    int8x16_t B[2][4];
                    for (int q = 0; q < 2; q++) {
                        const uint8x16_t b0 = vld1q_u8(wp[q] + k), b1 = vld1q_u8(wp[q] + k + 16);
                        B[q][0] = vqtbl1q_s8(cbv, vandq_u8(b0, m15));
                        B[q][1] = vqtbl1q_s8(cbv, vandq_u8(b1, m15));
                        B[q][2] = vqtbl1q_s8(cbv, vshrq_n_u8(b0, 4));
                        B[q][3] = vqtbl1q_s8(cbv, vshrq_n_u8(b1, 4));
                    }
                    if (mb == 1) { /* decode: one row in both halves of A */
                        for (int s = 0; s < 4; s++) {
                            const int8x16_t A = q4i_dup8(x[0] + k + 8 * s);
                            for (int q = 0; q < 2; q++) is[0][q] = vmmlaq_s32(is[0][q], A, B[q][s]);
                        }
                        continue;
                    }
                    for (int p = 0; p < pairs; p++) {
                        const int8x16_t a0 = vld1q_s8(x[2 * p] + k), a1 = vld1q_s8(x[2 * p + 1] + k);
                        const int8x16_t b0 = vld1q_s8(x[2 * p] + k + 16);
                        const int8x16_t b1 = vld1q_s8(x[2 * p + 1] + k + 16);
                        const int8x16_t A[4] = {q4i_zlo(a0, a1), q4i_zhi(a0, a1), q4i_zlo(b0, b1),
                                                q4i_zhi(b0, b1)};
                        for (int s = 0; s < 4; s++)
                            for (int q = 0; q < 2; q++) is[p][q] = vmmlaq_s32(is[p][q], A[s], B[q][s]);
                    }
                }
                /* scales: [s0 s1 s0 s1] and [s2 s3 s2 s3]; activations [xs0 xs0 xs1 xs1] */
                const float32x2_t s01 = vset_lane_f32(sr[1][g], vdup_n_f32(sr[0][g]), 1);
                const float32x2_t s23 = vset_lane_f32(sr[3][g], vdup_n_f32(sr[2][g]), 1);
                const float32x4_t wsv[2] = {vcombine_f32(s01, s01), vcombine_f32(s23, s23)};
                for (int p = 0; p < pairs; p++) {
                    const float32x4_t xsv = vcombine_f32(vdup_n_f32(xsr[2 * p][g]),
                                                         vdup_n_f32(xsr[2 * p + 1][g]));
                    for (int q = 0; q < 2; q++)
                        acc[p][q] = vaddq_f32(
                            acc[p][q], vmulq_f32(vmulq_f32(vcvtq_f32_s32(is[p][q]), wsv[q]), xsv));
                }
            }
            for (int p = 0; p < pairs; p++) {
                const size_t m = m0 + 2 * (size_t)p;
                q4i_store_pair(out + m * ldo + n, out + (m + 1) * ldo + n, acc[p][0], acc[p][1],
                               nv, m + 1 < M);
            }
        }
    }
}

const if_q4_gemm_kernel if_k_q4_gemm_4x4_i8mm = {.name = "q4_gemm_4x4_i8mm",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP | IF_FEAT_I8MM, .mr = 4, .nr = 4,
    .run = if_q4_gemm_4x4_i8mm, .pack_size = q4i_pack_size, .pack = q4i_pack,
    .unpack = q4i_unpack, .decode_packed = 1};
