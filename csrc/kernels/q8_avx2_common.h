/* q8_avx2_common.h - the shared per-ISA helpers of the AVX2 and AVX-VNNI Q8 kernels (the dot
 * product primitive, masks, transposes, horizontal sums, scale transposes, row pointers,
 * prefetch); the kernels' loops live in their files (q8_gemv/q8_gemv_1x8_avx2.c,
 * q8_gemm/q8_gemm_4x16_avx2.c). Included only by translation units compiled with at least
 * -mavx2; nothing here is exported, so each including file gets its own copy built with its
 * own ISA flags.
 *
 * The integer part of every output is exact (int32, any order). The float part follows the
 * scalar kernel exactly: per output, acc = 0.0f, then for each group g in order
 * acc = acc + (((float)isum_g * ws[n][g]) * xs[m][g]), with separate multiplies (the build
 * uses -ffp-contract=off, and no _fmadd_ is called). The vectors hold 8 different output rows
 * n in their lanes, so each lane runs its own sequential chain.
 *
 * q8c_dot(acc, u8, s8) adds, per int32 lane, the four u8 x s8 byte products:
 *   AVX-VNNI (__AVXVNNI__): VPDPBUSD;
 *   AVX2: VPMADDUBSW (two products per int16) + VPMADDWD with 1s (two int16 per int32).
 * With the sign trick (u8 = |x|, s8 = w * sign(x)) a VPMADDUBSW int16 is at most
 * 2 * 128 * 127 = 32512 < 32767 (even for x = -128), so it never saturates.
 *
 * Tails in N use clamped row pointers and masked stores, tails in K (K % 32 != 0) masked
 * loads, so nothing outside the valid data is touched. */
#ifndef IF_Q8_AVX2_COMMON_H
#define IF_Q8_AVX2_COMMON_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

#if !defined(__AVX2__)
#error "q8_avx2_common.h needs -mavx2"
#endif

#define Q8C_INLINE static inline __attribute__((always_inline))

Q8C_INLINE __m256i q8c_dot(__m256i acc, __m256i u8, __m256i s8) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(acc, u8, s8);
#else
    const __m256i p16 = _mm256_maddubs_epi16(u8, s8);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}

/* Lanes i < n all-ones (n <= 8), for masked loads/stores of row or group tails. Masked-out
 * lanes are never accessed (no fault), so buffers may end right after the last valid byte. */
