/* kquant_sme2_body.h - the SME2 GEMM body shared by the K-quant types (Q4_K, Q5_K, Q6_K).
 * Each type's q*k_gemm_vlxvl_sme2.c includes it twice: first for the helpers (kqs_expand_q45,
 * and ifk_f16 from kquant_common.h), then, for the streaming body, after it defines
 *   KQS_BB         the block's bytes (256 values),
 *   KQS_MIN        1 when the block has 6-bit mins (Q4_K, Q5_K: the float step subtracts
 *                  (dmin * xd) * (float)summ, summ = sum_j c_j (xsum[2j] + xsum[2j + 1])),
 *                  0 when instead sumi -= sum_j c_j xsum[j] over 16 sub-blocks (Q6_K: c_j =
 *                  32 sc_j, the scalar kernel's zero point through the sums it is given),
 *   kqs_expand()   one block -> its 256 unsigned values times their sub-block scale as
 *                  int16 (in K order), the coefficients c_j of the sums (8 or 16) and the
 *                  f16 scales d, dmin (streaming, always inlined: the body makes no calls),
 *   KQS_BODY       the body's name.
 *
 * Why int16 operands: a sub-block scale times a value is at most 63 * 31 (Q4_K, Q5_K) or
 * 128 * 63 (Q6_K), which fits int16 but not int8, so SMOPA's 2-way int16 form (za32_s16)
 * accumulates a whole block's scaled products (sumi) in one int32 tile: one readout per 256
 * values instead of one per sub-block. Every product and sum is an exact integer, so each
 * tile element is the scalar kernel's sumi (int32 sums are exact in any order). */
#ifndef IF_KQUANT_SME2_BODY_H
#define IF_KQUANT_SME2_BODY_H

#include "kquant_common.h"
#include "q8_sme2_common.h"

/* The three 32-bit ZA tiles used (compile-time tile numbers, as the ACLE requires). */
#define KQS_T_ACC 0 /* int32 sumi: row i = activation row m0 + i, column j = weight row nb + j */
#define KQS_T_X 1   /* activations: row i = 2*VL int16 values of activation row m0 + i */
#define KQS_T_W 2   /* weights: row j = 2*VL scaled int16 values of weight row nb + j */
#define KQS_ZERO_ACC (0x11u << KQS_T_ACC) /* ZERO mask of ZA<KQS_T_ACC>.S */

/* One Q4_K (q5 = 0) or Q5_K (q5 = 1) block -> dst[k] = sc(k / 32) * value k (K order), the 8
 * mins, d and dmin: Q4_K's and Q5_K's kqs_expand. Scales and mins as ifk_q4k_scales decodes
 * them (j < 4: low 6 bits of bytes j, j + 4; j >= 4: byte j + 4's nibbles and the top 2 bits
 * of bytes j - 4, j); value 64c + l is nibble l of qs[32c ..] (low), value 64c + 32 + l the
 * high nibble, Q5_K's with bit 2c / 2c + 1 of qh[l] as bit 4. */
static inline __attribute__((always_inline)) void
kqs_expand_q45(const uint8_t *blk, int16_t *dst, int32_t m8[16], float *d, float *dmin,
               const int q5) __arm_streaming {
    const uint8_t *s = blk + 4, *qh = blk + 16, *qs = blk + (q5 ? 48 : 16);
    int32_t sc[8];
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m8[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 6) << 4);
        m8[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    for (int j = 8; j < 16; j++) m8[j] = 0; /* 8 mins; the rest unused */
    /* 16-bit lanes: byte loads zero-extended, nibbles (and qh bits) by AND / shift / OR */
    for (int c = 0; c < 4; c++)
        for (uint64_t l = 0; l < 32; l += svcnth()) {
            const svbool_t pg = svwhilelt_b16_u64(l, 32);
            const svuint16_t q = svld1ub_u16(pg, qs + 32 * c + l);
            svuint16_t lo = svand_n_u16_x(pg, q, 15), hi = svlsr_n_u16_x(pg, q, 4);
            if (q5) {
                const svuint16_t h = svld1ub_u16(pg, qh + l);
                lo = svorr_u16_x(pg, lo, svlsl_n_u16_x(
                    pg, svand_n_u16_x(pg, svlsr_n_u16_x(pg, h, 2 * c), 1), 4));
                hi = svorr_u16_x(pg, hi, svlsl_n_u16_x(
                    pg, svand_n_u16_x(pg, svlsr_n_u16_x(pg, h, 2 * c + 1), 1), 4));
            }
            svst1_s16(pg, dst + 64 * c + l,
                      svmul_n_s16_x(pg, svreinterpret_s16_u16(lo), (int16_t)sc[2 * c]));
            svst1_s16(pg, dst + 64 * c + 32 + l,
                      svmul_n_s16_x(pg, svreinterpret_s16_u16(hi), (int16_t)sc[2 * c + 1]));
        }
    *d = ifk_f16(blk);
    *dmin = ifk_f16(blk + 2);
}

