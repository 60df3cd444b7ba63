/* Q5_K GEMM, SME2 (-mcpu=generic+sme2): per block of VL weight rows the 5-bit values times
 * their 6-bit sub-block scale as int16 (at most 63 * 31), SMOPA int16 outer products of a
 * whole 256-value block into a ZA int32 tile (sumi, exact), then Q5_K's (= Q4_K's) scalar
 * float step with the mins through the activations' int16 sums; written for any streaming
 * vector length (../kquant_sme2_body.h). */
#include "../kquant_common.h"
#include "../kquant_sme2_body.h" /* the helpers (KQS_BODY not yet defined) */

#define KQS_BB IF_Q5K_BLOCK_BYTES
#define KQS_MIN 1

/* One Q5_K block: the shared Q4_K / Q5_K expansion with each value's fifth bit. */
#define kqs_expand(blk, dst, m8, d, dmin) kqs_expand_q45(blk, dst, m8, d, dmin, 1)

#define KQS_BODY q5k_gemm_sme2_body
#include "../kquant_sme2_body.h" /* the streaming body */

/* Q5_K GEMM, SME2, tile VL x VL (VL = SVL/32: 4 at 128-bit, 16 at 512-bit): out[m][n] for
 * m < M, n in [n0, n1), bit-equal to q5k_gemm_1x1_scalar. An ordinary (non-streaming) entry:
 * the streaming body owns ZA and makes no calls. */
void if_q5k_gemm_vlxvl_sme2(float *out, size_t ldo, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                            size_t n1, size_t K) {
    if (M == 0 || n0 >= n1) return;
    q5k_gemm_sme2_body(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

/* "vl": the step is the streaming vector length in 32-bit lanes (VL, known at run time);
 * mr and nr give its least value, VL = 4 at 128 bits */
const if_kq_gemm_kernel if_k_q5k_gemm_vlxvl_sme2 = {.name = "q5k_gemm_vlxvl_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = 4, .nr = 4,
    .run = if_q5k_gemm_vlxvl_sme2};
