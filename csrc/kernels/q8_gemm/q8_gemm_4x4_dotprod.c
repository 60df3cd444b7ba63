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
 * gs % 4 != 0 falls back to the scalar kernel. Code: q8_gemm_4x4_neon.c's loop with the
 * dotprod integer part (../q8_neon_common.h). */
#define Q8_ISA Q8_ISA_DOT
#define Q8_GEMM_FN if_q8_gemm_4x4_dotprod
#define Q8_GEMM_DESC if_k_q8_gemm_4x4_dotprod
#define Q8_GEMM_NAME "q8_gemm_4x4_dotprod"
#define Q8_GEMM_REQUIRES (IF_FEAT_ASIMD | IF_FEAT_ASIMDDP)
#include "q8_gemm_4x4_neon.c"
