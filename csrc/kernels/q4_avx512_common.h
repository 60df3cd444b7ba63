/* q4_avx512_common.h - the helpers of the AVX-512 VNNI 4-bit codebook kernels
 * (q4_gemv/q4_gemv_1x16_avx512_vnni.c, q4_gemm/q4_gemm_8x16_avx512_vnni.c), on top of the Q8
 * ones (q8_avx512_common.h: reductions, transposes, byte masks). Include only from translation
 * units compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni.
 *
 * One product for every codebook: VPDPBUSD multiplies unsigned by signed bytes and adds each
 * 4 products into an int32 lane without saturation (each product at most 254 * 128 in
 * magnitude), so the nibbles are looked up (VPSHUFB, the 16-entry table in every 128-bit
 * block) in u = cb - min(cb), each in [0, 254] since cb lies in [-127, 127], and
 * VPDPBUSD(u, x) gives sum(u * x); per group isum = sum(u * x) + min(cb) * sum(x), with
 * min * sum(x) per activation group computed once per call and shared by every weight row:
 * the scalar kernel's sum(cb * x) as the same int32 (the lanes wrap exactly; the true value
 * fits). Q4Z_LIN (cb[i] = cb[0] + i, GGUF Q4_0): u is the nibble itself, no lookup. */
#ifndef IF_Q4_AVX512_COMMON_H
#define IF_Q4_AVX512_COMMON_H

#include <string.h>

#include "kernels.h"
#include "q8_avx512_common.h"

enum { Q4Z_LUT = 0, Q4Z_LIN = 1 };

/* The product mode of codebook cb; *cmin = min(cb), lut = the 16 bytes cb - min (0..254). */
static inline int q4z_mode(const int8_t *cb, int32_t *cmin, uint8_t lut[16]) {
    int lo = cb[0], lin = 1;
    for (int i = 1; i < 16; i++) {
        lo = cb[i] < lo ? cb[i] : lo;
        lin &= cb[i] == cb[0] + i;
    }
    *cmin = lo;
    for (int i = 0; i < 16; i++) lut[i] = (uint8_t)(cb[i] - lo);
    return lin ? Q4Z_LIN : Q4Z_LUT;
}

/* msx[g] = cmin * (sum of the gs activations of group g), g < ng (int32, wrapping exactly as
 * the int32 sums it is added to). */
static inline void q4z_xsums(int32_t *msx, const int8_t *xq, size_t ng, size_t gs, int32_t cmin) {
    for (size_t g = 0; g < ng; g++) {
        int32_t s = 0;
        for (size_t k = 0; k < gs; k++) s += xq[g * gs + k];
        msx[g] = (int32_t)((uint32_t)s * (uint32_t)cmin);
    }
}

/* The lookup table in each 128-bit block. */
IFZ_INLINE __m512i q4z_lut(const uint8_t lut[16]) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)lut));
}

/* The unsigned weight bytes of the nibble bytes b: *lo from the low nibbles, *hi from the
 * high ones, byte for byte (looked up in lut unless mode is Q4Z_LIN). */
IFZ_INLINE void q4z_expand(__m512i b, __m512i lut, __m512i *lo, __m512i *hi, const int mode) {
    const __m512i m = _mm512_set1_epi8(15);
    __m512i l = _mm512_and_si512(b, m), h = _mm512_and_si512(_mm512_srli_epi16(b, 4), m);
    if (mode != Q4Z_LIN) {
        l = _mm512_shuffle_epi8(lut, l);
        h = _mm512_shuffle_epi8(lut, h);
    }
    *lo = l;
    *hi = h;
}

#endif
