/* q8_avx512_common.h - static inline helpers shared by the AVX-512 VNNI Q8 GEMV and GEMM
 * (include only from translation units compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni; everything here is static inline, so each such TU is self-contained).
 *
 * Layout vocabulary: a zmm holds 16 int32/float lanes in 4 blocks of 128 bits.
 *
 * The in-block pairwise-sum steps ifz_hA/hB/hP/hC, the 16x16 dword transpose
 * ifz_transpose16, ifz_bytemask and the scale transpose ifz_scales_t16. The kernels' loops
 * live in their files (q8_gemv/q8_gemv_1x1_avx512_vnni.c, q8_gemm/q8_gemm_4x32_avx512_vnni.c). */
#ifndef IF_Q8_AVX512_COMMON_H
#define IF_Q8_AVX512_COMMON_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define IFZ_INLINE static inline __attribute__((always_inline))
#define IFZ_UNROLL _Pragma("GCC unroll 16")

/* Pairwise sums within 128-bit blocks, in-lane shuffles only (non-destructive 3-operand forms):
 *   ifz_hA(a, b): per block [a0+a2, b0+b2, a1+a3, b1+b3]   (sums lane bit 1)
 *   ifz_hB(a, b): per block [a0+a2, a1+a3, b0+b2, b1+b3]   (64-bit halves)
 *   ifz_hP(a, b): per block [a0+a1, a2+a3, b0+b1, b2+b3]   (sums lane bit 0)
 *   ifz_hC(a, b): blocks    [a0+a1, a2+a3, b0+b1, b2+b3]   (128-bit blocks, sums block bit 0) */
IFZ_INLINE __m512i ifz_hA(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
IFZ_INLINE __m512i ifz_hB(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
IFZ_INLINE __m512i ifz_hP(__m512i a, __m512i b) {
    const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                            _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xDD)));
}
IFZ_INLINE __m512i ifz_hC(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xDD));
}

/* 4x4 transpose of 128-bit blocks: o[j] block k = t_k block j. */
IFZ_INLINE void ifz_blk4x4(__m512i t0, __m512i t1, __m512i t2, __m512i t3, __m512i *o0,
                           __m512i *o1, __m512i *o2, __m512i *o3) {
    const __m512i p = _mm512_shuffle_i32x4(t0, t1, 0x88), q = _mm512_shuffle_i32x4(t0, t1, 0xDD);
    const __m512i p2 = _mm512_shuffle_i32x4(t2, t3, 0x88), q2 = _mm512_shuffle_i32x4(t2, t3, 0xDD);
    *o0 = _mm512_shuffle_i32x4(p, p2, 0x88);
    *o2 = _mm512_shuffle_i32x4(p, p2, 0xDD);
    *o1 = _mm512_shuffle_i32x4(q, q2, 0x88);
    *o3 = _mm512_shuffle_i32x4(q, q2, 0xDD);
}

/* In-place 16x16 transpose of 32-bit lanes: afterwards r[q] lane s = old r[s] lane q.
 * 32 in-block unpacks + 32 block shuffles. */
IFZ_INLINE void ifz_transpose16(__m512i r[16]) {
    __m512i a[16], b[16];
    IFZ_UNROLL
    for (int k = 0; k < 8; k++) {
        a[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        a[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    /* b[4k + e] block j = rows 4k .. 4k+3, element 4j + e */
    IFZ_UNROLL
    for (int k = 0; k < 4; k++) {
        b[4 * k + 0] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
        b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
        b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
        b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
    }
    IFZ_UNROLL
    for (int e = 0; e < 4; e++)
        ifz_blk4x4(b[e], b[4 + e], b[8 + e], b[12 + e], &r[e], &r[4 + e], &r[8 + e], &r[12 + e]);
}

IFZ_INLINE __mmask64 ifz_bytemask(size_t len) {
    return len >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << len) - 1);
}

/* Transpose scales ws[row][g0 .. g0+cnt) of 16 row pointers (cnt <= 16) into
 * dst[g * stride + s] = rows[s][g0 + g] (dst 64-byte aligned, stride a multiple of 16). Only
 * the first cnt vectors are written; the loads are masked to cnt floats. */
IFZ_INLINE void ifz_scales_t16(float *dst, size_t stride, const float *const rows[16], size_t g0,
                               size_t cnt) {
    const __mmask16 m = (__mmask16)(cnt >= 16 ? 0xFFFF : ((1u << cnt) - 1));
    __m512i r[16];
    IFZ_UNROLL
    for (int s = 0; s < 16; s++) r[s] = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, rows[s] + g0));
    ifz_transpose16(r);
    IFZ_UNROLL
    for (size_t q = 0; q < cnt; q++) _mm512_store_si512((void *)(dst + q * stride), r[q]);
}

#endif
