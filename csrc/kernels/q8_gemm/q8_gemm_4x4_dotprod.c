/* Q8 GEMM, Armv8.2 dotprod (-mcpu=generic+dotprod). Tile: 4 activation rows x 4 weight rows,
 * four float32x4_t accumulators (one per activation row, lane = weight row).
 * gs = 4, 8, 16: 16 bytes of the 4 weight rows are transposed as a 4x4 matrix of 32-bit words
 * (TRN1/TRN2), so word s of every row sits in one vector; SDOT by element
 * (vdotq_laneq_s32 against word s of an activation row) then yields the 4 rows' isums in the
 * lanes directly: one transpose serves 4 activation rows, no per-group reduction.
 * gs >= 32 (multiples of 16) and other gs % 4 == 0: one SDOT per 16 bytes per (activation row,
 * weight row), 16 int32x4 accumulators, ADDP tree per group.
 * Per group each lane adds ((float)isum * ws) * xs in group order (FMUL, FMUL, FADD, never
 * fused) with the 4 rows' scales transposed 4 groups at a time: bit-equal to
 * q8_gemm_1x1_scalar. Loop: 4-row weight quads outer, activation quads inner, the M % 4 rows by
 * the 1 x 4 GEMV tile; partial weight quads repeat row n1 - 1 and store only valid lanes.
 * gs % 4 != 0 falls back to the scalar kernel. Code: ../q8_neon_common.h. */
#include "../q8_neon_common.h"

void if_q8_gemm_4x4_dotprod(float *out, size_t ldo, const int8_t *xq, const float *xs,
                            size_t M, const int8_t *w, const float *ws, size_t n0, size_t n1,
                            size_t K, size_t gs) {
    if (gs == 0 || gs % 4 != 0) {
        if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
        return;
    }
    Q8_DISPATCH(q8_gemm_impl, Q8_ISA_DOT, gs, out, ldo, xq, xs, M, w, ws, n0, n1, K);
}

const if_q8_gemm_kernel if_k_q8_gemm_4x4_dotprod = {.name = "q8_gemm_4x4_dotprod",
    .requires = IF_FEAT_ASIMD | IF_FEAT_ASIMDDP, .mr = 4, .nr = 4, .run = if_q8_gemm_4x4_dotprod};
