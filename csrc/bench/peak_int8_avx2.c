/* peak_int8_avx2.c (-mavx2 -mfma) - the avx2 tier's int8 rate: VPMADDUBSW (u8 x s8 pairs ->
 * s16) + VPMADDWD (-> s32) + VPADDD into 8 independent accumulators, operands in registers;
 * and the kernel-mix probe: the AVX2 GEMM's own 4 x 16 group loop over L1-resident data. */
#include <immintrin.h>

#include "isaforge_bench.h"
#include "../kernels/q8_avx2_common.h"

uint64_t ifb_peak_loop_avx2(size_t iters, int64_t *sink) {
    __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
            c7 = c0;
    for (size_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+x"(a), "+x"(b)); /* opaque operands: nothing is hoisted */
        c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), one));
        c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_maddubs_epi16(b, a), one));
        c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(_mm256_maddubs_epi16(a, a), one));
        c3 = _mm256_add_epi32(c3, _mm256_madd_epi16(_mm256_maddubs_epi16(b, b), one));
        __asm__ volatile("" : "+x"(a), "+x"(b));
        c4 = _mm256_add_epi32(c4, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), one));
        c5 = _mm256_add_epi32(c5, _mm256_madd_epi16(_mm256_maddubs_epi16(b, a), one));
        c6 = _mm256_add_epi32(c6, _mm256_madd_epi16(_mm256_maddubs_epi16(a, a), one));
        c7 = _mm256_add_epi32(c7, _mm256_madd_epi16(_mm256_maddubs_epi16(b, b), one));
    }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                 _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
    *sink = _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
    return (uint64_t)iters * 8 * 32;
}

/* The ceiling of the AVX2 GEMM's instruction mix: its 4 x 16 group loop (q8c_group_4x16: per
 * quad 2 weight loads, per activation row 2 broadcasts, per vector VPSIGNB + VPMADDUBSW +
 * VPMADDWD + VPADDD) over one 576-byte K block (144 quads, 9 KiB of packed weights and
 * 2 x 2.3 KiB of activation rows, all in L1), without the float epilogue. */
uint64_t ifb_mix_loop_avx2(size_t iters, int64_t *sink) {
    enum { K = 576, Q = K / 4 };
    _Alignas(32) int8_t w[64 * Q], u[4 * K], x[4 * K];
    for (size_t i = 0; i < sizeof w; i++) w[i] = (int8_t)(i * 37 + 11);
    for (size_t i = 0; i < sizeof x; i++) {
        x[i] = (int8_t)(i * 13 + 5);
        u[i] = (int8_t)(x[i] < 0 ? -x[i] : x[i]);
    }
    __m256i s = _mm256_setzero_si256();
    const int8_t *wp = w;
    for (size_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+r"(wp)); /* opaque: nothing is hoisted out of the loop */
        __m256i a[4][2];
        q8c_group_4x16(a, wp, u, K, x, K, Q);
        for (int i = 0; i < 4; i++)
            s = _mm256_add_epi32(s, _mm256_add_epi32(a[i][0], a[i][1]));
    }
    *sink = _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
    return (uint64_t)iters * Q * 4 * 16 * 4;
}
