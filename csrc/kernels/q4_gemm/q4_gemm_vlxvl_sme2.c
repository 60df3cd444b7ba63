/* 4-bit codebook GEMM, SME2 (-mcpu=generic+sme2): LUTI4 from ZT0 expands the nibbles to int8
 * and SMOPA int8 outer products accumulate each group into a ZA int32 tile, written for any
 * streaming vector length (128 .. 2048 bits; VL = svcntsw() 32-bit lanes). It reads the
 * row-major nibbles the SME2 GEMV reads (one resident copy, nothing packed).
 *
 * Order of K. LUTI4 of the nibble bytes gives a 32-value block's weights in the order
 * (v0, v16, v1, v17, .., v15, v31) (../q4_sme2_common.h). The activation rows are permuted to
 * the same order (xp[32b + 2j] = x[32b + j], xp[32b + 2j + 1] = x[32b + j + 16]) into a stack
 * block of XP_BYTES per (VL activation rows, K block); every weight meets its own activation,
 * and int32 sums are exact in any order, so each group's isum is the scalar kernel's. */
#include "../q4_sme2_common.h"
#include "../q8_sme2_common.h"

#define XP_BYTES 16384 /* permuted activations: VL rows x kc values (kc a multiple of gs) */

/* The four 32-bit ZA tiles (compile-time tile numbers, as the ACLE requires). */
#define T_ACC 0 /* int32 accumulator: row i = activation row m0 + i, column j = weight row nb + j */
#define T_X 1   /* activations: row i = 4*VL permuted bytes of activation row m0 + i */
#define T_W 2   /* weights: row j = LUTI4 of 2*VL nibble bytes of row nb + j (4*VL int8) */
#define T_S 3   /* weight scales: row j = ws[nb + j][g .. g + VL) (one window of groups) */
#define ZERO_ACC (0x11u << T_ACC) /* ZERO mask of ZA<T_ACC>.S (= ZA<T_ACC>.D and ZA<T_ACC+4>.D) */

/* The streaming kernel. Per VL activation rows (m0) and K block of kc values: the rows are
 * permuted into xp; then per VL weight rows (nb): the float accumulators (VL x VL, on the
 * stack) start at 0 in the first K block and from `out` in the others (a float store and load
 * are exact, so each output still sums its groups in order from 0.0f). Per chunk of 4*VL K
 * values: T_X <- the permuted activation rows (horizontal loads), T_W <- per weight row LUTI4
 * of its 2*VL nibble bytes written as a horizontal slice (MOVA); vertical slice c of T_X / T_W
 * is then every row's 4 bytes at K step c, the SMOPA operand layout. Per group: zero T_ACC,
 * gs/4 SMOPAs, read the int32 tile out four rows per MOVA, ws[n][g] over the lanes as a
 * vertical slice of T_S, xs[m][g] per row. Tails: K by the load predicates (chunks never pass
 * a group that is not in K), M and N by loading only valid rows and SMOPA byte predicates (the
 * other tile rows and columns add 0), reading out only valid rows, predicated stores. The
 * function makes no calls (it owns ZA and ZT0). */
