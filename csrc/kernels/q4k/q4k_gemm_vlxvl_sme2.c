/* Q4_K GEMM, SME2 (-mcpu=generic+sme2): per block of VL weight rows the nibbles times their
 * 6-bit sub-block scale as int16, SMOPA int16 outer products of a whole 256-value block into a
 * ZA int32 tile (sumi, exact), then Q4_K's scalar float step with the mins through the
 * activations' int16 sums; written for any streaming vector length (../kquant_sme2_body.h). */
#include "../kquant_common.h"
#include "../kquant_sme2_body.h" /* the helpers (KQS_BODY not yet defined) */

#define KQS_BB IF_Q4K_BLOCK_BYTES
#define KQS_MIN 1

/* One Q4_K block -> dst[k] = sc(k / 32) * value k (K order), the 8 mins, d and dmin. The
 * scales are decoded as ifk_q4k_scales does (j < 4: low 6 bits of bytes j, j + 4; j >= 4:
 * byte j + 4's nibbles and the top 2 bits of bytes j - 4, j). */
static inline __attribute__((always_inline)) void
kqs_expand(const uint8_t *blk, int16_t *dst, int32_t m8[16], float *d,
           float *dmin) __arm_streaming {
    const uint8_t *s = blk + 4, *qs = blk + 16;
    int32_t sc[8];
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m8[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
        m8[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    for (int j = 8; j < 16; j++) m8[j] = 0; /* 8 mins; the rest unused */
    /* 16-bit lanes: byte loads zero-extended, the nibbles by AND / shift, times the scale */
    for (int c = 0; c < 4; c++)
        for (uint64_t l = 0; l < 32; l += svcnth()) {
            const svbool_t pg = svwhilelt_b16_u64(l, 32);
            const svuint16_t q = svld1ub_u16(pg, qs + 32 * c + l);
            const svint16_t lo = svreinterpret_s16_u16(svand_n_u16_x(pg, q, 15));
            const svint16_t hi = svreinterpret_s16_u16(svlsr_n_u16_x(pg, q, 4));
            svst1_s16(pg, dst + 64 * c + l, svmul_n_s16_x(pg, lo, (int16_t)sc[2 * c]));
            svst1_s16(pg, dst + 64 * c + 32 + l, svmul_n_s16_x(pg, hi, (int16_t)sc[2 * c + 1]));
        }
    *d = kqs_f16(blk);
    *dmin = kqs_f16(blk + 2);
}

#define KQS_BODY q4k_gemm_sme2_body
#include "../kquant_sme2_body.h" /* the streaming body */

/* Q4_K GEMM, SME2, tile VL x VL (VL = SVL/32: 4 at 128-bit, 16 at 512-bit): out[m][n] for
 * m < M, n in [n0, n1), bit-equal to q4k_gemm_1x1_scalar. An ordinary (non-streaming) entry:
 * the streaming body owns ZA and makes no calls. */
void if_q4k_gemm_vlxvl_sme2(float *out, size_t ldo, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                            size_t n1, size_t K) {
    if (M == 0 || n0 >= n1) return;
    q4k_gemm_sme2_body(out, ldo, xq, xd, xsum, M, w, n0, n1, K);
}

/* "vl": the step is the streaming vector length in 32-bit lanes (VL, known at run time);
 * mr and nr give its least value, VL = 4 at 128 bits */
const if_kq_gemm_kernel if_k_q4k_gemm_vlxvl_sme2 = {.name = "q4k_gemm_vlxvl_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = 4, .nr = 4,
    .run = if_q4k_gemm_vlxvl_sme2};
