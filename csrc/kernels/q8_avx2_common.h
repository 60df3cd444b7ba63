/* q8_avx2_common.h - static inline building blocks of the AVX2 and AVX-VNNI Q8 GEMV/GEMM
 * kernels. Included only by translation units compiled with at least -mavx2; nothing here is
 * exported, so each including file gets its own copy built with its own ISA flags.
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
 * Tiles: GEMV 1 activation row x 8 weight rows (one ymm, lane = row); GEMM 4 activation rows
 * x 16 weight rows (8 ymm). Tails in N use clamped row pointers and masked stores, tails in K
 * (K % 32 != 0) masked loads, so nothing outside the valid data is touched. */
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

/* GEMM K blocking: at most Q8C_KB bytes of K and Q8C_GB groups are packed per block; the
 * GEMM's stack scratch (q8c_pack) is 20 * Q8C_KB + 64 (AVX2) or 128 (VNNI) * Q8C_GB bytes,
 * 48 or 56 KiB with the defaults. */
#ifndef Q8C_KB
#define Q8C_KB 2048
#endif
#ifndef Q8C_GB
#define Q8C_GB 128
#endif
/* GEMM activation rows per microkernel step (the weight vector is reused this many times). */
#define Q8C_MT 4

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
 * reads 8 or 16 rows in parallel, which the hardware prefetchers follow poorly (GEMV from DRAM
 * went from ~10 to ~30 GB/s with it). Prefetch addresses are computed as integers (they may
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

/* ---------------------------------------------------------------------------------------
 * GEMV: 1 activation row x 8 weight rows. For each row, the bytes of a group are dotted with
 * the activation in 32-byte vectors (sign trick: u8 = |x| shared by the 8 rows, s8 =
 * w * sign(x)), giving 8 int32 partial sums per row; the 8 rows' vectors are then reduced to
 * one vector of 8 isums (lane = row) with blends and in-lane shuffles. For gs = 4, 8, 16 a
 * 32-byte dot holds 8, 4, 2 whole groups, separated by a transpose-like shuffle; other
 * gs % 4 == 0 go through quads (each int32 lane of a dot is one 4-byte quad, an 8x8 transpose
 * turns 8 rows x 8 quads into 8 quads x 8 rows, and quads are added into their groups).
 * ------------------------------------------------------------------------------------- */

/* Isums of one group (gs % 32 == 0) starting at byte off, for the 8 rows; lane = row. */
Q8C_INLINE __m256i q8c_isum_rows32(const int8_t *const wr[8], const int8_t *xq, size_t off,
                                   size_t gs, uintptr_t pf) {
    __m256i v[8];
    for (int r = 0; r < 8; r++) v[r] = _mm256_setzero_si256();
    for (size_t k = off; k < off + gs; k += 32) {
        q8c_prefetch256(pf + 8 * k);
        const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + k));
        const __m256i ax = _mm256_abs_epi8(x);
        for (int r = 0; r < 8; r++) {
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(wr[r] + k));
            v[r] = q8c_dot(v[r], ax, _mm256_sign_epi8(wv, x));
        }
    }
    return q8c_hsum8(v);
}

/* v[r] lane q = isum of quad q (q < nq; later lanes 0) of the 32 bytes at k of row r and x */
Q8C_INLINE void q8c_dot_chunk(__m256i v[8], const int8_t *const wr[8], const int8_t *xq, size_t k,
                              size_t nq, uintptr_t pf) {
    q8c_prefetch256(pf + 8 * k);
    const __m256i x = q8c_load_bytes(xq + k, nq);
    const __m256i ax = _mm256_abs_epi8(x);
    for (int r = 0; r < 8; r++)
        v[r] = q8c_dot(_mm256_setzero_si256(), ax,
                       _mm256_sign_epi8(q8c_load_bytes(wr[r] + k, nq), x));
}

