/* 4-bit codebook GEMV, Armv8.0 Advanced SIMD (-mcpu=generic, no dotprod). Tile: 1 activation
 * row x 4 weight rows (one float32x4_t accumulator, lane = output row). Per block of 32 values
 * and row: one 16-byte load of nibbles, AND / USHR, two TBLs into the 16-entry codebook, then
 * SMULL + SMLAL2 + SADALP against the activation's two 16-byte halves into an int32x4 partial
 * sum; per group an ADDP tree gives the 4 rows' isums and each lane adds
 * ((float)isum * ws) * xs in group order (FMUL, FMUL, FADD, never fused), exactly as
 * q4_gemv_1x1_scalar. Helpers and the tile: ../q4_neon_common.h. */
#include "../q4_neon_common.h"

void if_q4_gemv_1x4_neon(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                         const float *ws, const int8_t *cb, size_t n0, size_t n1, size_t K,
                         size_t gs) {
    if (gs == 0 || gs % 32 || K % gs) {
        if_q4_gemv_1x1_scalar(out, xq, xs, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs;
    const int8x16_t cbv = vld1q_s8(cb);
    const int8_t *x[4] = {xq, xq, xq, xq};
    const float *xsr[4] = {xs, xs, xs, xs};
    for (size_t n = n0; n < n1; n += 4) {
        const uint8_t *wr[4];
        const float *sr[4];
        q4n_wrows(wr, sr, w, ws, n, n1, K, ng);
        float32x4_t acc[4];
        q4n_tile(1, acc, x, xsr, wr, sr, cbv, ng, gs);
        q8_store(out + n, acc[0], n1 - n);
    }
}

const if_q4_gemv_kernel if_k_q4_gemv_1x4_neon = {.name = "q4_gemv_1x4_neon",
    .requires = IF_FEAT_ASIMD, .mr = 1, .nr = 4, .run = if_q4_gemv_1x4_neon};
