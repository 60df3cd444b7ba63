/* amx_readout_avx512.h - the AVX-512 readout of the AMX GEMMs' 16x16 int32 C tiles (the Q8
 * GEMM q8_gemm_16x16_amx.c and the 4-bit GEMM's q4_gemm_16x16_amx_avx512.h): one zmm of float
 * accumulators per activation row, lanes = the block's 16 output rows, each group's tile scaled
 * in the contract's order. The including file provides <immintrin.h> (or SIMDe's aliases in a
 * test-only build) and <stdint.h>. */
#ifndef IF_AMX_READOUT_AVX512_H
#define IF_AMX_READOUT_AVX512_H

#include <stddef.h>

/* AVX-512 readout: one zmm per activation row, lanes = the 16 output rows of the block. */
typedef struct amx_acc {
    __m512 v[16];
} amx_acc;
typedef struct amx_wsv {
    __m512 v;
} amx_wsv;

static inline __attribute__((always_inline)) void amx_acc_zero(amx_acc *a) {
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) a->v[r] = _mm512_setzero_ps();
}

/* ws[nb + n][g] in lane n for n in [lo, hi), 0 elsewhere (masked gather: rows outside
 * [n0, n1) are not read). */
static inline __attribute__((always_inline)) void amx_ws_load(amx_wsv *wv, const float *ws_g,
                                                              size_t ng, size_t lo, size_t hi) {
    const __mmask16 k = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
    if (ng <= (size_t)INT32_MAX / 16) {
        const __m512i idx = _mm512_mullo_epi32(
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
            _mm512_set1_epi32((int)ng));
        wv->v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, idx, ws_g, 4);
    } else {
        _Alignas(64) float t[16];
        for (size_t n = 0; n < 16; n++) t[n] = n >= lo && n < hi ? ws_g[n * ng] : 0.0f;
        wv->v = _mm512_load_ps(t);
    }
}

/* acc[r] = acc[r] + ((cvt(C[r]) * ws_g) * xs[m0 + r][g]) for r < rows: no FMA, the
 * contract's order, bit-equal to the scalar kernel's acc += ((float)isum * ws) * xs. */
static inline __attribute__((always_inline)) void amx_readout(amx_acc *a, const int32_t *cb,
                                                              const amx_wsv *wv,
                                                              const float *xs_g, size_t ng,
                                                              size_t rows) {
#pragma GCC unroll 16
    for (size_t r = 0; r < 16; r++) {
        if (r < rows) {
            const __m512 c = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cb + 16 * r)));
            const __m512 p = _mm512_mul_ps(_mm512_mul_ps(c, wv->v), _mm512_set1_ps(xs_g[r * ng]));
            a->v[r] = _mm512_add_ps(a->v[r], p);
        }
    }
}

/* Rows r < rows of the 16x16 tile to o + r*ldo, lanes [lo, hi) only (masked stores). */
static inline __attribute__((always_inline)) void amx_acc_store(const amx_acc *a, float *o,
                                                                size_t ldo, size_t rows,
                                                                size_t lo, size_t hi) {
    const __mmask16 k = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
#pragma GCC unroll 16
    for (size_t r = 0; r < 16; r++)
        if (r < rows) _mm512_mask_storeu_ps(o + r * ldo, k, a->v[r]);
}

#endif