/* Isums of groups [g0, g0 + gb) for any gs % 4 == 0, via quads; is[j] lane = row. */
Q8C_INLINE void q8c_isum_quads(__m256i is[8], const int8_t *const wr[8], const int8_t *xq,
                               size_t g0, size_t gb, size_t gs, uintptr_t pf) {
    const size_t qpg = gs / 4, k0 = g0 * gs, k1 = k0 + gb * gs;
    for (int j = 0; j < 8; j++) is[j] = _mm256_setzero_si256();
    size_t gi = 0, qi = 0;
    for (size_t k = k0; k < k1; k += 32) {
        const size_t nq = (k1 - k) / 4 < 8 ? (k1 - k) / 4 : 8;
        __m256i v[8];
        q8c_dot_chunk(v, wr, xq, k, nq, pf);
        q8c_tr8_epi32(v);
        for (size_t i = 0; i < nq; i++) {
            is[gi] = _mm256_add_epi32(is[gi], v[i]);
            if (++qi == qpg) {
                qi = 0;
                gi++;
            }
        }
    }
}

/* Isums of groups [g0, g0 + gb) (gb <= 8) for gs = 4, 8 or 16: one 32-byte dot per row holds
 * 8, 4 or 2 whole groups, which are separated and transposed to lane = row with in-lane
 * shuffles; is[j] lane = row. Lanes past the valid bytes (masked loads) give unused zeros. */
Q8C_INLINE void q8c_isum_small(__m256i is[8], const int8_t *const wr[8], const int8_t *xq,
                               size_t g0, size_t gb, size_t gs, uintptr_t pf) {
    const size_t k0 = g0 * gs, k1 = k0 + gb * gs;
    size_t j = 0;
    for (size_t k = k0; k < k1; k += 32) {
        const size_t nq = (k1 - k) / 4 < 8 ? (k1 - k) / 4 : 8;
        __m256i v[8];
        q8c_dot_chunk(v, wr, xq, k, nq, pf);
        if (gs == 4) { /* lane i of v[r] = group i of row r */
            q8c_tr8_epi32(v);
            for (int i = 0; i < 8; i++) is[j + i] = v[i];
            j += 8;
        } else if (gs == 8) { /* lanes 2i, 2i+1 = group i */
            const __m256i a = q8c_hpair(v[0], v[1]), b = q8c_hpair(v[2], v[3]);
            const __m256i c = q8c_hpair(v[4], v[5]), d = q8c_hpair(v[6], v[7]);
            /* 64-bit unit u of a: group u (0-1 | 2-3 by lane), rows 0-1 */
            const __m256i ab0 = _mm256_unpacklo_epi64(a, b), ab1 = _mm256_unpackhi_epi64(a, b);
            const __m256i cd0 = _mm256_unpacklo_epi64(c, d), cd1 = _mm256_unpackhi_epi64(c, d);
            is[j + 0] = _mm256_permute2x128_si256(ab0, cd0, 0x20);
            is[j + 1] = _mm256_permute2x128_si256(ab1, cd1, 0x20);
            is[j + 2] = _mm256_permute2x128_si256(ab0, cd0, 0x31);
            is[j + 3] = _mm256_permute2x128_si256(ab1, cd1, 0x31);
            j += 4;
        } else { /* gs == 16: 128-bit half h = group h */
            const __m256i e = q8c_hquad(q8c_hpair(v[0], v[1]), q8c_hpair(v[2], v[3]));
            const __m256i f = q8c_hquad(q8c_hpair(v[4], v[5]), q8c_hpair(v[6], v[7]));
            is[j + 0] = _mm256_permute2x128_si256(e, f, 0x20);
            is[j + 1] = _mm256_permute2x128_si256(e, f, 0x31);
            j += 2;
        }
    }
}

/* out[n] for n in [n0, n1), one activation row; gs % 4 == 0. */
Q8C_INLINE void q8c_gemv(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                         const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    const size_t ng = K / gs;
    for (size_t n = n0; n < n1; n += 8) {
        const size_t nr = n1 - n < 8 ? n1 - n : 8;
        const int8_t *wr[8];
        const float *sr[8];
        q8c_rows(wr, sr, w, ws, n, nr, K, ng);
        const uintptr_t pf = q8c_addr(w, (n + 8 * Q8C_PFD) * K);
        const uintptr_t pfs = q8c_addr(ws, (n + 8 * Q8C_PFD) * ng * sizeof(float));
        __m256 acc = _mm256_setzero_ps();
        for (size_t g0 = 0; g0 < ng; g0 += 8) {
            const size_t gb = ng - g0 < 8 ? ng - g0 : 8;
            __m256 st[8];
            q8c_load_scales(st, sr, g0, gb);
            q8c_prefetch256(pfs + 32 * g0); /* the scales of 8 groups of the 8 rows */
            if (gs % 32 == 0) {
                for (size_t j = 0; j < gb; j++) {
                    const __m256i is = q8c_isum_rows32(wr, xq, (g0 + j) * gs, gs, pf);
                    const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(is), st[j]),
                                                   _mm256_set1_ps(xs[g0 + j]));
                    acc = _mm256_add_ps(acc, p);
                }
            } else {
                __m256i is[8];
                if (gs == 4 || gs == 8 || gs == 16)
                    q8c_isum_small(is, wr, xq, g0, gb, gs, pf);
                else
                    q8c_isum_quads(is, wr, xq, g0, gb, gs, pf);
                for (size_t j = 0; j < gb; j++) {
                    const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(is[j]), st[j]),
                                                   _mm256_set1_ps(xs[g0 + j]));
                    acc = _mm256_add_ps(acc, p);
                }
            }
        }
        q8c_store_out(out + n, acc, nr);
    }
}

