/* Q8 GEMM, Armv8.0 Advanced SIMD (-mcpu=generic, no dotprod). Tile: 4 activation rows x 4
 * weight rows, 16 int32x4 partial sums per 16-byte K step (each weight and activation load
 * shared by 4 products: SMULL + SMLAL2 into int16, SADALP into int32), reduced per group with
 * an ADDP tree to one int32x4 of isums per activation row (lane = weight row); gs = 4 and 8
 * take several groups per load (int16 ADDP, SADDLP, 4x4 transpose). Four float32x4_t
 * accumulators (one per activation row) add ((float)isum * ws) * xs per group in order, with
 * the 4 weight rows' scales transposed 4 groups at a time: bit-equal to q8_gemm_1x1_scalar.
 * Loop: 4-row weight quads outer (they stay in L1), activation quads inner, the M % 4 rows by
 * the 1 x 4 GEMV tile; partial weight quads repeat row n1 - 1 and store only valid lanes.
 * gs % 4 != 0 falls back to the scalar kernel. Code: ../q8_neon_common.h. */
#include "../q8_neon_common.h"

void if_q8_gemm_4x4_neon(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                         const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                         size_t gs) {
    if (gs == 0 || gs % 4 != 0) {
        if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
        return;
    }
    Q8_DISPATCH(q8_gemm_impl, Q8_ISA_NEON, gs, out, ldo, xq, xs, M, w, ws, n0, n1, K);
}

const if_q8_gemm_kernel if_k_q8_gemm_4x4_neon = {.name = "q8_gemm_4x4_neon",
    .requires = IF_FEAT_ASIMD, .mr = 4, .nr = 4, .run = if_q8_gemm_4x4_neon};