__arm_new("za", "zt0") __arm_locally_streaming static void
q4_gemm_sme2_body(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                  const uint8_t *w, const float *ws, const int8_t *cb, size_t n0, size_t n1,
                  size_t K, size_t gs, size_t kc) {
    uint32_t tab[16] __attribute__((aligned(16))); /* ZT0: 16 entries, LUTI4 .B takes byte 0 */
    for (int i = 0; i < 16; i++) tab[i] = (uint8_t)cb[i];
    svldr_zt(0, tab);
    const size_t vl = svcntsw(), ng = K / gs, gs4 = gs / 4, kb = K / 2;
    const svbool_t pw = svptrue_b32();
    float acc[MAX_VL * MAX_VL] __attribute__((aligned(64)));
    int8_t xp[XP_BYTES] __attribute__((aligned(64)));
    if (vl > MAX_VL || vl % 4 != 0) __builtin_trap(); /* architecturally impossible */

    for (size_t m0 = 0; m0 < M; m0 += vl) {
        const size_t mr = M - m0 < vl ? M - m0 : vl;
        const float *xst = xs + m0 * ng;
        /* SMOPA byte predicate over the activation rows (rows >= mr add 0) */
        const svbool_t pm = svwhilelt_b8_u64(0, 4 * mr);
        for (size_t k0 = 0; k0 < K; k0 += kc) {
            const size_t kn = K - k0 < kc ? K - k0 : kc, kn4 = kn / 4, g0 = k0 / gs;
            for (size_t i = 0; i < mr; i++) {
                const int8_t *x = xq + (m0 + i) * K + k0;
                int8_t *p = xp + i * kn;
                for (size_t b = 0; b < kn; b += 32)
                    for (size_t j = 0; j < 16; j++) {
                        p[b + 2 * j] = x[b + j];
                        p[b + 2 * j + 1] = x[b + j + 16];
                    }
            }
            for (size_t nb = n0; nb < n1; nb += vl) {
                const size_t nr = n1 - nb < vl ? n1 - nb : vl;
                const uint8_t *wt = w + nb * kb + k0 / 2;
                const float *wst = ws + nb * ng;
                const svbool_t pn = svwhilelt_b8_u64(0, 4 * nr), pst = svwhilelt_b32_u64(0, nr);
                for (size_t i = 0; i < vl; i++)
                    svst1_f32(pw, acc + i * vl,
                              k0 && i < mr ? svld1_f32(pst, out + (m0 + i) * ldo + nb)
                                           : svdup_n_f32(0.0f));
                size_t kk = 0, c = 0; /* K step (4 values) in the block and its tile column */
                size_t gc = 0;        /* group's column in T_S */
                for (size_t g = 0; g < kn / gs; g++) {
                    if (gc == 0) LOAD_ROWS(T_S, wst, ng * sizeof(float), nr, g0 + g, ng);
                    svzero_mask_za(ZERO_ACC);
                    /* gs is a multiple of 32: four K steps at a time, c and kk multiples of 4 */
                    for (size_t s = 0; s < gs4; s += 4, kk += 4, c += 4) {
                        if (c == vl) c = 0;
                        if (c == 0) {
                            LOAD_ROWS(T_X, xp, kn, mr, kk, kn4);
                            /* the chunk's 2*VL nibble bytes of each row (fewer at K's end) */
                            const size_t be = 2 * (kk + vl) < kn / 2 ? 2 * (kk + vl) : kn / 2;
                            const svbool_t pb = svwhilelt_b8_u64(2 * kk, be);
                            for (size_t r = 0; r < nr; r++) {
                                const svuint8_t nib = svld1_u8(pb, wt + r * kb + 2 * kk);
                                svwrite_hor_za32_s32_m(
                                    T_W, (uint32_t)r, pw,
                                    svreinterpret_s32_s8(svluti4_lane_zt_s8(0, nib, 0)));
                            }
                        }
                        svint32x4_t a = svread_ver_za32_s32_vg4(T_X, (uint32_t)c);
                        svint32x4_t b = svread_ver_za32_s32_vg4(T_W, (uint32_t)c);
                        svmopa_za32_s8_m(T_ACC, pm, pn, svreinterpret_s8_s32(svget4_s32(a, 0)),
                                         svreinterpret_s8_s32(svget4_s32(b, 0)));
                        svmopa_za32_s8_m(T_ACC, pm, pn, svreinterpret_s8_s32(svget4_s32(a, 1)),
                                         svreinterpret_s8_s32(svget4_s32(b, 1)));
                        svmopa_za32_s8_m(T_ACC, pm, pn, svreinterpret_s8_s32(svget4_s32(a, 2)),
                                         svreinterpret_s8_s32(svget4_s32(b, 2)));
                        svmopa_za32_s8_m(T_ACC, pm, pn, svreinterpret_s8_s32(svget4_s32(a, 3)),
                                         svreinterpret_s8_s32(svget4_s32(b, 3)));
                    }
                    /* readout: ws[nb + j][g] over lanes j, xs[m0 + i][g] per row */
                    const svfloat32_t wsv = svread_ver_za32_f32_m(svundef_f32(), pw, T_S,
                                                                  (uint32_t)gc);
                    const size_t gg = g0 + g;
                    for (size_t i = 0; i < mr; i += 4) {
                        svint32x4_t r = svread_hor_za32_s32_vg4(T_ACC, (uint32_t)i);
                        const float *xsi = xst + i * ng + gg;
                        READOUT_ROW(svget4_s32(r, 0), i, xsi[0]);
                        if (i + 1 < mr) READOUT_ROW(svget4_s32(r, 1), i + 1, xsi[ng]);
                        if (i + 2 < mr) READOUT_ROW(svget4_s32(r, 2), i + 2, xsi[2 * ng]);
                        if (i + 3 < mr) READOUT_ROW(svget4_s32(r, 3), i + 3, xsi[3 * ng]);
                    }
                    if (++gc == vl) gc = 0;
                }
                for (size_t i = 0; i < mr; i++)
                    svst1_f32(pst, out + (m0 + i) * ldo + nb, svld1_f32(pw, acc + i * vl));
            }
        }
    }
}

/* 4-bit codebook GEMM, SME2, tile VL x VL (VL = SVL/32: 4 at 128-bit, 16 at 512-bit):
 * out[m][n] for m < M, n in [n0, n1), LUTI4 + SMOPA per group, then the float readout
 * acc += ((float)isum * ws) * xs in group order, bit-equal to q4_gemm_1x1_scalar. An ordinary
 * (non-streaming) entry: group sizes that are not a multiple of 32 go to the scalar kernel;
 * a group larger than the permuted block (gs > XP_BYTES / VL: only past 512-bit SVL) to the
 * SME2 GEMV body, row by row (same bits); the rest to the streaming kernel above. */
void if_q4_gemm_vlxvl_sme2(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                           const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                           size_t n1, size_t K, size_t gs) {
    if (M == 0 || n0 >= n1) return;
    if (gs == 0 || gs % 32 || K % gs) {
        if_q4_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
        return;
    }
    const size_t kc = XP_BYTES / svcntsw() / gs * gs;
    if (kc == 0) {
        if (gs <= Q4S_KC)
            q4s_rows(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
        else
            if_q4_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
        return;
    }
    q4_gemm_sme2_body(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs, kc);
}

/* "vl": the step is the streaming vector length in 32-bit lanes (VL, known at run time);
 * mr and nr give its least value, VL = 4 at 128 bits */
const if_q4_gemm_kernel if_k_q4_gemm_vlxvl_sme2 = {.name = "q4_gemm_vlxvl_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = 4, .nr = 4,
    .run = if_q4_gemm_vlxvl_sme2};