/* ---------------------------------------------------------------------------------------
 * GEMM: Q8C_MT activation rows x 16 weight rows per step (two ymm of 8 output rows per
 * activation row). For each tile of 16 weight rows and each K block, the rows are packed once
 * (transposed into quads: 32 bytes = the same 4-byte quad of 8 rows, so one int32 lane = one
 * output row) and reused by every activation row: per quad, one broadcast of the activation's
 * 4 bytes against the packed quad vector adds that quad's dot product to 8 rows' int32 lanes,
 * so no horizontal reduction is needed.
 *   AVX2: sign trick, u8 = |x| (copied once per activation tile and block), s8 = w * sign(x).
 *   AVX-VNNI: offset trick, u8 = x + 128 (x ^ 0x80, copied once per activation tile and
 *   block), s8 = w, and the int32 accumulator starts at -128 * sum(w over the group) (packed
 *   once): exact integer arithmetic (VPDPBUSD wraps, never saturates), and no VPSIGNB per
 *   product. x = -128 is handled exactly by both.
 * The scales of the rows are packed transposed too (one vector per group and 8 rows).
 * ------------------------------------------------------------------------------------- */

#define Q8C_NT 16 /* weight rows per GEMM tile: Q8C_NT / 8 vectors */

/* The packed layout, written once at load (q8c_pack_weights): per tile of 16 weight rows
 * (rows past N are zero), quad q of rows 8v .. 8v+7 at tile + 64 q + 32 v (the rows' 4-byte
 * quads transposed, so one int32 lane is one output row), K / 4 quads; for AVX-VNNI then the
 * offset-trick corrections, -128 * sum(w) of group g of row 8v + r at int32 16 g + 8 v + r.
 * Groups the kernel does not tile (gs % 4 != 0, or a group above Q8C_KB bytes) keep the
 * row-major rows (a copy), which the fallbacks read. */
Q8C_INLINE int q8c_tiled(size_t gs) { return gs != 0 && gs % 4 == 0 && gs <= Q8C_KB; }

Q8C_INLINE size_t q8c_tile_bytes(size_t K, size_t gs) {
#if defined(__AVXVNNI__)
    return Q8C_NT * K + Q8C_NT * (K / gs) * sizeof(int32_t);
#else
    (void)gs;
    return Q8C_NT * K;
#endif
}

Q8C_INLINE size_t q8c_pack_size(size_t N, size_t K, size_t gs) {
    if (!q8c_tiled(gs)) return N * K;
    return (N + Q8C_NT - 1) / Q8C_NT * q8c_tile_bytes(K, gs);
}

Q8C_INLINE void q8c_pack_weights(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) {
    if (!q8c_tiled(gs)) {
        memcpy(dst, w, N * K);
        return;
    }
    const size_t tb = q8c_tile_bytes(K, gs);
    for (size_t n = 0; n < N; n += Q8C_NT) {
        int8_t *t = dst + n / Q8C_NT * tb;
        for (size_t r = 0; r < Q8C_NT; r++) {
            const int8_t *row = n + r < N ? w + (n + r) * K : NULL;
            for (size_t q = 0; q < K / 4; q++)
                for (size_t b = 0; b < 4; b++)
                    t[q * 64 + 32 * (r / 8) + 4 * (r % 8) + b] = row ? row[4 * q + b] : 0;
#if defined(__AVXVNNI__)
            int32_t *corr = (int32_t *)(void *)(t + Q8C_NT * K);
            for (size_t g = 0; g < K / gs; g++) {
                int32_t sum = 0;
                for (size_t k = 0; row && k < gs; k++) sum += row[g * gs + k];
                corr[g * Q8C_NT + r] = -128 * sum;
            }
#endif
        }
    }
}

