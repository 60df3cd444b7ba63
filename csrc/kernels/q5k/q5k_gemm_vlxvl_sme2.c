/* Q5_K GEMM, SME2 (-mcpu=generic+sme2): per block of VL weight rows the 5-bit values times
 * their 6-bit sub-block scale as int16 (at most 63 * 31), SMOPA int16 outer products of a
 * whole 256-value block into a ZA int32 tile (sumi, exact), then Q5_K's (= Q4_K's) scalar
 * float step with the mins through the activations' int16 sums; written for any streaming
 * vector length (../kquant_sme2_body.h). */
#include "../kquant_common.h"
#include "../kquant_sme2_body.h" /* the helpers (KQS_BODY not yet defined) */

#define KQS_BB IF_Q5K_BLOCK_BYTES
#define KQS_MIN 1

/* One Q5_K block -> dst[k] = sc(k / 32) * value k (K order), the 8 mins, d and dmin. Scales
 * and mins as ifk_q4k_scales decodes them; value 64c + l is nibble l of qs[32c ..] (low) with
 * bit 2c of qh[l] as bit 4, value 64c + 32 + l the high nibble with bit 2c + 1. */
static inline __attribute__((always_inline)) void
kqs_expand(const uint8_t *blk, int16_t *dst, int32_t m8[16], float *d,
           float *dmin) __arm_streaming {
    const uint8_t *s = blk + 4, *qh = blk + 16, *qs = blk + 48;
    int32_t sc[8];
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m8[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
        m8[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    for (int j = 8; j < 16; j++) m8[j] = 0; /* 8 mins; the rest unused */
    /* 16-bit lanes: byte loads zero-extended, nibbles and qh bits by AND / shift / OR */
    for (int c = 0; c < 4; c++)
        for (uint64_t l = 0; l < 32; l += svcnth()) {
            const svbool_t pg = svwhilelt_b16_u64(l, 32);
            const svuint16_t q = svld1ub_u16(pg, qs + 32 * c + l), h = svld1ub_u16(pg, qh + l);
            const svuint16_t hl = svlsl_n_u16_x(
                pg, svand_n_u16_x(pg, svlsr_n_u16_x(pg, h, 2 * c), 1), 4);
            const svuint16_t hh = svlsl_n_u16_x(
                pg, svand_n_u16_x(pg, svlsr_n_u16_x(pg, h, 2 * c + 1), 1), 4);
            const svint16_t lo =
                svreinterpret_s16_u16(svorr_u16_x(pg, svand_n_u16_x(pg, q, 15), hl));
            const svint16_t hi =
                svreinterpret_s16_u16(svorr_u16_x(pg, svlsr_n_u16_x(pg, q, 4), hh));
            svst1_s16(pg, dst + 64 * c + l, svmul_n_s16_x(pg, lo, (int16_t)sc[2 * c]));
            svst1_s16(pg, dst + 64 * c + 32 + l, svmul_n_s16_x(pg, hi, (int16_t)sc[2 * c + 1]));
        }
    *d = kqs_f16(blk);
    *dmin = kqs_f16(blk + 2);
}

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
