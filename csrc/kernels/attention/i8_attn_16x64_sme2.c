/* i8_attn_16x64_sme2.c - int8 matrix-engine attention on SME2 (-mcpu=generic+sme2, any streaming
 * vector length): the body and contract of attn_i8_matrix_body.h with its integer products
 * done by SMOPA (int8 q planes x int8 keys) and USMOPA (u8 probability planes x int8 values)
 * 4-way outer products into ZA tile 0. The operands are the body's packed AMX layouts: a key
 * or value chunk is already "4 consecutive K bytes per column" (one SMOPA operand per K step);
 * the 16-row A side (q planes, u8 P' planes) is repacked the same way before the streaming
 * call. Integer sums are exact, so the output equals the AMX (emulated) kernel bit for bit. */
#include <arm_sme.h>

#define ATTN_ENGINE_CUSTOM 1

/* C (16 x N int32, row stride 16) = A x B with A packed (K4, 16 rows, 4 bytes) and B packed
 * (K4, 16 columns, 4 bytes) with a 64-byte row stride; N <= 16. a_unsigned: A is u8 (USMOPA),
 * else int8 (SMOPA). Tiles of VL x VL (VL = SVL/32), predicated for 16 % VL and N. */
__arm_new("za") __arm_locally_streaming static void
sme_mm(int32_t *C, const int8_t *Ap, const int8_t *Bp, size_t K4, size_t N, int a_unsigned) {
    const size_t vl = svcntsw();
    const svbool_t pw = svptrue_b32();
    for (size_t i0 = 0; i0 < 16; i0 += vl) {
        const size_t mr = 16 - i0 < vl ? 16 - i0 : vl;
        for (size_t j0 = 0; j0 < N; j0 += vl) {
            const size_t nr = N - j0 < vl ? N - j0 : vl;
            const svbool_t pm = svwhilelt_b8_u64(0, 4 * mr), pn = svwhilelt_b8_u64(0, 4 * nr);
            svzero_mask_za(0x11); /* ZA0.S */
            for (size_t k4 = 0; k4 < K4; k4++) {
                svint8_t a = svld1_s8(pm, Ap + (k4 * 16 + i0) * 4);
                svint8_t b = svld1_s8(pn, Bp + k4 * 64 + j0 * 4);
                if (a_unsigned)
                    svusmopa_za32_u8_m(0, pm, pn, svreinterpret_u8_s8(a), b);
                else
                    svmopa_za32_s8_m(0, pm, pn, a, b);
            }
            const svbool_t ps = svwhilelt_b32_u64(0, nr);
            for (size_t i = 0; i < mr; i++)
                svst1_s32(ps, C + (i0 + i) * 16 + j0,
                          svread_hor_za32_s32_m(svundef_s32(), pw, 0, (uint32_t)i));
        }
    }
}

/* (16 rows x K bytes, row stride lda) -> (K/4, 16, 4) */
static void pack_a(int8_t *dst, const void *A, size_t lda, size_t K) {
    const int8_t *a = A;
    for (size_t k4 = 0; k4 < K / 4; k4++)
        for (size_t r = 0; r < 16; r++)
            for (size_t j = 0; j < 4; j++) dst[(k4 * 16 + r) * 4 + j] = a[r * lda + 4 * k4 + j];
}

#define ENGINE_BEGIN(Gp, nd) int8_t apack_[16 * IF_ATTN_KEY_BLOCK] __attribute__((aligned(64)))
#define ENGINE_END() ((void)0)
#define ENGINE_QK(C, C2, qhi, qlo, lda, kpc, Gp)                                           \
    do {                                                                                   \
        pack_a(apack_, (qhi), (lda), (Gp));                                                \
        sme_mm((C), apack_, (kpc), (Gp) / 4, 16, 0);                                       \
        pack_a(apack_, (qlo), (lda), (Gp));                                                \
        sme_mm((C2), apack_, (kpc), (Gp) / 4, 16, 0);                                      \
    } while (0)
#define ENGINE_PV(C, C2, uhi, ulo, vpc, nd)                                                \
    do {                                                                                   \
        pack_a(apack_, (uhi), IF_ATTN_KEY_BLOCK, IF_ATTN_KEY_BLOCK);                       \
        sme_mm((C), apack_, (vpc), IF_ATTN_KEY_BLOCK / 4, (nd), 1);                        \
        pack_a(apack_, (ulo), IF_ATTN_KEY_BLOCK, IF_ATTN_KEY_BLOCK);                       \
        sme_mm((C2), apack_, (vpc), IF_ATTN_KEY_BLOCK / 4, (nd), 1);                       \
    } while (0)
#define ATTN_AMX_FN if_i8_attn_16x64_sme2
#include "attn_i8_matrix_body.h"

const if_attn_kernel if_k_i8_attn_16x64_sme2 = {.name = "i8_attn_16x64_sme2",
    .requires = IF_FEAT_ASIMD | IF_FEAT_SME | IF_FEAT_SME2, .mr = IF_ATTN_Q_TILE,
    .nr = IF_ATTN_KEY_BLOCK, .run = if_i8_attn_16x64_sme2};
