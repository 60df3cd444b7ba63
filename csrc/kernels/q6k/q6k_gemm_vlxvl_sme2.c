/* Q6_K GEMM, SME2 (-mcpu=generic+sme2): per block of VL weight rows the unsigned 6-bit values
 * u times their int8 sub-block scale as int16 (|sc * u| <= 128 * 63), SMOPA int16 outer
 * products of a whole 256-value block into a ZA int32 tile, minus sum_j 32 sc_j xsum_j (so
 * sumi = sum_j sc_j (dot_j - 32 xsum_j), the scalar kernel's, exact), then Q6_K's scalar float
 * step; written for any streaming vector length (../kquant_sme2_body.h). */
#include "../kquant_common.h"
#include "../kquant_sme2_body.h" /* the helpers (KQS_BODY not yet defined) */

#define KQS_BB IF_Q6K_BLOCK_BYTES
#define KQS_MIN 0

/* One Q6_K block -> dst[i] = sc[i / 16] * u_i (K order), c_j = 32 sc_j and d. u_i as
 * ifk_q6k_u reads it: half h = i / 128, quarter t, lane l; low 4 bits from ql, top 2 from qh. */
static inline __attribute__((always_inline)) void
kqs_expand(const uint8_t *blk, int16_t *dst, int32_t m8[16], float *d,
           float *dmin) __arm_streaming {
    const int8_t *sc = (const int8_t *)(blk + 192);
    /* 16-bit lanes, 16 values (one scale) at a time: byte loads zero-extended, AND / shift /
     * OR into u, times the scale */
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 4; t++)
            for (uint64_t l0 = 0; l0 < 32; l0 += 16)
                for (uint64_t l = l0; l < l0 + 16; l += svcnth()) {
                    const svbool_t pg = svwhilelt_b16_u64(l, l0 + 16);
                    const uint64_t i = 128 * (uint64_t)h + 32 * (uint64_t)t + l;
                    const svuint16_t ql = svld1ub_u16(pg, blk + 64 * h + l + 32 * (t & 1));
                    const svuint16_t qh = svld1ub_u16(pg, blk + 128 + 32 * h + l);
                    const svuint16_t lo = t < 2 ? svand_n_u16_x(pg, ql, 15)
                                                : svlsr_n_u16_x(pg, ql, 4);
                    const svuint16_t hi = svlsl_n_u16_x(
                        pg, svand_n_u16_x(pg, svlsr_n_u16_x(pg, qh, 2 * t), 3), 4);
                    const svint16_t q = svreinterpret_s16_u16(svorr_u16_x(pg, lo, hi));
                    svst1_s16(pg, dst + i, svmul_n_s16_x(pg, q, (int16_t)sc[i / 16]));
                }
    for (int j = 0; j < 16; j++) m8[j] = 32 * sc[j];
    *d = ifk_f16(blk + 208);
    *dmin = 0.0f;
}

#define KQS_BODY q6k_gemm_sme2_body
#include "../kquant_sme2_body.h" /* the streaming body */

/* Q6_K GEMM, SME2, tile VL x VL (VL = SVL/32: 4 at 128-bit, 16 at 512-bit): out[m][n] for
 * m < M, n in [n0, n1), bit-equal to q6k_gemm_1x1_scalar. An ordinary (non-streaming) entry:
 * the streaming body owns ZA and makes no calls. */
void if_q6k_gemm_vlxvl_sme2(float *out, size_t ldo, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                            size_t n1, size_t K) {
    if (M == 0 || n0 >= n1) return;
    q6k_gemm_sme2_body(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

/* "vl": the step is the streaming vector length in 32-bit lanes (VL, known at run time);
 * mr and nr give its least value, VL = 4 at 128 bits */
const if_kq_gemm_kernel if_k_q6k_gemm_vlxvl_sme2 = {.name = "q6k_gemm_vlxvl_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = 4, .nr = 4,
    .run = if_q6k_gemm_vlxvl_sme2};