Q8C_INLINE __m256i q8c_mask(size_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

Q8C_INLINE __m256i q8c_load_bytes(const int8_t *p, size_t nquads) {
    if (nquads >= 8) return _mm256_loadu_si256((const __m256i *)p);
    return _mm256_maskload_epi32((const int *)(const void *)p, q8c_mask(nquads));
}

Q8C_INLINE __m256i q8c_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* In-place 8x8 transpose of floats: r[i][j] -> r[j][i]. */
Q8C_INLINE void q8c_tr8_ps(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* In-place 8x8 transpose of int32 lanes (4-byte quads). */
Q8C_INLINE void q8c_tr8_epi32(__m256i v[8]) {
    __m256 r[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_castsi256_ps(v[i]);
    q8c_tr8_ps(r);
    for (int i = 0; i < 8; i++) v[i] = _mm256_castps_si256(r[i]);
}

/* Horizontal sums without VPHADDD (slow on this CPU): blends, in-lane shuffles and adds.
 * q8c_hpair: lane 2i = a[2i] + a[2i+1], lane 2i+1 = b[2i] + b[2i+1]. */
Q8C_INLINE __m256i q8c_hpair(__m256i a, __m256i b) {
    const __m256i x = _mm256_blend_epi32(a, b, 0xAA);
    const __m256i y = _mm256_shuffle_epi32(_mm256_blend_epi32(b, a, 0xAA), 0xB1);
    return _mm256_add_epi32(x, y);
}

/* The same on 64-bit units: unit 2i = a's units 2i + 2i+1, unit 2i+1 = b's. */
Q8C_INLINE __m256i q8c_hquad(__m256i a, __m256i b) {
    const __m256i x = _mm256_blend_epi32(a, b, 0xCC);
    const __m256i y = _mm256_shuffle_epi32(_mm256_blend_epi32(b, a, 0xCC), 0x4E);
    return _mm256_add_epi32(x, y);
}

/* Lane r of the result = sum of the 8 lanes of v[r]. */
Q8C_INLINE __m256i q8c_hsum8(const __m256i v[8]) {
    const __m256i e = q8c_hquad(q8c_hpair(v[0], v[1]), q8c_hpair(v[2], v[3]));
    const __m256i f = q8c_hquad(q8c_hpair(v[4], v[5]), q8c_hpair(v[6], v[7]));
    /* e = [rows 0-3 (lanes 0-3) | rows 0-3 (lanes 4-7)], f the same for rows 4-7 */
    return _mm256_add_epi32(_mm256_blend_epi32(e, f, 0xF0), _mm256_permute2x128_si256(e, f, 0x21));
}

/* st[j] lane r = sr[r][g0 + j] for j < gb (gb <= 8): the scales of 8 rows, transposed. */
Q8C_INLINE void q8c_load_scales(__m256 st[8], const float *const sr[8], size_t g0, size_t gb) {
    if (gb == 8) {
        for (int r = 0; r < 8; r++) st[r] = _mm256_loadu_ps(sr[r] + g0);
    } else {
        const __m256i mk = q8c_mask(gb);
        for (int r = 0; r < 8; r++) st[r] = _mm256_maskload_ps(sr[r] + g0, mk);
    }
    q8c_tr8_ps(st);
}

Q8C_INLINE __m256 q8c_load_out(const float *p, size_t nr) {
    if (nr == 8) return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, q8c_mask(nr));
}

Q8C_INLINE void q8c_store_out(float *p, __m256 v, size_t nr) {
    if (nr == 8)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, q8c_mask(nr), v);
}

/* The 8 row pointers of an output tile starting at row n with nr valid rows: rows past the end
 * repeat the last valid row (computed, never stored), so nothing past row n + nr - 1 is read. */
Q8C_INLINE void q8c_rows(const int8_t *wr[8], const float *sr[8], const int8_t *w,
                         const float *ws, size_t n, size_t nr, size_t K, size_t ng) {
    for (size_t r = 0; r < 8; r++) {
        const size_t rr = n + (r < nr ? r : nr - 1);
        wr[r] = w + rr * K;
        sr[r] = ws + rr * ng;
    }
}

/* Software prefetch. Weights are streamed once per call (from DRAM for real models) and a tile
 * reads 8 or 16 rows in parallel, which the hardware prefetchers follow poorly (the GEMV reads
 * DRAM several times faster with it; docs/performance.md). Prefetch addresses are computed as integers (they may
 * lie past the arrays: a prefetch never faults, and no out-of-range pointer is formed).
 * GEMV: whenever a tile has consumed 32 more bytes of each of its 8 rows (256 bytes), the 256
 * bytes Q8C_PFD tiles ahead are prefetched (full tiles are contiguous): for byte k of the rows
 * that is pf + 8 k with pf = w + (n + 8 * Q8C_PFD) * K. */
#ifndef Q8C_PFD
#define Q8C_PFD 4
#endif
Q8C_INLINE uintptr_t q8c_addr(const void *p, size_t off) { return (uintptr_t)p + off; }

Q8C_INLINE void q8c_prefetch(uintptr_t a) { _mm_prefetch((const char *)a, _MM_HINT_T0); }

Q8C_INLINE void q8c_prefetch256(uintptr_t a) {
    q8c_prefetch(a);
    q8c_prefetch(a + 64);
    q8c_prefetch(a + 128);
    q8c_prefetch(a + 192);
}

#if !defined(__AVXVNNI__)
/* One group of the AVX2 GEMM's 4 x 16 step (q8_gemm/q8_gemm_4x16_avx2.c) in inline assembly,
 * also run by the bench's kernel-mix probe (csrc/bench/peak_int8_avx2.c): a[i][v] = the sum
 * over the group's qpg quads of dot(|x| of row i, the quad of rows 8v..8v+7 signed by x of
 * row i). The 8
 * accumulators, both weight vectors, both broadcasts, two temporaries and the 16-bit ones take
 * 15 of the 16 ymm registers; the same loop in intrinsics had GCC 12 spill accumulators
 * inside it (3 spilled accumulators, 6 stack accesses per quad in objdump -d of the build).
 * w: the group's packed quads; u: |x| rows (stride su); x: the activation rows (stride K);
 * qpg >= 1. */
#define Q8C_ASM_ROW(UA, XA, AA, AB)                                                          \
    "vpbroadcastd " UA ", %[bu]\n\t"                                                         \
    "vpbroadcastd " XA ", %[bx]\n\t"                                                         \
    "vpsignb %[bx], %[w0], %[t0]\n\t"                                                        \
    "vpsignb %[bx], %[w1], %[t1]\n\t"                                                        \
    "vpmaddubsw %[t0], %[bu], %[t0]\n\t"                                                     \
    "vpmaddubsw %[t1], %[bu], %[t1]\n\t"                                                     \
    "vpmaddwd %[ones], %[t0], %[t0]\n\t"                                                     \
    "vpmaddwd %[ones], %[t1], %[t1]\n\t"                                                     \
    "vpaddd %[t0], %[" AA "], %[" AA "]\n\t"                                                 \
    "vpaddd %[t1], %[" AB "], %[" AB "]\n\t"

Q8C_INLINE void q8c_group_4x16(__m256i a[4][2], const int8_t *w, const int8_t *u,
                               size_t su, const int8_t *x, size_t K, size_t qpg) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i a0, a1, a2, a3, a4, a5, a6, a7, w0, w1, bu, bx, t0, t1;
    const size_t K3 = 3 * K, su3 = 3 * su;
    __asm__("vpxor %[a0], %[a0], %[a0]\n\t"
            "vpxor %[a1], %[a1], %[a1]\n\t"
            "vpxor %[a2], %[a2], %[a2]\n\t"
            "vpxor %[a3], %[a3], %[a3]\n\t"
            "vpxor %[a4], %[a4], %[a4]\n\t"
            "vpxor %[a5], %[a5], %[a5]\n\t"
            "vpxor %[a6], %[a6], %[a6]\n\t"
            "vpxor %[a7], %[a7], %[a7]\n\t"
            "1:\n\t"
            "vmovdqa (%[pw]), %[w0]\n\t"
            "vmovdqa 32(%[pw]), %[w1]\n\t"
            Q8C_ASM_ROW("(%[pu])", "(%[px])", "a0", "a1")
            Q8C_ASM_ROW("(%[pu],%[su],1)", "(%[px],%[K],1)", "a2", "a3")
            Q8C_ASM_ROW("(%[pu],%[su],2)", "(%[px],%[K],2)", "a4", "a5")
            Q8C_ASM_ROW("(%[pu],%[su3],1)", "(%[px],%[K3],1)", "a6", "a7")
            "add $64, %[pw]\n\t"
            "add $4, %[pu]\n\t"
            "add $4, %[px]\n\t"
            "dec %[n]\n\t"
            "jnz 1b\n\t"
            : [a0] "=&x"(a0), [a1] "=&x"(a1), [a2] "=&x"(a2), [a3] "=&x"(a3), [a4] "=&x"(a4),
              [a5] "=&x"(a5), [a6] "=&x"(a6), [a7] "=&x"(a7), [w0] "=&x"(w0), [w1] "=&x"(w1),
              [bu] "=&x"(bu), [bx] "=&x"(bx), [t0] "=&x"(t0), [t1] "=&x"(t1), [pw] "+r"(w),
              [pu] "+r"(u), [px] "+r"(x), [n] "+r"(qpg)
            : [ones] "x"(ones), [K] "r"(K), [K3] "r"(K3), [su] "r"(su), [su3] "r"(su3)
            : "cc", "memory");
    a[0][0] = a0, a[0][1] = a1, a[1][0] = a2, a[1][1] = a3;
    a[2][0] = a4, a[2][1] = a5, a[3][0] = a6, a[3][1] = a7;
}
#endif

#endif
