/* peak_int8_avx_vnni.c (-mavx2 -mfma -mavxvnni) - the avx_vnni tier's int8 rate: VPDPBUSD on
 * ymm (32 u8 x s8 multiply-adds into int32) with 12 independent accumulators. */
#include <immintrin.h>

#include "isaforge_bench.h"

#define NACC 12

uint64_t ifb_peak_loop_avx_vnni(size_t iters, int64_t *sink) {
    __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(-2);
    /* named accumulators (not an array) so they all live in registers */
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0,
            c9 = c0, c10 = c0, c11 = c0;
    for (size_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+x"(a), "+x"(b));
        c0 = _mm256_dpbusd_avx_epi32(c0, a, b), c1 = _mm256_dpbusd_avx_epi32(c1, a, b), c2 = _mm256_dpbusd_avx_epi32(c2, a, b);
        c3 = _mm256_dpbusd_avx_epi32(c3, a, b), c4 = _mm256_dpbusd_avx_epi32(c4, a, b), c5 = _mm256_dpbusd_avx_epi32(c5, a, b);
        c6 = _mm256_dpbusd_avx_epi32(c6, a, b), c7 = _mm256_dpbusd_avx_epi32(c7, a, b), c8 = _mm256_dpbusd_avx_epi32(c8, a, b);
        c9 = _mm256_dpbusd_avx_epi32(c9, a, b), c10 = _mm256_dpbusd_avx_epi32(c10, a, b), c11 = _mm256_dpbusd_avx_epi32(c11, a, b);
    }
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)), _mm256_add_epi32(_mm256_add_epi32(c4, c5), _mm256_add_epi32(c6, c7)));
    s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(c8, c9), _mm256_add_epi32(c10, c11)));
    *sink = _mm256_extract_epi32(s, 0) + _mm256_extract_epi32(s, 7);
    return (uint64_t)iters * NACC * 32;
}
