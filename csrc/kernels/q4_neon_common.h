/* q4_neon_common.h - the Armv8.0 Advanced SIMD pieces of the 4-bit codebook kernels (static
 * inline only; included by files compiled with the neon or i8mm tier flags):
 *   - the codebook lookup: one 16-byte block of nibbles (32 values, if_q4_gemv_fn's layout:
 *     byte j = value j low, value j + 16 high) -> AND / USHR -> two TBLs into the 16-entry
 *     int8 codebook (one q register): lo = values 0..15, hi = values 16..31;
 *   - the Armv8.0 integer dot product: q8n_mac16 of ../q8_neon_common.h, SMULL + SMLAL2 (two
 *     int8 products per int16 lane: |x| <= 128, |cb| <= 127, so |sum| <= 32512) then SADALP;
 *   - the MR x 4 tile of q4_gemv_1x4_neon / q4_gemm_4x4_neon: MR activation rows x 4 weight
 *     rows; each weight row's block is looked up once and reused by the MR rows; per group an
 *     exact int32 sum per (m, r), an ADDP tree to one int32x4 per activation row (lane r =
 *     weight row r), then in group order acc = acc + (((float)isum * ws[r][g]) * xs[m][g])
 *     (SCVTF, FMUL, FMUL, FADD: never fused), from acc = 0.0f: q4_gemv_1x1_scalar's bits.
 *     Tail weight rows repeat the last valid row (reads stay inside [n0, n1)); only valid
 *     lanes are stored. */
#ifndef IF_Q4_NEON_COMMON_H
#define IF_Q4_NEON_COMMON_H

#include "q8_neon_common.h" /* the float step, ADDP tree, store and SMULL/SMLAL2/SADALP */

#define Q4N_INLINE static inline __attribute__((always_inline))

/* the 32 int8 weights of one block: lo = values 0..15, hi = values 16..31 */
Q4N_INLINE void q4n_expand(const uint8_t *p, int8x16_t cbv, int8x16_t *lo, int8x16_t *hi) {
    const uint8x16_t b = vld1q_u8(p);
    *lo = vqtbl1q_s8(cbv, vandq_u8(b, vdupq_n_u8(15)));
    *hi = vqtbl1q_s8(cbv, vshrq_n_u8(b, 4));
}

/* Weight rows n .. n + 3 of a tile (rows past n1 repeat row n1 - 1). */
Q4N_INLINE void q4n_wrows(const uint8_t *wr[4], const float *sr[4], const uint8_t *w,
                          const float *ws, size_t n, size_t n1, size_t K, size_t ng) {
    for (size_t r = 0; r < 4; r++) {
        const size_t rr = n + r < n1 ? n + r : n1 - 1;
        wr[r] = w + rr * (K / 2);
        sr[r] = ws + rr * ng;
    }
}

/* The MR x 4 tile: acc[m] lane r = out[m][n + r] over all ng groups (see the file comment). */
Q4N_INLINE void q4n_tile(const int MR, float32x4_t acc[4], const int8_t *const x[4],
                         const float *const xs[4], const uint8_t *const wr[4],
                         const float *const sr[4], int8x16_t cbv, size_t ng, size_t gs) {
    for (int m = 0; m < MR; m++) acc[m] = vdupq_n_f32(0.0f);
    for (size_t g = 0; g < ng; g++) {
        int32x4_t a[4][4];
        for (int m = 0; m < MR; m++)
            for (int r = 0; r < 4; r++) a[m][r] = vdupq_n_s32(0);
        for (size_t k = g * gs; k < (g + 1) * gs; k += 32) {
            int8x16_t lo[4], hi[4];
            for (int r = 0; r < 4; r++) q4n_expand(wr[r] + k / 2, cbv, &lo[r], &hi[r]);
            for (int m = 0; m < MR; m++) {
                const int8x16_t x0 = vld1q_s8(x[m] + k), x1 = vld1q_s8(x[m] + k + 16);
                for (int r = 0; r < 4; r++)
                    a[m][r] = q8n_mac16(q8n_mac16(a[m][r], x0, lo[r]), x1, hi[r]);
            }
        }
        float32x4_t wsv = vld1q_dup_f32(sr[0] + g);
        wsv = vld1q_lane_f32(sr[1] + g, wsv, 1);
        wsv = vld1q_lane_f32(sr[2] + g, wsv, 2);
        wsv = vld1q_lane_f32(sr[3] + g, wsv, 3);
        for (int m = 0; m < MR; m++) acc[m] = q8_step(acc[m], q8_sum4(a[m]), wsv, xs[m][g]);
    }
}

#endif
