/* q4_gemm_16x16_amx_avx512.h - the AVX-512 half of the AMX 4-bit GEMM (q4_gemm_16x16_amx.c):
 * the nibble expansion into VNNI B tiles (gather + VPSHUFB into the codebook) and the 16x16
 * readout of the C tiles (the Q8 AMX kernel's readout, plus the reload of a chunk's
 * accumulators). A header so that a test-only driver can compile the same lines through SIMDe
 * (AMXQ4_SIMDE: <simde/x86/avx512.h> with native aliases, and the driver's own definitions of
 * the few intrinsics SIMDe lacks) together with the emulated tile machine. Each function is
 * the AVX-512 form of the plain-C function of the same name in q4_gemm_16x16_amx_body.h or
 * q8_gemm_16x16_amx_body.h, with the same results. */
#ifndef IF_Q4_GEMM_16X16_AMX_AVX512_H
#define IF_Q4_GEMM_16X16_AMX_AVX512_H

#if !defined(AMXQ4_SIMDE)
#include <immintrin.h>
#endif
#include <stddef.h>
#include <stdint.h>

#define AMXQ4_INLINE static inline __attribute__((always_inline))

/* lanes [lo, hi) of 16 */
AMXQ4_INLINE __mmask16 amxq4_mask(size_t lo, size_t hi) {
    return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

#include "../q8_gemm/amx_readout_avx512.h" /* amx_acc, amx_ws_load, amx_readout, amx_acc_store */

/* The inverse of amx_acc_store (rows past `rows` and lanes outside [lo, hi) are 0, not read). */
AMXQ4_INLINE void amxq4_acc_load(amx_acc *a, const float *o, size_t ldo, size_t rows, size_t lo,
                                 size_t hi) {
    const __mmask16 k = amxq4_mask(lo, hi);
#pragma GCC unroll 16
    for (size_t r = 0; r < 16; r++)
        a->v[r] = r < rows ? _mm512_maskz_loadu_ps(k, o + r * ldo) : _mm512_setzero_ps();
}

/* The scratch of kc values (a multiple of 32) of the block's 16 rows in VNNI form: per block j
 * of 32 values, gather dword q (bytes 4q .. 4q + 3) of each row's 16 nibble bytes into lane n,
 * then its low nibbles are values 4q .. 4q + 3 (VNNI row 8j + q) and its high nibbles values
 * 16 + 4q .. 16 + 4q + 3 (row 8j + 4 + q), looked up in the codebook (VPSHUFB: 16 entries per
 * 128-bit lane). Rows outside [lo, hi) are not read and come out 0. */
AMXQ4_INLINE void amxq4_expand(int8_t *scr, const uint8_t *wb, size_t rb, size_t kc, size_t lo,
                               size_t hi, const int8_t *cb) {
    const __mmask16 k = amxq4_mask(lo, hi);
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
        _mm512_set1_epi32((int)rb));
    const __m512i cbv = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)cb));
    const __m512i m15 = _mm512_set1_epi8(15);
    for (size_t j = 0; j < kc / 32; j++) {
        const uint8_t *p = wb + 16 * j;
        int8_t *d = scr + 512 * j;
#pragma GCC unroll 4
        for (size_t q = 0; q < 4; q++) {
            const __m512i t =
                _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, p + 4 * q, 1);
            const __m512i l = _mm512_and_si512(t, m15);
            const __m512i h = _mm512_and_si512(_mm512_srli_epi16(t, 4), m15);
            _mm512_store_si512((void *)(d + 64 * q),
                               _mm512_maskz_mov_epi32(k, _mm512_shuffle_epi8(cbv, l)));
            _mm512_store_si512((void *)(d + 64 * (q + 4)),
                               _mm512_maskz_mov_epi32(k, _mm512_shuffle_epi8(cbv, h)));
        }
    }
}

#endif /* IF_Q4_GEMM_16X16_AMX_AVX512_H */
