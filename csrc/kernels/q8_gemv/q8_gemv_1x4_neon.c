/* Q8 GEMV, Armv8.0 Advanced SIMD (-mcpu=generic, no dotprod). Tile: 1 activation row x 4
 * weight rows (one float32x4_t accumulator, lane = output row). Per 16 bytes and weight row,
 * SMULL + SMLAL2 make 8 int16 lanes of two products each (|sum| <= 32512, no overflow) and
 * SADALP folds them into an int32x4 partial sum; an ADDP tree turns the 4 rows' partials into
 * one int32x4 of isums (lane = row). gs = 4 and 8 take several groups per load (ADDP on int16
 * pairs, SADDLP, then a 4x4 transpose). The 4 rows' scales are transposed 4 groups at a time
 * and each lane adds ((float)isum * ws) * xs in group order (FMUL, FMUL, FADD, never fused),
 * exactly as q8_gemv_1x1_scalar. gs % 4 != 0 falls back to the scalar kernel.
 * Helpers and the tile: ../q8_neon_common.h. q8_gemv_1x4_dotprod.c compiles this file again
 * with Q8_ISA = Q8_ISA_DOT. */
#include "../q8_neon_common.h"

#if !defined(Q8_ISA) /* this file as itself: the neon kernel */
#define Q8_ISA Q8_ISA_NEON
#define Q8_GEMV_FN if_q8_gemv_1x4_neon
#define Q8_GEMV_DESC if_k_q8_gemv_1x4_neon
#define Q8_GEMV_NAME "q8_gemv_1x4_neon"
#define Q8_GEMV_REQUIRES IF_FEAT_ASIMD
#endif

/* one 4-row weight quad after another, the activation row shared */
Q8_INLINE void q8_gemv_impl(const int isa, const int kind, float *out, const int8_t *xq,
                            const float *xs, const int8_t *w, const float *ws, size_t n0,
                            size_t n1, size_t K, size_t gs) {
    const size_t ng = K / gs;
    q8_ptrs p;
    for (int m = 0; m < 4; m++) {
        p.x[m] = xq;
        p.xs[m] = xs;
    }
    for (size_t n = n0; n < n1; n += 4) {
        q8_set_wrows(&p, w, ws, n, n1, K, ng);
        float32x4_t acc[4];
        q8_tile(isa, kind, 1, acc, &p, ng, gs);
        q8_store(out + n, acc[0], n1 - n);
    }
}

void Q8_GEMV_FN(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    if (gs == 0 || gs % 4 != 0) {
        if_q8_gemv_1x1_scalar(out, xq, xs, w, ws, n0, n1, K, gs);
        return;
    }
    Q8_DISPATCH(q8_gemv_impl, Q8_ISA, gs, out, xq, xs, w, ws, n0, n1, K);
}

const if_q8_gemv_kernel Q8_GEMV_DESC = {.name = Q8_GEMV_NAME, .requires = Q8_GEMV_REQUIRES,
                                        .mr = 1, .nr = 4, .run = Q8_GEMV_FN};
