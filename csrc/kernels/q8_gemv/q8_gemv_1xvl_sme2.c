/* Q8 GEMV, SME2 (-mcpu=generic+sme2): streaming-SVE SDOT on weights transposed through ZA,
 * written for any streaming vector length (128 .. 2048 bits); VL = svcntsw() 32-bit lanes. */
#include <arm_sme.h>
#include <string.h>

#include "../kernels.h"
#include "../q8_sme2_common.h"

/* The four 32-bit ZA tiles: weights and weight scales of two blocks of VL output rows. */
#define T_WA 0 /* row j = 4*VL bytes of weight row nb + j (one K chunk) */
#define T_WB 1 /* row j = the same for weight row nb + VL + j */
#define T_SA 2 /* row j = ws[nb + j][g0 .. g0 + VL) (one window of groups) */
#define T_SB 3 /* row j = ws[nb + VL + j][g0 .. g0 + VL) */

/* The streaming kernel. Weight rows are loaded into a tile as horizontal slices (contiguous
 * loads of one K chunk of 4*VL bytes); vertical slice c is then the 4 bytes at k = 4 * (chunk +
 * c) of every row, so SDOT against the matching 4 activation bytes (broadcast to every lane, or
 * one 32-bit element of a replicated quadword with the indexed SDOT) adds that K step to each
 * output row's own int32 lane: a vector of per-row group sums, no horizontal reductions. Per
 * group, the float readout runs in lanes: acc += (cvt(isum) * ws_vec) * xs[g], ws[n][g] over
 * lanes being a vertical slice of the scale tile. Two blocks of VL rows share the activation
 * loads (tiles A and B); a missing B block computes on stale data and is not stored. */
