/* peak_int8_avx512_vnni.c (-mavx512f -mavx512bw -mavx512vl -mavx512vnni) - the avx512_vnni
 * tier's int8 rate: VPDPBUSD on zmm (64 u8 x s8 multiply-adds into int32) with 12 independent
 * accumulators. */
#include <immintrin.h>

#include "isaforge_bench.h"

#define NACC 12

uint64_t ifb_peak_loop_avx512_vnni(size_t iters, int64_t *sink) {
    __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
    /* named accumulators (not an array) so they all live in registers */
    __m512i c0 = _mm512_setzero_si512(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0, c8 = c0,
            c9 = c0, c10 = c0, c11 = c0;
    for (size_t it = 0; it < iters; it++) {
        __asm__ volatile("" : "+v"(a), "+v"(b));
        c0 = _mm512_dpbusd_epi32(c0, a, b), c1 = _mm512_dpbusd_epi32(c1, a, b), c2 = _mm512_dpbusd_epi32(c2, a, b);
        c3 = _mm512_dpbusd_epi32(c3, a, b), c4 = _mm512_dpbusd_epi32(c4, a, b), c5 = _mm512_dpbusd_epi32(c5, a, b);
        c6 = _mm512_dpbusd_epi32(c6, a, b), c7 = _mm512_dpbusd_epi32(c7, a, b), c8 = _mm512_dpbusd_epi32(c8, a, b);
        c9 = _mm512_dpbusd_epi32(c9, a, b), c10 = _mm512_dpbusd_epi32(c10, a, b), c11 = _mm512_dpbusd_epi32(c11, a, b);
    }
    __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)), _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
    *sink = _mm512_reduce_add_epi32(s);
    return (uint64_t)iters * NACC * 64;
}
