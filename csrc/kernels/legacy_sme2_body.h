/* legacy_sme2_body.h - the SME2 GEMM body shared by the legacy 32-value block types (Q4_0,
 * Q4_1, Q5_0, Q5_1). Each type's q*_gemm_vlxvl_sme2.c defines
 *   LGS_TYPE   its ifl_type (../legacy_common.h: block bytes, min, qh and qs offsets),
 *   LGS_BODY   the body's name,
 * and includes this file once. The unsigned values u (0..31) fit int8, so each block's dot
 * products are SMOPA int8 4-way outer products into a ZA int32 tile (exact integers, so each
 * element is the scalar kernel's dot), read out per block for the scalar float step (the
 * block's f16 scale d is a float, so it cannot go into the integer sums). */
#include "legacy_common.h"
#include "q8_sme2_common.h"

/* The three 32-bit ZA tiles used (compile-time tile numbers, as the ACLE requires). */
#define LGS_T_ACC 0 /* int32 dot: row i = activation row m0 + i, column j = weight row nb + j */
#define LGS_T_X 1   /* activations: row i = a block's 32 int8 of activation row m0 + i */
#define LGS_T_W 2   /* weights: row j = the block's 32 unsigned values of weight row nb + j */
#define LGS_ZERO_ACC (0x11u << LGS_T_ACC) /* ZERO mask of ZA<LGS_T_ACC>.S */

/* One block -> dst[j] = u_j (j < 32, as ifl_u reads it: nibble j % 16 of byte j % 16, low
 * for j < 16, bit j of the little-endian qh word as bit 4 for the five-bit types), in 8-bit
 * lanes (16 of them; every SVL has at least 16): AND / shift of the nibble bytes, and lane j's
 * qh bit as byte j / 8 (broadcast) shifted right by j % 8. */
static inline __attribute__((always_inline)) void
lgs_expand(const uint8_t *blk, int8_t *dst) __arm_streaming {
    const ifl_type t = LGS_TYPE;
    const svbool_t p16 = svwhilelt_b8_u64(0, 16);
    const svuint8_t q = svld1_u8(p16, blk + t.qs);
    svuint8_t lo = svand_n_u8_x(p16, q, 15), hi = svlsr_n_u8_x(p16, q, 4);
    if (t.qh) {
        const svbool_t p8 = svwhilelt_b8_u64(0, 8);
        const svuint8_t sh = svand_n_u8_x(p16, svindex_u8(0, 1), 7);
        const uint8_t *h = blk + t.qh;
        const svuint8_t bl = svsel_u8(p8, svdup_n_u8(h[0]), svdup_n_u8(h[1]));
        const svuint8_t bh = svsel_u8(p8, svdup_n_u8(h[2]), svdup_n_u8(h[3]));
        const svuint8_t b4l = svand_n_u8_x(p16, svlsr_u8_x(p16, bl, sh), 1);
        const svuint8_t b4h = svand_n_u8_x(p16, svlsr_u8_x(p16, bh, sh), 1);
        lo = svorr_u8_x(p16, lo, svlsl_n_u8_x(p16, b4l, 4));
        hi = svorr_u8_x(p16, hi, svlsl_n_u8_x(p16, b4h, 4));
    }
    svst1_s8(p16, dst, svreinterpret_s8_u8(lo));
    svst1_s8(p16, dst + 16, svreinterpret_s8_u8(hi));
}

/* The streaming kernel. Per VL activation rows (m0) and VL weight rows (nb) the float
 * accumulators (VL x VL, on the stack) start at 0; per 32-value block b: the weight rows'
 * values go to wq (VL x 32 int8 on the stack) with their d (and m); T_ACC is zeroed; the
 * activation rows' block (8 words at word 8b, straight from xq) and wq's rows are loaded into
 * T_X / T_W as horizontal slices (lanes past the block's 8 words zero), whose vertical slice c
 * is every row's 4 bytes at K step c, the SMOPA operand layout (a transpose through ZA); VL
 * columns at a time (VL = 4 at 128 bits takes two). Then per activation row the scalar float
 * step over the weight lanes: xs = xsum[2b] + xsum[2b + 1]; without a minimum acc = acc +
 * (d * xd) * (float)(dot - z xs), with one acc = (acc + (d * xd) * (float)dot) + (m * xd) *
 * (float)xs. Tails: M and N by loading only valid rows, SMOPA predicates (other rows and
 * columns add 0), reading out only valid rows, predicated stores. */