__arm_new("za") __arm_locally_streaming static void
gemv_sme2(float *out, const int8_t *xq, const float *xs, const int8_t *w, const float *ws,
          size_t n0, size_t n1, size_t K, size_t gs) {
    const size_t vl = svcntsw();
    const size_t K4 = K / 4, gs4 = gs / 4, ng = K / gs;
    const svbool_t pw = svptrue_b32(), pb = svptrue_b8();
    const svint32_t zero = svdup_n_s32(0);
    if (vl > MAX_VL || vl % 4 != 0) __builtin_trap(); /* architecturally impossible */

    for (size_t nb = n0; nb < n1; nb += 2 * vl) {
        const size_t left = n1 - nb;
        const size_t na = left < vl ? left : vl;
        const size_t nbr = left <= vl ? 0 : left - vl < vl ? left - vl : vl;
        const int8_t *wa = w + nb * K, *wb = nbr ? wa + vl * K : wa;
        const float *sa = ws + nb * ng, *sb = nbr ? sa + vl * ng : sa;
        svfloat32_t acca = svdup_n_f32(0.0f), accb = svdup_n_f32(0.0f);

        size_t kk = 0, c = 0, gc = 0; /* K step (4 bytes), its tile column, group column */
        for (size_t g = 0; g < ng; g++) {
            if (gc == 0) {
                LOAD_ROWS(T_SA, sa, ng * sizeof(float), na, g, ng);
                LOAD_ROWS(T_SB, sb, ng * sizeof(float), nbr, g, ng);
            }
            svint32_t ia0 = zero, ia1 = zero, ib0 = zero, ib1 = zero;
            if (gs4 % 4 == 0) {
                /* four K steps at a time (c, kk multiples of 4): one 16-byte activation load
                 * replicated per quadword, four indexed SDOTs per block */
                for (size_t s = 0; s < gs4; s += 4, kk += 4, c += 4) {
                    if (c == vl) c = 0;
                    if (c == 0) {
                        LOAD_ROWS(T_WA, wa, K, na, kk, K4);
                        LOAD_ROWS(T_WB, wb, K, nbr, kk, K4);
                    }
                    const svint8_t xv = svld1rq_s8(pb, xq + 4 * kk);
                    svint32x4_t a = svread_ver_za32_s32_vg4(T_WA, (uint32_t)c);
                    svint32x4_t b = svread_ver_za32_s32_vg4(T_WB, (uint32_t)c);
                    ia0 = svdot_lane_s32(ia0, svreinterpret_s8_s32(svget4_s32(a, 0)), xv, 0);
                    ib0 = svdot_lane_s32(ib0, svreinterpret_s8_s32(svget4_s32(b, 0)), xv, 0);
                    ia1 = svdot_lane_s32(ia1, svreinterpret_s8_s32(svget4_s32(a, 1)), xv, 1);
                    ib1 = svdot_lane_s32(ib1, svreinterpret_s8_s32(svget4_s32(b, 1)), xv, 1);
                    ia0 = svdot_lane_s32(ia0, svreinterpret_s8_s32(svget4_s32(a, 2)), xv, 2);
                    ib0 = svdot_lane_s32(ib0, svreinterpret_s8_s32(svget4_s32(b, 2)), xv, 2);
                    ia1 = svdot_lane_s32(ia1, svreinterpret_s8_s32(svget4_s32(a, 3)), xv, 3);
                    ib1 = svdot_lane_s32(ib1, svreinterpret_s8_s32(svget4_s32(b, 3)), xv, 3);
                }
            } else {
                for (size_t s = 0; s < gs4; s++, kk++, c++) {
                    if (c == vl) c = 0;
                    if (c == 0) {
                        LOAD_ROWS(T_WA, wa, K, na, kk, K4);
                        LOAD_ROWS(T_WB, wb, K, nbr, kk, K4);
                    }
                    int32_t x4;
                    memcpy(&x4, xq + 4 * kk, 4);
                    const svint8_t xv = svreinterpret_s8_s32(svdup_n_s32(x4));
                    svint32_t a = svread_ver_za32_s32_m(zero, pw, T_WA, (uint32_t)c);
                    svint32_t b = svread_ver_za32_s32_m(zero, pw, T_WB, (uint32_t)c);
                    ia0 = svdot_s32(ia0, svreinterpret_s8_s32(a), xv);
                    ib0 = svdot_s32(ib0, svreinterpret_s8_s32(b), xv);
                }
            }
            const svfloat32_t wsa = svread_ver_za32_f32_m(svundef_f32(), pw, T_SA, (uint32_t)gc);
            const svfloat32_t wsb = svread_ver_za32_f32_m(svundef_f32(), pw, T_SB, (uint32_t)gc);
            const float x = xs[g];
            svfloat32_t pa = svmul_f32_x(pw, svcvt_f32_s32_x(pw, svadd_s32_x(pw, ia0, ia1)), wsa);
            svfloat32_t pbv = svmul_f32_x(pw, svcvt_f32_s32_x(pw, svadd_s32_x(pw, ib0, ib1)), wsb);
            acca = svadd_f32_x(pw, acca, svmul_n_f32_x(pw, pa, x));
            accb = svadd_f32_x(pw, accb, svmul_n_f32_x(pw, pbv, x));
            if (++gc == vl) gc = 0;
        }
        svst1_f32(svwhilelt_b32_u64(0, na), out + nb, acca);
        if (nbr) svst1_f32(svwhilelt_b32_u64(0, nbr), out + nb + vl, accb);
    }
}

/* Q8 GEMV, SME2, 1 x VL output rows per SDOT lane set (two VL blocks per pass; VL = SVL/32):
 * out[n] for n in [n0, n1), weights transposed through ZA so each SDOT lane holds one output
 * row's group sum, then acc += ((float)isum * ws) * xs in group order, bit-equal to the scalar
 * kernel. This exported entry is an ordinary (non-streaming) function: group sizes that are not
 * a multiple of 4 go to the scalar kernel, everything else to the __arm_locally_streaming
 * __arm_new("za") kernel above, which makes no calls (a call from a ZA function would need a
 * lazy-save buffer of SVL*SVL bytes on the stack). */
void if_q8_gemv_1xvl_sme2(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                          const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    if (n0 >= n1) return;
    if (gs == 0 || gs % 4 != 0 || K % gs != 0) {
        if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs);
        return;
    }
    gemv_sme2(out, xq, xs, w, ws, n0, n1, K, gs);
}

/* "vl": the step is the streaming vector length in 32-bit lanes (VL, known at run time);
 * mr and nr give its least value, VL = 4 at 128 bits */
const if_q8_gemv_kernel if_k_q8_gemv_1xvl_sme2 = {.name = "q8_gemv_1xvl_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = 1, .nr = 4,
    .run = if_q8_gemv_1xvl_sme2};
