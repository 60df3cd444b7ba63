/* q4_sme2_common.h - the SME2 4-bit codebook matmul (static only; included by the q4 sme2
 * kernel files, compiled with the sme2 tier flags), written for any streaming vector length
 * (128 .. 2048 bits; VLB = svcntb() bytes).
 *
 * The codebook (16 int8 entries, repeated over ZT0's 64 bytes) is loaded into ZT0 once per
 * call (LDR ZT0). LUTI4 Zd.B, ZT0, Zn[i] expands the 4-bit indices of half i of Zn (byte b:
 * its low nibble to element 2b, its high one to 2b + 1) into VLB int8 weights, so one load of
 * VLB nibble bytes gives 2 VLB weights in the order of the bytes' nibbles. In if_q4_gemv_fn's
 * layout byte j of a 32-value block holds values j and j + 16, so the LUTI4 order of a block
 * is (v0, v16, v1, v17, .., v15, v31). The activation row is permuted to that order once per
 * K block of Q4S_KC values (xp[32b + 2j] = x[32b + j], xp[32b + 2j + 1] = x[32b + j + 16]);
 * the products summed are the same, and int32 sums are exact in any order, so the group sums
 * equal the scalar kernel's. Per weight row and group: SDOT (svdot_s32) of the LUTI4 output
 * with the permuted activations into an int32 vector (loads predicated to the group: lanes
 * past it read activation 0), an ADDV to the group's isum, then in group order
 *     acc = acc + (((float)isum * ws[n][g]) * xs[m][g])   (scalar FMUL, FMUL, FADD)
 * from acc = 0.0f, bit for bit q4_gemv_1x1_scalar; between K blocks acc lives in `out` (a
 * float store/load is exact). The streaming function makes no calls (it owns ZT0). */
#ifndef IF_Q4_SME2_COMMON_H
#define IF_Q4_SME2_COMMON_H

#include <arm_sme.h>

#include "kernels.h"

#define Q4S_KC 4096 /* activation values permuted per K block (whole groups: gs <= Q4S_KC) */

__arm_new("zt0") __arm_locally_streaming static void
q4s_rows(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M, const uint8_t *w,
         const float *ws, const int8_t *cb, size_t n0, size_t n1, size_t K, size_t gs) {
    /* ZT0 = 16 entries of 32 bits; an 8-bit lookup takes the low byte of entry idx */
    uint32_t tab[16] __attribute__((aligned(16)));
    for (int i = 0; i < 16; i++) tab[i] = (uint8_t)cb[i];
    svldr_zt(0, tab);
    int8_t xp[Q4S_KC] __attribute__((aligned(16)));
    const size_t vlb = svcntb(), ng = K / gs, gb = gs / 2, kc = Q4S_KC / gs * gs;
    const svbool_t pw = svptrue_b32();
    for (size_t m = 0; m < M; m++) {
        const int8_t *x = xq + m * K;
        const float *xsm = xs + m * ng;
        float *o = out + m * ldo;
        for (size_t k0 = 0; k0 < K; k0 += kc) {
            const size_t kn = K - k0 < kc ? K - k0 : kc, g0 = k0 / gs;
            for (size_t b = 0; b < kn; b += 32)
                for (size_t j = 0; j < 16; j++) {
                    xp[b + 2 * j] = x[k0 + b + j];
                    xp[b + 2 * j + 1] = x[k0 + b + j + 16];
                }
            for (size_t n = n0; n < n1; n++) {
                const uint8_t *wr = w + n * (K / 2) + k0 / 2;
                const float *sr = ws + n * ng;
                float acc = k0 ? o[n] : 0.0f;
                for (size_t g = 0; g < kn / gs; g++) {
                    svint32_t v = svdup_n_s32(0);
                    for (size_t off = 0; off < gb; off += vlb) {
                        const svuint8_t nib = svld1_u8(svwhilelt_b8_u64(off, gb), wr + g * gb + off);
                        const int8_t *xg = xp + g * gs + 2 * off;
                        const svint8_t x0 = svld1_s8(svwhilelt_b8_u64(2 * off, gs), xg);
                        const svint8_t x1 = svld1_s8(svwhilelt_b8_u64(2 * off + vlb, gs), xg + vlb);
                        v = svdot_s32(v, svluti4_lane_zt_s8(0, nib, 0), x0);
                        v = svdot_s32(v, svluti4_lane_zt_s8(0, nib, 1), x1);
                    }
                    const int32_t isum = (int32_t)svaddv_s32(pw, v);
                    acc += ((float)isum * sr[g0 + g]) * xsm[g0 + g];
                }
                o[n] = acc;
            }
        }
    }
}

#endif