__arm_new("za") __arm_locally_streaming static void
LGS_BODY(float *out, size_t ldo, const int8_t *xq, const float *xd, const int16_t *xsum,
         size_t M, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const ifl_type t = LGS_TYPE;
    const int32_t z = t.qh ? 16 : 8;
    const size_t vl = svcntsw(), nbk = K / IF_QL, cw = vl < 8 ? vl : 8;
    const svbool_t pw = svptrue_b32();
    if (vl > MAX_VL || vl % 4 != 0) __builtin_trap(); /* architecturally impossible */
    float acc[vl * vl], dv[vl], mv[vl];
    int8_t wq[vl * IF_QL];
    (void)z, (void)mv;

    for (size_t m0 = 0; m0 < M; m0 += vl) {
        const size_t mr = M - m0 < vl ? M - m0 : vl;
        const svbool_t pm = svwhilelt_b8_u64(0, 4 * mr);
        const int8_t *xt = xq + m0 * K;
        for (size_t nb = n0; nb < n1; nb += vl) {
            const size_t nr = n1 - nb < vl ? n1 - nb : vl;
            const svbool_t pn = svwhilelt_b8_u64(0, 4 * nr), pst = svwhilelt_b32_u64(0, nr);
            const svbool_t pz = svnot_b_z(pw, pst);
            for (size_t i = 0; i < vl; i++) svst1_f32(pw, acc + i * vl, svdup_n_f32(0.0f));
            /* lanes past n1: defined values, never stored (vector stores, not a memset call) */
            svst1_f32(pz, dv, svdup_n_f32(0.0f));
            svst1_f32(pz, mv, svdup_n_f32(0.0f));
            for (size_t b = 0; b < nbk; b++) {
                for (size_t r = 0; r < nr; r++) {
                    const uint8_t *blk = w + ((nb + r) * nbk + b) * t.bb;
                    lgs_expand(blk, wq + r * IF_QL);
                    dv[r] = ifk_f16(blk);
                    if (t.min) mv[r] = ifk_f16(blk + 2);
                }
                svzero_mask_za(LGS_ZERO_ACC);
                for (size_t kk = 0; kk < 8; kk += cw) { /* words kk .. kk + cw of the block */
                    LOAD_ROWS(LGS_T_X, xt, K, mr, 8 * b + kk, 8 * b + 8);
                    LOAD_ROWS(LGS_T_W, wq, IF_QL, nr, kk, 8);
                    for (size_t c = 0; c < cw; c += 4) {
                        svint32x4_t a = svread_ver_za32_s32_vg4(LGS_T_X, (uint32_t)c);
                        svint32x4_t v = svread_ver_za32_s32_vg4(LGS_T_W, (uint32_t)c);
                        svmopa_za32_s8_m(LGS_T_ACC, pm, pn, svreinterpret_s8_s32(svget4_s32(a, 0)),
                                         svreinterpret_s8_s32(svget4_s32(v, 0)));
                        svmopa_za32_s8_m(LGS_T_ACC, pm, pn, svreinterpret_s8_s32(svget4_s32(a, 1)),
                                         svreinterpret_s8_s32(svget4_s32(v, 1)));
                        svmopa_za32_s8_m(LGS_T_ACC, pm, pn, svreinterpret_s8_s32(svget4_s32(a, 2)),
                                         svreinterpret_s8_s32(svget4_s32(v, 2)));
                        svmopa_za32_s8_m(LGS_T_ACC, pm, pn, svreinterpret_s8_s32(svget4_s32(a, 3)),
                                         svreinterpret_s8_s32(svget4_s32(v, 3)));
                    }
                }
                /* readout: the scalar float step per row, lanes = weight rows */
                const svfloat32_t dvv = svld1_f32(pw, dv);
                for (size_t i = 0; i < mr; i++) {
                    const svint32_t dot =
                        svread_hor_za32_s32_m(svundef_s32(), pw, LGS_T_ACC, (uint32_t)i);
                    const int16_t *bs = xsum + (m0 + i) * (K / 16) + 2 * b;
                    const int32_t xs = (int32_t)bs[0] + bs[1];
                    const float x = xd[(m0 + i) * nbk + b];
                    float *a = acc + i * vl;
                    const svfloat32_t dx = svmul_n_f32_x(pw, dvv, x);
                    svfloat32_t s;
                    if (t.min) {
                        s = svadd_f32_x(pw, svld1_f32(pw, a),
                                        svmul_f32_x(pw, dx, svcvt_f32_s32_x(pw, dot)));
                        const svfloat32_t mx = svmul_n_f32_x(pw, svld1_f32(pw, mv), x);
                        s = svadd_f32_x(pw, s, svmul_n_f32_x(pw, mx, (float)xs));
                    } else {
                        const svint32_t v = svsub_n_s32_x(pw, dot, z * xs);
                        s = svadd_f32_x(pw, svld1_f32(pw, a),
                                        svmul_f32_x(pw, dx, svcvt_f32_s32_x(pw, v)));
                    }
                    svst1_f32(pw, a, s);
                }
            }
            for (size_t i = 0; i < mr; i++)
                svst1_f32(pst, out + (m0 + i) * ldo + nb, svld1_f32(pw, acc + i * vl));
        }
    }
}
