/* q8_avx512_common.h - static inline helpers shared by the AVX-512 VNNI Q8 GEMV and GEMM
 * (include only from translation units compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni; everything here is static inline, so each such TU is self-contained).
 *
 * Layout vocabulary: a zmm holds 16 int32/float lanes in 4 blocks of 128 bits. "Slot s" is
 * the s-th of 16 vectors fed to a network; the networks are built so that output lane s
 * belongs to slot s (a 16-row GEMV pass has slot s = weight row s, so lanes = output rows).
 *
 * ifz_reduce_groups: 16 slots, each a VPDPBUSD result over a 64-byte chunk (16 partial sums
 * of 4 products, a group of gs = 4L bytes being L consecutive lanes), become 16/L vectors
 * with vector q lane s = the int32 sum of group q of slot s. It is a transpose with adds:
 * in-block unpack/shuffle + add levels (VPUNPCK*, VSHUFPS, VSHUFI32X4; no lane-crossing
 * VPERMT2D, no destructive operands) sum the L lanes of each group, the remaining levels
 * only move blocks. ifz_transpose16 (L = 1) is a plain 16x16 dword transpose.
 *
 * ifz_gemv: the GEMV for 16 consecutive output rows per pass (lanes = rows), used by the
 * GEMV kernel and by the GEMM where its own paths do not apply. Integer dot products use
 * VPDPBUSD (u8 x s8) with the sign trick: a = |x| (u8), b = w negated where x < 0 (VPSUBB
 * under the mask of negative x; AVX-512BW has no VPSIGNB); x's |x| and mask are shared by the
 * 16 rows. The float part follows the scalar kernel exactly: acc = 0.0f, then per group in
 * order acc += ((float)isum * ws) * xs, each lane (output row) on its own, never fused; the
 * 16 rows' scales are transposed into a 1 KiB stack block per 16 groups. */
#ifndef IF_Q8_AVX512_COMMON_H
#define IF_Q8_AVX512_COMMON_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#define IFZ_INLINE static inline __attribute__((always_inline))
#define IFZ_UNROLL _Pragma("GCC unroll 16")
#ifndef IFZ_PF_HINT
#define IFZ_PF_HINT _MM_HINT_T0
#endif
#ifndef IFZ_PF_BLOCKS
#define IFZ_PF_BLOCKS 2
#endif

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

/* Reduce 16 slots of (16 / L groups x L partial int32 sums, group q in lanes qL .. qL+L-1)
 * into v[0 .. 16/L): v[q] lane s = sum of group q of slot s. L in {1, 2, 4, 8, 16} (a
 * constant after inlining). */
