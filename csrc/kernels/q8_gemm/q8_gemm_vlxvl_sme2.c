/* Q8 GEMM, SME2 (-mcpu=generic+sme2): SMOPA int8 outer products into a ZA tile, written for
 * any streaming vector length (128 .. 2048 bits); VL = svcntsw() 32-bit lanes per vector. */
#include <arm_sme.h>

#include "../kernels.h"
#include "../q8_sme2_common.h"

/* The four 32-bit ZA tiles (compile-time tile numbers, as the ACLE requires). */
#define T_ACC 0 /* int32 accumulator: row i = activation row m0 + i, column j = weight row nb + j */
#define T_X 1   /* activations: row i = 4*VL bytes of activation row m0 + i (one K chunk) */
#define T_W 2   /* weights: row j = 4*VL bytes of weight row nb + j (the same K chunk) */
#define T_S 3   /* weight scales: row j = ws[nb + j][g0 .. g0 + VL) (one window of groups) */
#define ZERO_ACC (0x11u << T_ACC) /* ZERO mask of ZA<T_ACC>.S (= ZA<T_ACC>.D and ZA<T_ACC+4>.D) */

/* The streaming kernel. Per (VL activation rows) x (VL weight rows) block and per K chunk of 4*VL
 * bytes, the activation and weight rows are loaded into tiles T_X / T_W as horizontal slices
 * (plain contiguous loads, tails predicated); vertical slice c of those tiles is then, for every
 * row, the 4 bytes at k = 4 * (chunk + c): exactly the SMOPA operand layout (VL rows x 4
 * consecutive K bytes). So the re-layout is a transpose through ZA, no scratch and no gathers
 * (which streaming mode lacks). Per group: zero T_ACC, gs/4 SMOPAs, then read the int32 tile
 * out row by row (four rows per SME2 MOVA) for the float readout, with ws[n][g] over the lanes
 * taken as a vertical slice of T_S. The float accumulators (VL x VL) live in a stack buffer.
 * Tails: K by the load predicates; M and N by loading only the valid rows, SMOPA byte
 * predicates (the rest of the tile stays 0), reading out only valid rows and predicated
 * stores; no row past M-1 or n1-1 is ever touched. */