#endif

#ifdef KQS_BODY
/* The streaming kernel. Per VL activation rows (m0) and VL weight rows (nb), the float
 * accumulators (VL x VL, on the stack) start at 0; per 256-value block b: the activation rows
 * are widened to int16 (xw) and the weight rows expanded (ww: scale times value), both VL x
 * 256 int16 on the stack; T_ACC is zeroed; per chunk of 2*VL values the rows are loaded into
 * T_X / T_W as horizontal slices, whose vertical slice c is every row's 2 int16 at K step c,
 * the SMOPA operand layout (a transpose through ZA); 128 / VL chunks make a block (VL is a
 * power of two <= 64). Then per activation row the scalar float step over the weight lanes:
 * acc = (acc + (d * xd) * (float)sumi) [- (dmin * xd) * (float)summ], summ = sum_j m_j *
 * (xsum[2j] + xsum[2j + 1]) in int32. Tails: M and N by expanding only valid rows, SMOPA
 * predicates (other rows and columns add 0), reading out only valid rows, predicated stores;
 * no row past M-1 or n1-1 is read. */
__arm_new("za") __arm_locally_streaming static void
KQS_BODY(float *out, size_t ldo, const int8_t *xq, const float *xd, const int16_t *xsum,
         size_t M, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t vl = svcntsw(), nbk = K / 256;
    const svbool_t pw = svptrue_b32();
    if (vl > MAX_VL || vl % 4 != 0 || 128 % vl != 0) __builtin_trap(); /* impossible in SME */
    float acc[vl * vl], dv[vl], dmv[vl];
    int16_t xw[vl * 256], ww[vl * 256];
    int32_t mn[16 * vl]; /* mn[j * vl + r]: coefficient c_j of weight row nb + r */
    (void)dmv, (void)mn;

    for (size_t m0 = 0; m0 < M; m0 += vl) {
        const size_t mr = M - m0 < vl ? M - m0 : vl;
        const svbool_t pm = svwhilelt_b16_u64(0, 2 * mr);
        for (size_t nb = n0; nb < n1; nb += vl) {
            const size_t nr = n1 - nb < vl ? n1 - nb : vl;
            const svbool_t pn = svwhilelt_b16_u64(0, 2 * nr), pst = svwhilelt_b32_u64(0, nr);
            for (size_t i = 0; i < vl; i++) svst1_f32(pw, acc + i * vl, svdup_n_f32(0.0f));
            { /* lanes past n1: defined values, never stored (vector stores, not a memset call) */
                const svbool_t pz = svnot_b_z(pw, pst);
                svst1_f32(pz, dv, svdup_n_f32(0.0f));
                svst1_f32(pz, dmv, svdup_n_f32(0.0f));
                for (size_t j = 0; j < 16; j++) svst1_s32(pz, mn + j * vl, svdup_n_s32(0));
            }
            for (size_t b = 0; b < nbk; b++) {
                for (size_t i = 0; i < mr; i++) { /* widen: sign-extending byte loads */
                    const int8_t *x = xq + (m0 + i) * K + b * 256;
                    for (size_t k = 0; k < 256; k += svcnth())
                        svst1_s16(svptrue_b16(), xw + i * 256 + k,
                                  svld1sb_s16(svptrue_b16(), x + k));
                }
                for (size_t r = 0; r < nr; r++) {
                    int32_t m8[16];
                    kqs_expand(w + ((nb + r) * nbk + b) * KQS_BB, ww + r * 256, m8, dv + r,
                               dmv + r);
                    for (size_t j = 0; j < 16; j++) mn[j * vl + r] = m8[j];
                }
                svzero_mask_za(KQS_ZERO_ACC);
                for (size_t kk = 0; kk < 128; kk += vl) { /* chunk: 32-bit words kk .. kk+VL */
                    LOAD_ROWS(KQS_T_X, xw, 512, mr, kk, 128);
                    LOAD_ROWS(KQS_T_W, ww, 512, nr, kk, 128);
                    for (size_t c = 0; c < vl; c += 4) {
                        svint32x4_t a = svread_ver_za32_s32_vg4(KQS_T_X, (uint32_t)c);
                        svint32x4_t v = svread_ver_za32_s32_vg4(KQS_T_W, (uint32_t)c);
                        svmopa_za32_s16_m(KQS_T_ACC, pm, pn,
                                          svreinterpret_s16_s32(svget4_s32(a, 0)),
                                          svreinterpret_s16_s32(svget4_s32(v, 0)));
                        svmopa_za32_s16_m(KQS_T_ACC, pm, pn,
                                          svreinterpret_s16_s32(svget4_s32(a, 1)),
                                          svreinterpret_s16_s32(svget4_s32(v, 1)));
                        svmopa_za32_s16_m(KQS_T_ACC, pm, pn,
                                          svreinterpret_s16_s32(svget4_s32(a, 2)),
                                          svreinterpret_s16_s32(svget4_s32(v, 2)));
                        svmopa_za32_s16_m(KQS_T_ACC, pm, pn,
                                          svreinterpret_s16_s32(svget4_s32(a, 3)),
                                          svreinterpret_s16_s32(svget4_s32(v, 3)));
                    }
                }
                /* readout: the scalar float step per row, lanes = weight rows */
                const svfloat32_t dvv = svld1_f32(pw, dv);
                for (size_t i = 0; i < mr; i++) {
                    svint32_t sumi =
                        svread_hor_za32_s32_m(svundef_s32(), pw, KQS_T_ACC, (uint32_t)i);
                    const int16_t *bs = xsum + (m0 + i) * (K / 16) + b * 16;
#if !KQS_MIN
                    for (size_t j = 0; j < 16; j++) /* exact int32: any order */
                        sumi = svmls_n_s32_x(pw, sumi, svld1_s32(pw, mn + j * vl), bs[j]);
#endif
                    const float x = xd[(m0 + i) * nbk + b];
                    float *a = acc + i * vl;
                    svfloat32_t s = svmul_f32_x(pw, svmul_n_f32_x(pw, dvv, x),
                                                svcvt_f32_s32_x(pw, sumi));
                    s = svadd_f32_x(pw, svld1_f32(pw, a), s);
#if KQS_MIN
                    svint32_t summ = svdup_n_s32(0);
                    for (size_t j = 0; j < 8; j++)
                        summ = svmla_n_s32_x(pw, summ, svld1_s32(pw, mn + j * vl),
                                             (int32_t)bs[2 * j] + bs[2 * j + 1]);
                    const svfloat32_t t = svmul_f32_x(pw, svmul_n_f32_x(pw, svld1_f32(pw, dmv), x),
                                                      svcvt_f32_s32_x(pw, summ));
                    s = svsub_f32_x(pw, s, t);
#endif
                    svst1_f32(pw, a, s);
                }
            }
            for (size_t i = 0; i < mr; i++)
                svst1_f32(pst, out + (m0 + i) * ldo + nb, svld1_f32(pw, acc + i * vl));
        }
    }
}
#endif
