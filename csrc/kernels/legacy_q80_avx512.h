/* legacy_q80_avx512.h - the AVX512-VNNI Q8_0 GEMV body (legacy/q80_gemv_1x4_avx512_vnni.c) on
 * the file's 34-byte blocks. Decode reads far more weight bytes than any cache holds, so the
 * order of the reads sets the speed: cold on Zen 5 at 1 thread, loads alone in 8 row streams of
 * 32 bytes advancing one block each (the 256-bit body's order) read 20-28 GB/s, 4 row streams
 * of 64-byte loads advancing 4 blocks 27-30 GB/s, and this body also needs fewer instructions
 * per byte (one copy re-read: 5-17 % faster), so a tile is 4 rows read 4 blocks (136 bytes) a
 * step, the tiles 16 KiB ahead prefetched into L2. A row's step is two 64-byte loads and one
 * 8-byte one; two word permutes (VPERMT2W; every block's values start at an even offset) put
 * blocks 0, 1 and 2, 3 each in one vector beside the activation's contiguous 64 bytes, a third
 * gathers the 4 f16 scales. VPDPBUSD on value + 128 (the sign bit
 * flipped, never saturating) less 128 times the block's activation sum is the exact int32 dot;
 * unpack-and-add levels leave row i's block g dot in word i of lane g, the float step runs on
 * the 16 (row, block) pairs at once, and each row's chain of additions is kept in block order
 * by adding lane 0, 1, 2, 3 in turn, so every result equals ifl_row_q80's bit for bit. */
#ifndef IF_LEGACY_Q80_AVX512_H
#define IF_LEGACY_Q80_AVX512_H

#include "kquant_avx2.h"
#include "legacy_common.h"

/* Bytes ahead the prefetch runs, rounded up to whole tiles. */
#ifndef IFLZ_PF_BYTES
#define IFLZ_PF_BYTES 16384
#endif
#ifndef IFLZ_PF_HINT
#define IFLZ_PF_HINT _MM_HINT_T1
#endif

/* Word-permute controls over a row's bytes from a step's first block: the values of blocks
 * 2 h, 2 h + 1 from the pair of vectors starting at byte 64 h (which 0, 1), or the f16 scale
 * of block g in word 4 g + i for row i (which 2; the other words repeat it, masked off). */
IFY_INLINE __m512i iflz_ix(int which) {
    _Alignas(64) int16_t ix[32];
    for (int p = 0; p < 32; p++) {
        size_t off;
        if (which < 2)
            off = (size_t)(2 * which + p / 16) * IF_Q80_BLOCK_BYTES + 2 + 2 * (size_t)(p % 16) -
                  64 * (size_t)which;
        else
            off = (size_t)((p % 16) / 4) * IF_Q80_BLOCK_BYTES;
        ix[p] = (int16_t)(off / 2);
    }
    return _mm512_load_si512((const void *)ix);
}

/* Byte mask of the first n (0..64) bytes. */
IFY_INLINE __mmask64 iflz_mask(size_t n) {
    return n >= 64 ? ~(__mmask64)0 : (__mmask64)((1ull << n) - 1);
}

