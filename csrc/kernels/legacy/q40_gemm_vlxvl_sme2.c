/* Q4_0 GEMM, SME2 (-mcpu=generic+sme2): 4-bit values, no minimum; per block of VL weight rows the
 * unsigned values as int8, SMOPA int8 outer products of each 32-value block into a ZA int32 tile
 * (the exact dot), then Q4_0's scalar float step per block; written for any streaming vector
 * length (../legacy_sme2_body.h). */
#define LGS_TYPE IFL_Q40
#define LGS_BODY q40_gemm_sme2_body
#include "../legacy_sme2_body.h"

/* Q4_0 GEMM, SME2, tile VL x VL (VL = SVL/32: 4 at 128-bit, 16 at 512-bit): out[m][n] for
 * m < M, n in [n0, n1), bit-equal to q40_gemm_1x1_scalar. An ordinary (non-streaming) entry:
 * the streaming body owns ZA and makes no calls. */
void if_q40_gemm_vlxvl_sme2(float *out, size_t ldo, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                            size_t n1, size_t K) {
    if (M == 0 || n0 >= n1) return;
    q40_gemm_sme2_body(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

/* "vl": the step is the streaming vector length in 32-bit lanes (VL, known at run time);
 * mr and nr give its least value, VL = 4 at 128 bits */
const if_kq_gemm_kernel if_k_q40_gemm_vlxvl_sme2 = {.name = "q40_gemm_vlxvl_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = 4, .nr = 4,
    .run = if_q40_gemm_vlxvl_sme2};