IFZ_INLINE void ifz_reduce_groups(__m512i v[16], int L) {
    if (L == 1) {
        ifz_transpose16(v);
        return;
    }
    if (L == 2) {
        __m512i w[8], z[8];
        IFZ_UNROLL
        for (int k = 0; k < 8; k++) w[k] = ifz_hP(v[2 * k], v[2 * k + 1]);
        /* w[k] lane (block, p1, p0) = slot 2k + p1, group 2 * block + p0 */
        IFZ_UNROLL
        for (int m = 0; m < 4; m++) {
            const __m512i x = _mm512_unpacklo_epi32(w[2 * m], w[2 * m + 1]);
            const __m512i y = _mm512_unpackhi_epi32(w[2 * m], w[2 * m + 1]);
            z[2 * m] = _mm512_unpacklo_epi32(x, y);     /* slot 4m + q, group 2 * block */
            z[2 * m + 1] = _mm512_unpackhi_epi32(x, y); /* slot 4m + q, group 2 * block + 1 */
        }
        ifz_blk4x4(z[0], z[2], z[4], z[6], &v[0], &v[2], &v[4], &v[6]);
        ifz_blk4x4(z[1], z[3], z[5], z[7], &v[1], &v[3], &v[5], &v[7]);
        return;
    }
    __m512i t[8];
    IFZ_UNROLL
    for (int k = 0; k < 8; k++) t[k] = ifz_hA(v[2 * k], v[2 * k + 1]);
    IFZ_UNROLL
    for (int k = 0; k < 4; k++) t[k] = ifz_hB(t[2 * k], t[2 * k + 1]);
    /* t[k] lane (block, q) = slot 4k + q, sum of that slot's lanes in the block */
    if (L == 4) {
        ifz_blk4x4(t[0], t[1], t[2], t[3], &v[0], &v[1], &v[2], &v[3]);
        return;
    }
    t[0] = ifz_hC(t[0], t[1]);
    t[1] = ifz_hC(t[2], t[3]);
    /* t[x] lane (c1, c0, q) = slot 8x + 4 c1 + q, sum over blocks 2 c0, 2 c0 + 1 */
    if (L == 8) {
        v[0] = _mm512_shuffle_i32x4(t[0], t[1], 0x88);
        v[1] = _mm512_shuffle_i32x4(t[0], t[1], 0xDD);
        return;
    }
    v[0] = ifz_hC(t[0], t[1]);
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

/* One 64-byte chunk of 16 rows against x: slot s = VPDPBUSD(0, |x|, +-w[s]) (16 partial
 * sums of 4 products each). len <= 64 bytes are read (masked, exact-size safe). */
IFZ_INLINE void ifz_dot_chunk16(__m512i v[16], const int8_t *x, const int8_t *const wr[16],
                                size_t off, __mmask64 lm, int accumulate) {
    const __m512i xv = _mm512_maskz_loadu_epi8(lm, x + off);
    const __m512i ax = _mm512_abs_epi8(xv);
    const __mmask64 neg = _mm512_movepi8_mask(xv);
    const __m512i z = _mm512_setzero_si512();
    IFZ_UNROLL
    for (int s = 0; s < 16; s++) {
        __m512i wv = _mm512_maskz_loadu_epi8(lm, wr[s] + off);
        wv = _mm512_mask_sub_epi8(wv, neg, z, wv);
        v[s] = _mm512_dpbusd_epi32(accumulate ? v[s] : z, ax, wv);
    }
}

/* acc (lanes = rows) += ((float)isum * ws) * xs for one group: exactly the scalar order. */
IFZ_INLINE __m512 ifz_group_step(__m512 acc, __m512i isum, const float *wst_g, float xs_g) {
    __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_load_ps(wst_g));
    p = _mm512_mul_ps(p, _mm512_set1_ps(xs_g));
    return _mm512_add_ps(acc, p);
}

/* GEMV over rows wr[0..16) (row pointers, already clamped to valid rows) for groups that pack
 * into 64-byte chunks: gs = 4 * L with L in {1, 2, 4, 8}. Returns the 16 accumulators. */
IFZ_INLINE __m512 ifz_gemv16_packed(const int8_t *xq, const float *xs, const int8_t *const wr[16],
                                    const float *const wsr[16], size_t K, size_t gs, int L,
                                    const int8_t *pf) {
    const size_t ng = K / gs;
    const size_t gpc = (size_t)(16 / L); /* groups per 64-byte chunk */
    _Alignas(64) float wst[16 * 16];
    __m512 acc = _mm512_setzero_ps();
    for (size_t c = 0, g0 = 0; c * 64 < K; c++, g0 += gpc) {
        if (g0 % 16 == 0) ifz_scales_t16(wst, 16, wsr, g0, ng - g0 < 16 ? ng - g0 : 16);
        __m512i v[16];
        /* lines c*16 .. c*16+15 of the prefetched block, when all inside it */
        if (pf && (c + 1) * 1024 <= 16 * K) {
            IFZ_UNROLL
            for (int s = 0; s < 16; s++) _mm_prefetch((const char *)pf + c * 1024 + s * 64, IFZ_PF_HINT);
        }
        ifz_dot_chunk16(v, xq, wr, c * 64, ifz_bytemask(K - c * 64), 0);
        ifz_reduce_groups(v, L);
        IFZ_UNROLL
        for (size_t q = 0; q < gpc; q++) {
            const size_t g = g0 + q;
            if (g >= ng) break;
            acc = ifz_group_step(acc, v[q], wst + (g % 16) * 16, xs[g]);
        }
    }
    return acc;
}