typedef struct q8c_pack {
    const int8_t *w;  /* the block's packed quads: quad q of rows 8v..8v+7 at w + 64 q + 32 v */
#if defined(__AVXVNNI__)
    const int32_t *corr; /* the block's corrections: group g, row 8v + r at corr + 16 g + 8 v + r */
#endif
    _Alignas(32) int8_t x[Q8C_MT * Q8C_KB];   /* activation rows: x ^ 0x80 (VNNI) or |x| (AVX2) */
    _Alignas(32) float st[Q8C_NT * Q8C_GB];   /* scale of group g, rows: st + 16 g + 8 v */
} q8c_pack;

/* Point pk at groups [gb0, gb0 + gc) of packed tile t and transpose the scales of its 8 * V
 * rows (sr) for them. */
Q8C_INLINE void q8c_pack_block(q8c_pack *pk, const int8_t *t, const float *const sr[Q8C_NT],
                               size_t V, size_t gb0, size_t gc, size_t gs, size_t K) {
    pk->w = t + gb0 * gs / 4 * 64;
#if defined(__AVXVNNI__)
    pk->corr = (const int32_t *)(const void *)(t + Q8C_NT * K) + gb0 * Q8C_NT;
#else
    (void)K;
#endif
    for (size_t v = 0; v < V; v++) {
        for (size_t g = 0; g < gc; g += 8) {
            const size_t cnt = gc - g < 8 ? gc - g : 8;
            __m256 st[8];
            q8c_load_scales(st, sr + 8 * v, gb0 + g, cnt);
            for (size_t j = 0; j < cnt; j++) _mm256_store_ps(pk->st + (g + j) * 16 + 8 * v, st[j]);
        }
    }
}

/* MT activation rows x 8 * V packed rows (both compile-time) over one K block. */
Q8C_INLINE void q8c_gemm_mk(const size_t MT, const size_t V, q8c_pack *pk, float *out,
                            size_t ldo, const int8_t *xq, const float *xs, size_t K, size_t ng,
                            size_t gb0, size_t gc, size_t gs, int first, size_t nr) {
    const size_t qpg = gs / 4, k0 = gb0 * gs, kb = gc * gs;
    const size_t nv[2] = {nr < 8 ? nr : 8, nr > 8 ? nr - 8 : 0};
    __m256 acc[Q8C_MT][2];
    for (size_t i = 0; i < MT; i++)
        for (size_t v = 0; v < V; v++)
            acc[i][v] = first ? _mm256_setzero_ps() : q8c_load_out(out + i * ldo + 8 * v, nv[v]);
    /* the activation rows of this block, transformed once for all weight rows */
    for (size_t i = 0; i < MT; i++) {
        for (size_t k = 0; k < kb; k += 32) {
            const size_t nq = (kb - k) / 4 < 8 ? (kb - k) / 4 : 8;
            const __m256i x = q8c_load_bytes(xq + i * K + k0 + k, nq);
#if defined(__AVXVNNI__)
            const __m256i t = _mm256_xor_si256(x, _mm256_set1_epi8((char)0x80));
#else
            const __m256i t = _mm256_abs_epi8(x);
#endif
            _mm256_store_si256((__m256i *)(pk->x + i * Q8C_KB + k), t);
        }
    }
    for (size_t g = 0; g < gc; g++) {
        const int8_t *wq = pk->w + g * qpg * 64;
        const size_t kg = g * gs;
        __m256i a[Q8C_MT][2];
        for (size_t i = 0; i < MT; i++)
            for (size_t v = 0; v < V; v++) {
#if defined(__AVXVNNI__)
                a[i][v] = _mm256_loadu_si256((const __m256i *)(pk->corr + g * 16 + 8 * v));
#else
                a[i][v] = _mm256_setzero_si256();
#endif
            }
        _Pragma("GCC unroll 2") for (size_t q = 0; q < qpg; q++) {
            __m256i wv[2];
            for (size_t v = 0; v < V; v++) wv[v] = _mm256_load_si256((const __m256i *)(wq + q * 64 + 32 * v));
            for (size_t i = 0; i < MT; i++) {
                const __m256i bu = q8c_bcast4(pk->x + i * Q8C_KB + kg + 4 * q);
#if defined(__AVXVNNI__)
                for (size_t v = 0; v < V; v++) a[i][v] = q8c_dot(a[i][v], bu, wv[v]);
#else
                const __m256i bx = q8c_bcast4(xq + i * K + k0 + kg + 4 * q);
                for (size_t v = 0; v < V; v++)
                    a[i][v] = q8c_dot(a[i][v], bu, _mm256_sign_epi8(wv[v], bx));
#endif
            }
        }
        for (size_t i = 0; i < MT; i++) {
            const __m256 xsg = _mm256_set1_ps(xs[i * ng + gb0 + g]);
            for (size_t v = 0; v < V; v++) {
                const __m256 sg = _mm256_load_ps(pk->st + g * 16 + 8 * v);
                const __m256 p = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(a[i][v]), sg), xsg);
                acc[i][v] = _mm256_add_ps(acc[i][v], p);
            }
        }
    }
    for (size_t i = 0; i < MT; i++)
        for (size_t v = 0; v < V; v++) q8c_store_out(out + i * ldo + 8 * v, acc[i][v], nv[v]);
}