__arm_new("za") __arm_locally_streaming static void
gemm_sme2(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M, const int8_t *w,
          const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    const size_t vl = svcntsw(); /* rows/columns of a 32-bit tile */
    const size_t K4 = K / 4, gs4 = gs / 4, ng = K / gs;
    const svbool_t pw = svptrue_b32();
    float acc[MAX_VL * MAX_VL] __attribute__((aligned(64)));
    if (vl > MAX_VL || vl % 4 != 0) __builtin_trap(); /* architecturally impossible */

    for (size_t m0 = 0; m0 < M; m0 += vl) {
        const size_t mr = M - m0 < vl ? M - m0 : vl;
        const int8_t *xt = xq + m0 * K;
        const float *xst = xs + m0 * ng;
        for (size_t nb = n0; nb < n1; nb += vl) {
            const size_t nr = n1 - nb < vl ? n1 - nb : vl;
            const int8_t *wt = w + nb * K;
            const float *wst = ws + nb * ng;
            /* SMOPA byte predicates: rows >= mr and columns >= nr (stale tile rows) add 0 */
            const svbool_t pm = svwhilelt_b8_u64(0, 4 * mr), pn = svwhilelt_b8_u64(0, 4 * nr);
            for (size_t i = 0; i < vl; i++) svst1_f32(pw, acc + i * vl, svdup_n_f32(0.0f));

            size_t kk = 0, c = 0; /* k4 index (4-byte K step) and its column in T_X / T_W */
            size_t gc = 0;        /* group g's column in T_S */
            for (size_t g = 0; g < ng; g++) {
                if (gc == 0) LOAD_ROWS(T_S, wst, ng * sizeof(float), nr, g, ng);
                svzero_mask_za(ZERO_ACC);
                if (gs4 % 4 == 0) {
                    /* four K steps at a time: c and kk stay multiples of 4 */
                    for (size_t s = 0; s < gs4; s += 4, kk += 4, c += 4) {
                        if (c == vl) c = 0;
                        if (c == 0) {
                            LOAD_ROWS(T_X, xt, K, mr, kk, K4);
                            LOAD_ROWS(T_W, wt, K, nr, kk, K4);
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
                } else {
                    for (size_t s = 0; s < gs4; s++, kk++, c++) {
                        if (c == vl) c = 0;
                        if (c == 0) {
                            LOAD_ROWS(T_X, xt, K, mr, kk, K4);
                            LOAD_ROWS(T_W, wt, K, nr, kk, K4);
                        }
                        svint32_t a = svread_ver_za32_s32_m(svundef_s32(), pw, T_X, (uint32_t)c);
                        svint32_t b = svread_ver_za32_s32_m(svundef_s32(), pw, T_W, (uint32_t)c);
                        svmopa_za32_s8_m(T_ACC, pm, pn, svreinterpret_s8_s32(a),
                                         svreinterpret_s8_s32(b));
                    }
                }
                /* readout: ws[nb + j][g] over lanes j, xs[m0 + i][g] per row */
                const svfloat32_t wsv = svread_ver_za32_f32_m(svundef_f32(), pw, T_S,
                                                              (uint32_t)gc);
                for (size_t i = 0; i < mr; i += 4) {
                    svint32x4_t r = svread_hor_za32_s32_vg4(T_ACC, (uint32_t)i);
                    READOUT_ROW(svget4_s32(r, 0), i, xst[i * ng + g]);
                    if (i + 1 < mr) READOUT_ROW(svget4_s32(r, 1), i + 1, xst[(i + 1) * ng + g]);
                    if (i + 2 < mr) READOUT_ROW(svget4_s32(r, 2), i + 2, xst[(i + 2) * ng + g]);
                    if (i + 3 < mr) READOUT_ROW(svget4_s32(r, 3), i + 3, xst[(i + 3) * ng + g]);
                }
                if (++gc == vl) gc = 0;
            }
            const svbool_t pst = svwhilelt_b32_u64(0, nr);
            for (size_t i = 0; i < mr; i++)
                svst1_f32(pst, out + (m0 + i) * ldo + nb, svld1_f32(pw, acc + i * vl));
        }
    }
}

/* Q8 GEMM, SME2, tile VL x VL (VL = SVL/32: 4 at 128-bit, 16 at 512-bit, 64 at 2048-bit):
 * out[m][n] for m < M, n in [n0, n1) with SMOPA int8 4-way outer products into a ZA tile per
 * group (the re-layout to 4 consecutive K bytes per row is a transpose through ZA tiles), then
 * the float readout acc += ((float)isum * ws) * xs in group order, bit-equal to the scalar
 * kernel. This exported entry is an ordinary (non-streaming) function: it sends group sizes
 * that are not a multiple of 4 to the scalar kernel and everything else to the
 * __arm_locally_streaming __arm_new("za") kernel above, so that kernel makes no calls (a call
 * from a ZA function would need a lazy-save buffer of SVL*SVL bytes on the stack). */
void if_q8_gemm_vlxvl_sme2(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                           const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                           size_t gs) {
    if (M == 0 || n0 >= n1) return;
    if (gs == 0 || gs % 4 != 0 || K % gs != 0) {
        if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
        return;
    }
    gemm_sme2(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
}

/* "vl": the step is the streaming vector length in 32-bit lanes (VL, known at run time);
 * mr and nr give its least value, VL = 4 at 128 bits */
const if_q8_gemm_kernel if_k_q8_gemm_vlxvl_sme2 = {.name = "q8_gemm_vlxvl_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = 4, .nr = 4,
    .run = if_q8_gemm_vlxvl_sme2};