/* GEMV over rows wr[0..16) for any group size: each group is read as ceil(gs / 64) masked
 * chunks accumulated by VPDPBUSD, then the 16 slots are reduced to one vector. */
IFZ_INLINE __m512 ifz_gemv16_generic(const int8_t *xq, const float *xs, const int8_t *const wr[16],
                                     const float *const wsr[16], size_t K, size_t gs,
                                     const int8_t *pf) {
    const size_t ng = K / gs;
    _Alignas(64) float wst[16 * 16];
    __m512 acc = _mm512_setzero_ps();
    for (size_t g = 0; g < ng; g++) {
        if (g % 16 == 0) ifz_scales_t16(wst, 16, wsr, g, ng - g < 16 ? ng - g : 16);
        __m512i v[16];
        for (size_t k = 0; k < gs; k += 64) {
            /* the block is 16 * K bytes: 16 lines per 64-byte step of K */
            const size_t o = (g * gs + k) * 16;
            if (pf && o + 1024 <= 16 * K) {
                IFZ_UNROLL
                for (int s = 0; s < 16; s++) _mm_prefetch((const char *)pf + o + s * 64, IFZ_PF_HINT);
            }
            ifz_dot_chunk16(v, xq, wr, g * gs + k, ifz_bytemask(gs - k), k != 0);
        }
        ifz_reduce_groups(v, 16);
        acc = ifz_group_step(acc, v[0], wst + (g % 16) * 16, xs[g]);
    }
    return acc;
}

/* out[n] for n in [n0, n1) (see if_q8_gemv_fn), 16 rows per pass; rows past n1 - 1 in the
 * last pass repeat row n1 - 1 (never read out of range) and are not stored. Returns 0 if the
 * group size is not handled here (gs < 16 and not 4 or 8). */
static inline int ifz_gemv(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                           const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    if (!(gs == 4 || gs == 8 || gs >= 16)) return 0;
    const size_t ng = K / gs;
    for (size_t nb = n0; nb < n1; nb += 16) {
        const size_t nr = n1 - nb < 16 ? n1 - nb : 16;
        const int8_t *wr[16];
        const float *wsr[16];
        IFZ_UNROLL
        for (size_t s = 0; s < 16; s++) {
            const size_t n = nb + (s < nr ? s : nr - 1);
            wr[s] = w + n * K;
            wsr[s] = ws + n * ng;
        }
        /* Software prefetch of the block IFZ_PF_BLOCKS ahead (16 rows = 16 * K contiguous
         * bytes, spread over the passes' chunks): the 16 row streams defeat the hardware
         * prefetcher, and decode is memory-bound. Only rows before n1 are prefetched. */
        const int8_t *pf = nb + (IFZ_PF_BLOCKS + 1) * 16 <= n1 ? w + (nb + IFZ_PF_BLOCKS * 16) * K : NULL;
        __m512 acc;
        switch (gs) {
        case 4: acc = ifz_gemv16_packed(xq, xs, wr, wsr, K, gs, 1, pf); break;
        case 8: acc = ifz_gemv16_packed(xq, xs, wr, wsr, K, gs, 2, pf); break;
        case 16: acc = ifz_gemv16_packed(xq, xs, wr, wsr, K, gs, 4, pf); break;
        case 32: acc = ifz_gemv16_packed(xq, xs, wr, wsr, K, gs, 8, pf); break;
        default: acc = ifz_gemv16_generic(xq, xs, wr, wsr, K, gs, pf); break;
        }
        _mm512_mask_storeu_ps(out + nb, (__mmask16)((1u << nr) - 1), acc);
    }
    return 1;
}

#endif