/* All activation rows against one packed block of 8 * V weight rows. */
Q8C_INLINE void q8c_gemm_block(const size_t V, q8c_pack *pk, float *out, size_t ldo,
                               const int8_t *xq, const float *xs, size_t M, size_t K, size_t ng,
                               size_t gb0, size_t gc, size_t gs, size_t nr) {
    const int first = gb0 == 0;
    size_t m = 0;
    for (; m + Q8C_MT <= M; m += Q8C_MT)
        q8c_gemm_mk(Q8C_MT, V, pk, out + m * ldo, ldo, xq + m * K, xs + m * ng, K, ng, gb0, gc,
                    gs, first, nr);
    float *o = out + m * ldo;
    const int8_t *x = xq + m * K;
    const float *s = xs + m * ng;
    switch (M - m) {
    case 3: q8c_gemm_mk(3, V, pk, o, ldo, x, s, K, ng, gb0, gc, gs, first, nr); break;
    case 2: q8c_gemm_mk(2, V, pk, o, ldo, x, s, K, ng, gb0, gc, gs, first, nr); break;
    case 1: q8c_gemm_mk(1, V, pk, o, ldo, x, s, K, ng, gb0, gc, gs, first, nr); break;
    default: break;
    }
}

/* out[m * ldo + n] for m in [0, M), n in [n0, n1) (n0 a multiple of Q8C_NT) from the weights
 * q8c_pack_weights wrote to wp; q8c_tiled(gs). */
Q8C_INLINE void q8c_gemm(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                         const int8_t *wp, const float *ws, size_t n0, size_t n1, size_t K,
                         size_t gs) {
    const size_t ng = K / gs, tb = q8c_tile_bytes(K, gs);
    size_t gpb = Q8C_KB / gs;
    if (gpb > Q8C_GB) gpb = Q8C_GB;
    q8c_pack pk;
    for (size_t n = n0; n < n1; n += Q8C_NT) {
        const size_t nr = n1 - n < Q8C_NT ? n1 - n : Q8C_NT;
        const int8_t *t = wp + n / Q8C_NT * tb, *wr[Q8C_NT];
        const float *sr[Q8C_NT];
        q8c_rows(wr, sr, wp, ws, n, nr < 8 ? nr : 8, 0, ng); /* scales only */
        if (nr > 8) q8c_rows(wr + 8, sr + 8, wp, ws, n + 8, nr - 8, 0, ng);
        for (size_t gb0 = 0; gb0 < ng; gb0 += gpb) {
            const size_t gc = ng - gb0 < gpb ? ng - gb0 : gpb;
            if (nr > 8) {
                q8c_pack_block(&pk, t, sr, 2, gb0, gc, gs, K);
                q8c_gemm_block(2, &pk, out + n, ldo, xq, xs, M, K, ng, gb0, gc, gs, nr);
            } else {
                q8c_pack_block(&pk, t, sr, 1, gb0, gc, gs, K);
                q8c_gemm_block(1, &pk, out + n, ldo, xq, xs, M, K, ng, gb0, gc, gs, nr);
            }
        }
    }
}

#endif
