/* Q8 GEMM, Armv8.0 Advanced SIMD (-mcpu=generic, no dotprod). Tile: 4 activation rows x 4
 * weight rows, 16 int32x4 partial sums per 16-byte K step (each weight and activation load
 * shared by 4 products: SMULL + SMLAL2 into int16, SADALP into int32), reduced per group with
 * an ADDP tree to one int32x4 of isums per activation row (lane = weight row); gs = 4 and 8
 * take several groups per load (int16 ADDP, SADDLP, 4x4 transpose). Four float32x4_t
 * accumulators (one per activation row) add ((float)isum * ws) * xs per group in order, with
 * the 4 weight rows' scales transposed 4 groups at a time: bit-equal to q8_gemm_1x1_scalar.
 * Loop: 4-row weight quads outer (they stay in L1), activation quads inner, the M % 4 rows by
 * the 1 x 4 GEMV tile; partial weight quads repeat row n1 - 1 and store only valid lanes.
 * gs % 4 != 0 falls back to the scalar kernel. Helpers and the tile: ../q8_neon_common.h.
 * q8_gemm_4x4_dotprod.c compiles this file again with Q8_ISA = Q8_ISA_DOT. */
#include "../q8_neon_common.h"

#if !defined(Q8_ISA) /* this file as itself: the neon kernel */
#define Q8_ISA Q8_ISA_NEON
#define Q8_GEMM_FN if_q8_gemm_4x4_neon
#define Q8_GEMM_DESC if_k_q8_gemm_4x4_neon
#define Q8_GEMM_NAME "q8_gemm_4x4_neon"
#define Q8_GEMM_REQUIRES IF_FEAT_ASIMD
#endif

/* n-quads outer (4 weight rows stay in L1), 4-row activation quads inner, then the M % 4
 * leftover rows one at a time with the GEMV tile */
Q8_INLINE void q8_gemm_impl(const int isa, const int kind, float *out, size_t ldo,
                            const int8_t *xq, const float *xs, size_t M, const int8_t *w,
                            const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    const size_t ng = K / gs;
    for (size_t n = n0; n < n1; n += 4) {
        q8_ptrs p;
        q8_set_wrows(&p, w, ws, n, n1, K, ng);
        const size_t cnt = n1 - n;
        size_t m = 0;
        for (; m + 4 <= M; m += 4) {
            for (int i = 0; i < 4; i++) {
                p.x[i] = xq + (m + (size_t)i) * K;
                p.xs[i] = xs + (m + (size_t)i) * ng;
            }
            float32x4_t acc[4];
            q8_tile(isa, kind, 4, acc, &p, ng, gs);
            for (int i = 0; i < 4; i++) q8_store(out + (m + (size_t)i) * ldo + n, acc[i], cnt);
        }
        for (; m < M; m++) {
            p.x[0] = xq + m * K;
            p.xs[0] = xs + m * ng;
            float32x4_t acc[4];
            q8_tile(isa, kind, 1, acc, &p, ng, gs);
            q8_store(out + m * ldo + n, acc[0], cnt);
        }
    }
}

void Q8_GEMM_FN(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    if (gs == 0 || gs % 4 != 0) {
        if_q8_gemm_1x1_scalar(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
        return;
    }
    Q8_DISPATCH(q8_gemm_impl, Q8_ISA, gs, out, ldo, xq, xs, M, w, ws, n0, n1, K);
}

const if_q8_gemm_kernel Q8_GEMM_DESC = {.name = Q8_GEMM_NAME, .requires = Q8_GEMM_REQUIRES,
                                        .mr = 4, .nr = 4, .run = Q8_GEMM_FN};
