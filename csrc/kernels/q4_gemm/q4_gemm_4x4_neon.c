/* 4-bit codebook GEMM, Armv8.0 Advanced SIMD (-mcpu=generic, no dotprod). Tile: 4 activation
 * rows x 4 weight rows: each weight row's block of 32 nibbles is looked up once (TBL into the
 * codebook) and dotted with the 4 activation rows (SMULL + SMLAL2 + SADALP); per group an
 * exact int32 sum per output, then acc = acc + (((float)isum * ws) * xs) in group order, lanes
 * = weight rows, exactly as q4_gemv_1x1_scalar. The last M % 4 activation rows run the same
 * tile at one row. Helpers and the tile: ../q4_neon_common.h. */
#include "../q4_neon_common.h"

void if_q4_gemm_4x4_neon(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                         const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                         size_t n1, size_t K, size_t gs) {
    if (gs == 0 || gs % 32 || K % gs) {
        if_q4_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t ng = K / gs;
    const int8x16_t cbv = vld1q_s8(cb);
    for (size_t m0 = 0; m0 < M; m0 += 4) {
        const size_t mb = M - m0 < 4 ? M - m0 : 4;
        const int8_t *x[4];
        const float *xsr[4];
        for (size_t i = 0; i < 4; i++) {
            const size_t mm = m0 + (i < mb ? i : 0);
            x[i] = xq + mm * K;
            xsr[i] = xs + mm * ng;
        }
        for (size_t n = n0; n < n1; n += 4) {
            const uint8_t *wr[4];
            const float *sr[4];
            q4n_wrows(wr, sr, w, ws, n, n1, K, ng);
            float32x4_t acc[4];
            if (mb == 4) {
                q4n_tile(4, acc, x, xsr, wr, sr, cbv, ng, gs);
                for (size_t i = 0; i < 4; i++) q8_store(out + (m0 + i) * ldo + n, acc[i], n1 - n);
            } else {
                for (size_t i = 0; i < mb; i++) {
                    const int8_t *xi[4] = {x[i], x[i], x[i], x[i]};
                    const float *si[4] = {xsr[i], xsr[i], xsr[i], xsr[i]};
                    q4n_tile(1, acc, xi, si, wr, sr, cbv, ng, gs);
                    q8_store(out + (m0 + i) * ldo + n, acc[0], n1 - n);
                }
            }
        }
    }
}

const if_q4_gemm_kernel if_k_q4_gemm_4x4_neon = {.name = "q4_gemm_4x4_neon",
    .requires = IF_FEAT_ASIMD, .mr = 4, .nr = 4, .run = if_q4_gemm_4x4_neon};