/* One step: nk (1..4) blocks at b of the 4 rows into acc (row i in lane i). */
IFY_INLINE __m128 iflz_step(__m128 acc, const uint8_t *const rows[4], const int8_t *xq,
                            const float *xd, const int16_t *xsum, size_t b, int nk, __m512i ix0,
                            __m512i ix1, __m512i ixd) {
    const size_t n = (size_t)nk * IF_Q80_BLOCK_BYTES, nx = (size_t)nk * IF_QL;
    const int8_t *xp = xq + b * IF_QL;
    const __m512i x01 = nk >= 2 ? _mm512_loadu_si512((const void *)xp)
                                : _mm512_maskz_loadu_epi8(iflz_mask(nx), (const void *)xp);
    const __m512i x23 =
        nk == 4   ? _mm512_loadu_si512((const void *)(xp + 64))
        : nk == 3 ? _mm512_maskz_loadu_epi8(iflz_mask(nx - 64), (const void *)(xp + 64))
                  : _mm512_setzero_si512();
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i a01[4], a23[4], hd = _mm512_setzero_si512();
    IFY_UNROLL
    for (int i = 0; i < 4; i++) {
        const uint8_t *p = rows[i] + b * IF_Q80_BLOCK_BYTES;
        __m512i z0, z1, z2;
        if (nk == 4) {
            z0 = _mm512_loadu_si512((const void *)p);
            z1 = _mm512_loadu_si512((const void *)(p + 64));
            z2 = _mm512_zextsi128_si512(_mm_loadl_epi64((const __m128i *)(const void *)(p + 128)));
        } else {
            z0 = _mm512_maskz_loadu_epi8(iflz_mask(n), (const void *)p);
            z1 = n > 64 ? _mm512_maskz_loadu_epi8(iflz_mask(n - 64), (const void *)(p + 64))
                        : _mm512_setzero_si512();
            z2 = _mm512_setzero_si512();
        }
        const __m512i u01 = _mm512_xor_si512(_mm512_permutex2var_epi16(z0, ix0, z1), flip);
        hd = _mm512_mask_mov_epi16(hd, (__mmask32)(0x1111u << i),
                                   _mm512_permutex2var_epi16(z0, ixd, z1));
        a01[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u01, x01);
        if (nk > 2) {
            const __m512i u23 = _mm512_xor_si512(_mm512_permutex2var_epi16(z1, ix1, z2), flip);
            a23[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u23, x23);
        } else {
            a23[i] = _mm512_setzero_si512();
        }
    }
    /* Per pair of blocks: word i of each 128-bit lane is row i's quarter-block sum (lanes 0, 1
     * block 2 h, lanes 2, 3 block 2 h + 1); then the halves of each block meet in lane g. */
    __m512i s[2];
    IFY_UNROLL
    for (int h = 0; h < 2; h++) {
        const __m512i *a = h ? a23 : a01;
        const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]),
                                            _mm512_unpackhi_epi32(a[0], a[1]));
        const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]),
                                            _mm512_unpackhi_epi32(a[2], a[3]));
        s[h] = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    }
    __m512i dot = _mm512_add_epi32(_mm512_shuffle_i64x2(s[0], s[1], 0x88),
                                   _mm512_shuffle_i64x2(s[0], s[1], 0xdd));
    const __m128i m4 = _mm_cmpgt_epi32(_mm_set1_epi32(nk), _mm_setr_epi32(0, 1, 2, 3));
    const __m128i xsv =
        nk == 4 ? _mm_loadu_si128((const __m128i *)(const void *)(xsum + 2 * b))
                : _mm_maskload_epi32((const int *)(const void *)(xsum + 2 * b), m4);
    const __m128i xs4 = _mm_madd_epi16(xsv, _mm_set1_epi16(1));
    const __m128 xd4 = nk == 4 ? _mm_loadu_ps(xd + b) : _mm_maskload_ps(xd + b, m4);
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    dot = _mm512_sub_epi32(dot, _mm512_permutexvar_epi32(
                                    spread, _mm512_castsi128_si512(_mm_slli_epi32(xs4, 7))));
    const __m512 xdb = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(xd4));
    const __m512 d = _mm512_cvtph_ps(_mm512_castsi512_si256(hd));
    const __m512 u = _mm512_mul_ps(_mm512_mul_ps(d, xdb), _mm512_cvtepi32_ps(dot));
    acc = _mm_add_ps(acc, _mm512_castps512_ps128(u));
    if (nk > 1) acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(u, 1));
    if (nk > 2) acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(u, 2));
    if (nk > 3) acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(u, 3));
    return acc;
}

/* Prefetch (into L2 by default) the lines that start in [p, p + n), none at or past end. */
IFY_INLINE void iflz_pf(const uint8_t *p, size_t n, const uint8_t *end) {
    if (!p) return;
    uintptr_t a = ((uintptr_t)p + 63) & ~(uintptr_t)63;
    const uintptr_t e = (uintptr_t)(p + n) < (uintptr_t)end ? (uintptr_t)(p + n) : (uintptr_t)end;
    for (; a < e; a += 64) _mm_prefetch((const char *)a, IFLZ_PF_HINT);
}

IFY_INLINE void iflz_tile(float *out, size_t nr, const uint8_t *const rows[4], const int8_t *xq,
                          const float *xd, const int16_t *xsum, size_t nb, const uint8_t *next,
                          const uint8_t *end) {
    const __m512i ix0 = iflz_ix(0), ix1 = iflz_ix(1), ixd = iflz_ix(2);
    __m128 acc = _mm_setzero_ps();
    size_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        iflz_pf(next ? next + b * 4 * IF_Q80_BLOCK_BYTES : NULL, 16 * IF_Q80_BLOCK_BYTES, end);
        acc = iflz_step(acc, rows, xq, xd, xsum, b, 4, ix0, ix1, ixd);
    }
    if (b < nb) acc = iflz_step(acc, rows, xq, xd, xsum, b, (int)(nb - b), ix0, ix1, ixd);
    _mm_mask_storeu_ps(out, (__mmask8)((1u << nr) - 1), acc);
}

/* The GEMV over rows [n0, n1) in 4-row tiles (rows past n1 repeat the last: read, never
 * stored), the tile IFLZ_PF_BYTES ahead (whole tiles, at least one) prefetched, clipped at the
 * end. */
IFY_INLINE void iflz_gemv80(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                            const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL, rowbytes = nb * IF_Q80_BLOCK_BYTES, tile = 4 * rowbytes;
    const size_t ahead = 4 * ((IFLZ_PF_BYTES + tile - 1) / tile);
    const uint8_t *end = w + n1 * rowbytes;
    for (size_t n = n0; n < n1; n += 4) {
        const size_t nr = n1 - n < 4 ? n1 - n : 4;
        const uint8_t *rows[4];
        for (size_t r = 0; r < 4; r++) rows[r] = w + (n + (r < nr ? r : nr - 1)) * rowbytes;
        const uint8_t *next = n + ahead + 1 <= n1 ? w + (n + ahead) * rowbytes : NULL;
        iflz_tile(out + n, nr, rows, xq, xd, xsum, nb, next, end);
    }
}

#endif
