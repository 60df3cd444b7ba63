/* legacy_gemv_x86.h - the x86 legacy-block GEMV body (legacy/ *_gemv_1x8_avx2.c,
 * *_gemv_1x8_avx_vnni.c, *_gemv_1x4_avx512_vnni.c; Q8_0's 256-bit GEMVs are
 * legacy_q80_avx2.h's): one source compiled per ISA. Decode reads
 * far more weight bytes than any cache holds, so the order of the reads sets the speed: cold on
 * Zen 5 at 1 thread, loads alone in 16 row streams advancing one block each read ~22 GB/s
 * whatever the prefetch, the same loads over 4 rows (or 1) ~30 GB/s; no prefetch halves it.
 *  - AVX512-VNNI: a tile is 4 rows, read 4 blocks at a time (4 streams). A row's 4 blocks are
 *    one 64-byte load and one masked short one; word permutes (VPERMT2W; every field offset is
 *    even) put block g's 16 nibble bytes in lane g and its d, m (and qh) in place, so a block
 *    costs half a load per row instead of two 16-byte loads and inserts. The low nibbles
 *    (values 0..15) and the high ones (16..31) meet the activation's halves of block g in
 *    lane g by two VPDPBUSD; two unpack-and-add levels over the 4 rows leave row i's block g
 *    sum in word i of lane g, the float step runs on 16 (row, block) pairs at once, and each
 *    row's chain of additions is kept by adding lane 0, 1, 2, 3 in turn.
 *    Q8_0 runs the same tiles, prefetch and fold with a step of its own (iflg_step80).
 *  - AVX2 / AVX-VNNI: a tile is 8 rows, a vector holds 2 rows' 16 nibble bytes of one block
 *    (group g: rows g, 4 + g), products by VPDPBUSD or VPMADDUBSW twice + VPADDW + VPMADDWD (at
 *    most 2 * 2 * 31 * 128 per int16, no saturation), two unpack-and-add levels leave row r in
 *    int32 lane r; the scales are gathered by byte shuffles. This body runs at its instruction
 *    limit (in L2 as fast as cold), so fewer streams (2 or 4 rows, 4 blocks a step, more
 *    instructions per byte) measured 5-15 % slower.
 * Bit 4 of the five-bit types is a byte mask from qh. The float step is the scalar kernel's,
 * lane-wise, on exact int32 block sums, so every result equals ifl_row's bit for bit. The
 * tiles ahead are prefetched into L2, a step's share per step (iflg_gemv); for the 512-bit
 * body T0 and NTA measured within noise of T1, 8 to 64 KiB ahead alike, 4 KiB ~20 % slower. */
#ifndef IF_LEGACY_GEMV_X86_H
#define IF_LEGACY_GEMV_X86_H

#include "kquant_avx2.h"
#include "legacy_common.h"

/* Bytes ahead the prefetch runs, rounded up to whole tiles. */
#ifndef IFLG_PF_BYTES
#define IFLG_PF_BYTES 16384
#endif
#ifndef IFLG_PF_HINT
#define IFLG_PF_HINT _MM_HINT_T1
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define IFLG_ROWS 4
#else
#define IFLG_ROWS 8
#endif

/* Tile rows at n (rows past n1 repeat the last: read, never stored); returns how many are
 * real. */
IFY_INLINE size_t iflg_rows(const uint8_t *rows[IFLG_ROWS], const uint8_t *w, size_t rowbytes,
                            size_t n, size_t n1) {
    const size_t nr = n1 - n < IFLG_ROWS ? n1 - n : IFLG_ROWS;
    for (size_t r = 0; r < IFLG_ROWS; r++) rows[r] = w + (n + (r < nr ? r : nr - 1)) * rowbytes;
    return nr;
}

/* Prefetch the lines that start in [p, p + n), none at or past end (each line once). */
IFY_INLINE void iflg_pf(const uint8_t *p, size_t n, const uint8_t *end) {
    if (!p) return;
    uintptr_t a = ((uintptr_t)p + 63) & ~(uintptr_t)63;
    const uintptr_t e = (uintptr_t)(p + n) < (uintptr_t)end ? (uintptr_t)(p + n) : (uintptr_t)end;
    for (; a < e; a += 64) _mm_prefetch((const char *)a, IFLG_PF_HINT);
}

/* The activation's per-block int32 sums xsum[2b] + xsum[2b + 1] of nk (1..4) blocks at b. */
IFY_INLINE __m128i iflg_xs4(const int16_t *xsum, size_t b, int nk) {
    const __m128i m = _mm_cmpgt_epi32(_mm_set1_epi32(nk), _mm_setr_epi32(0, 1, 2, 3));
    const __m128i v = nk == 4 ? _mm_loadu_si128((const __m128i *)(const void *)(xsum + 2 * b))
                              : _mm_maskload_epi32((const int *)(const void *)(xsum + 2 * b), m);
    return _mm_madd_epi16(v, _mm_set1_epi16(1));
}

/* xd of nk (1..4) blocks at b, zeros past them. */
IFY_INLINE __m128 iflg_xd4(const float *xd, size_t b, int nk) {
    const __m128i m = _mm_cmpgt_epi32(_mm_set1_epi32(nk), _mm_setr_epi32(0, 1, 2, 3));
    return nk == 4 ? _mm_loadu_ps(xd + b) : _mm_maskload_ps(xd + b, m);
}

#if IFLG_ROWS == 4

/* Word-permute controls over a row's 128 bytes from a step's first block (words 0..63): per
 * output word p, the word at byte offset off / 2, for the nibbles (which 0), d and m (1), qh
 * (2), or d and m from a pair of rows' first 64 bytes each (3). */
IFY_INLINE __m512i iflg_ix(ifl_type t, int which) {
    _Alignas(64) int16_t ix[32];
    for (int p = 0; p < 32; p++) {
        size_t off;
        if (which == 0) /* the nibbles: lane g holds block g's 16 bytes */
            off = (size_t)(p / 8) * t.bb + t.qs + 2 * (size_t)(p % 8);
        else if (which == 1) /* d (p < 16) and m (p >= 16) of block (p % 16) / 4 */
            off = (size_t)((p % 16) / 4) * t.bb + (p < 16 ? 0 : 2);
        else if (which == 3) /* the same from a pair of rows' first 64 bytes: odd rows' second */
            off = (size_t)((p % 16) / 4) * t.bb + (p < 16 ? 0 : 2) + (p % 2 ? 64 : 0);
        else /* qh: words 0..3 the low halves of blocks 0..3, words 4..7 the high halves */
            off = (size_t)(p % 4) * t.bb + t.qh + (p % 8 < 4 ? 0 : 2);
        ix[p] = (int16_t)(off / 2);
    }
    return _mm512_load_si512((const void *)ix);
}

/* A row's bytes of nk (1..4) blocks at p as two vectors, zeros past them (never read). */
IFY_INLINE void iflg_row(ifl_type t, const uint8_t *p, int nk, __m512i *z0, __m512i *z1) {
    const size_t n = (size_t)nk * t.bb;
    *z0 = n >= 64 ? _mm512_loadu_si512((const void *)p)
                  : _mm512_maskz_loadu_epi8((__mmask64)((1ull << n) - 1), (const void *)p);
    *z1 = n > 64 ? _mm512_maskz_loadu_epi8((__mmask64)((1ull << (n - 64)) - 1),
                                           (const void *)(p + 64))
                 : _mm512_setzero_si512();
}

/* One step: nk (1..4) blocks at b of the 4 rows into acc (row i in lane i). Lane g of a row's
 * vector is block b + g, so the 4 blocks come from one 64-byte load and one short one. */
IFY_INLINE __m128 iflg_step(ifl_type t, __m128 acc, const uint8_t *const rows[4],
                            const int8_t *xq, const float *xd, const int16_t *xsum, size_t b,
                            int nk, __m512i qix, __m512i hix, __m512i qhix) {
    const __m512i m4 = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
    const __mmask64 kx = nk == 4 ? ~(__mmask64)0 : (__mmask64)((1ull << (32 * nk % 64)) - 1);
    const __m512i x0 = nk >= 2 ? _mm512_loadu_si512((const void *)(xq + b * IF_QL))
                               : _mm512_maskz_loadu_epi8(kx, (const void *)(xq + b * IF_QL));
    const __m512i x1 =
        nk == 4   ? _mm512_loadu_si512((const void *)(xq + b * IF_QL + 64))
        : nk == 3 ? _mm512_maskz_loadu_epi8(kx, (const void *)(xq + b * IF_QL + 64))
                  : _mm512_setzero_si512();
    const __m512i xlo = _mm512_shuffle_i64x2(x0, x1, 0x88);
    const __m512i xhi = _mm512_shuffle_i64x2(x0, x1, 0xdd);
    /* The 4 blocks' d and m lie in a row's first 64 bytes for Q4_0, Q4_1: then one permute per
     * pair of rows gathers them, else one per row. */
    const int pairs = 3 * t.bb + 4 <= 64;
    __m512i a[4], z[4], hd = _mm512_setzero_si512();
    IFY_UNROLL
    for (int i = 0; i < 4; i++) {
        __m512i z1;
        iflg_row(t, rows[i] + b * t.bb, nk, &z[i], &z1);
        const __m512i z0 = z[i];
        const __m512i q = _mm512_permutex2var_epi16(z0, qix, z1);
        if (!pairs)
            hd = _mm512_mask_mov_epi16(hd, (__mmask32)(0x11111111u << i),
                                       _mm512_permutex2var_epi16(z0, hix, z1));
        __m512i lo = _mm512_and_si512(q, m4);
        __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        if (t.qh) {
            const __m128i qh = _mm512_castsi512_si128(_mm512_permutex2var_epi16(z0, qhix, z1));
            lo = _mm512_mask_add_epi8(lo, (__mmask64)_mm_cvtsi128_si64(qh), lo, sixteen);
            hi = _mm512_mask_add_epi8(hi, (__mmask64)_mm_extract_epi64(qh, 1), hi, sixteen);
        }
        a[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi,
                                   xhi);
    }
    if (pairs)
        hd = _mm512_mask_blend_epi16((__mmask32)0xccccccccu,
                                     _mm512_permutex2var_epi16(z[0], hix, z[1]),
                                     _mm512_permutex2var_epi16(z[2], hix, z[3]));
    /* Word i of lane g: row i's block b + g. */
    const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]),
                                        _mm512_unpackhi_epi32(a[0], a[1]));
    const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]),
                                        _mm512_unpackhi_epi32(a[2], a[3]));
    __m512i dot = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m128i xs4 = iflg_xs4(xsum, b, nk);
    const __m512 xdb =
        _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(iflg_xd4(xd, b, nk)));
    const __m512 d = _mm512_cvtph_ps(_mm512_castsi512_si256(hd));
    if (!t.min)
        dot = _mm512_sub_epi32(
            dot, _mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(_mm_mullo_epi32(
                                                      xs4, _mm_set1_epi32(t.qh ? 16 : 8)))));
    const __m512 u = _mm512_mul_ps(_mm512_mul_ps(d, xdb), _mm512_cvtepi32_ps(dot));
    __m512 v = u;
    if (t.min)
        v = _mm512_mul_ps(
            _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(hd, 1)), xdb),
            _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(spread, _mm512_castsi128_si512(xs4))));
    acc = _mm_add_ps(acc, _mm512_castps512_ps128(u));
    if (t.min) acc = _mm_add_ps(acc, _mm512_castps512_ps128(v));
    if (nk > 1) {
        acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(u, 1));
        if (t.min) acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(v, 1));
    }
    if (nk > 2) {
        acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(u, 2));
        if (t.min) acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(v, 2));
    }
    if (nk > 3) {
        acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(u, 3));
        if (t.min) acc = _mm_add_ps(acc, _mm512_extractf32x4_ps(v, 3));
    }
    return acc;
}

/* Word-permute controls over a row's bytes from a step's first block: the values of blocks
 * 2 h, 2 h + 1 from the pair of vectors starting at byte 64 h (which 0, 1), or the f16 scale
 * of block g in word 4 g + i for row i (which 2; the other words repeat it, masked off). */
IFY_INLINE __m512i iflg_ix80(int which) {
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
IFY_INLINE __mmask64 iflg_mask(size_t n) {
    return n >= 64 ? ~(__mmask64)0 : (__mmask64)((1ull << n) - 1);
}

/* Q8_0's step: nk (1..4) blocks at b of the 4 rows into acc (row i in lane i). Cold on Zen 5
 * at 1 thread, loads alone in 8 row streams of 32 bytes advancing one block each (the 256-bit
 * body's order, legacy_q80_avx2.h) read 20-28 GB/s, 4 row streams of 64-byte loads advancing 4
 * blocks 27-30 GB/s, and this step needs fewer instructions per byte (one copy re-read: 5-17 %
 * faster). A row's step is two 64-byte loads and one 8-byte one (4 blocks of 34 bytes); two
 * word permutes (VPERMT2W; every block's values start at an even offset) put blocks 0, 1 and
 * 2, 3 each in one vector beside the activation's contiguous 64 bytes, a third gathers the 4
 * f16 scales. VPDPBUSD on value + 128 (the sign bit flipped, never saturating) less 128 times
 * the block's activation sum is the exact int32 dot; unpack-and-add levels leave row i's block
 * g dot in word i of lane g, and the float step and the fold in block order are the 4-bit
 * types', so every result equals ifl_row_q80's bit for bit. */
IFY_INLINE __m128 iflg_step80(__m128 acc, const uint8_t *const rows[4], const int8_t *xq,
                            const float *xd, const int16_t *xsum, size_t b, int nk, __m512i ix0,
                            __m512i ix1, __m512i ixd) {
    const size_t n = (size_t)nk * IF_Q80_BLOCK_BYTES, nx = (size_t)nk * IF_QL;
    const int8_t *xp = xq + b * IF_QL;
    const __m512i x01 = nk >= 2 ? _mm512_loadu_si512((const void *)xp)
                                : _mm512_maskz_loadu_epi8(iflg_mask(nx), (const void *)xp);
    const __m512i x23 =
        nk == 4   ? _mm512_loadu_si512((const void *)(xp + 64))
        : nk == 3 ? _mm512_maskz_loadu_epi8(iflg_mask(nx - 64), (const void *)(xp + 64))
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
            z0 = _mm512_maskz_loadu_epi8(iflg_mask(n), (const void *)p);
            z1 = n > 64 ? _mm512_maskz_loadu_epi8(iflg_mask(n - 64), (const void *)(p + 64))
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
    const __m128i xs4 = iflg_xs4(xsum, b, nk);
    const __m128 xd4 = iflg_xd4(xd, b, nk);
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

IFY_INLINE void iflg_tile(ifl_type t, float *out, size_t nr, const uint8_t *const rows[4],
                          const int8_t *xq, const float *xd, const int16_t *xsum, size_t nb,
                          const uint8_t *next, const uint8_t *end) {
    /* Q8_0 (int8 values, no nibbles) has its own step and permutes; t is a constant in each
     * kernel file, so the choice is made at compile time. */
    const int q80 = t.bb == IF_Q80_BLOCK_BYTES;
    const __m512i qix = q80 ? iflg_ix80(0) : iflg_ix(t, 0);
    const __m512i hix = q80 ? iflg_ix80(1) : iflg_ix(t, 3 * t.bb + 4 <= 64 ? 3 : 1);
    const __m512i qhix = q80 ? iflg_ix80(2) : t.qh ? iflg_ix(t, 2) : _mm512_setzero_si512();
    __m128 acc = _mm_setzero_ps();
    size_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        iflg_pf(next ? next + b * 4 * t.bb : NULL, 16 * t.bb, end);
        acc = q80 ? iflg_step80(acc, rows, xq, xd, xsum, b, 4, qix, hix, qhix)
                  : iflg_step(t, acc, rows, xq, xd, xsum, b, 4, qix, hix, qhix);
    }
    if (b < nb)
        acc = q80 ? iflg_step80(acc, rows, xq, xd, xsum, b, (int)(nb - b), qix, hix, qhix)
                  : iflg_step(t, acc, rows, xq, xd, xsum, b, (int)(nb - b), qix, hix, qhix);
    _mm_mask_storeu_ps(out, (__mmask8)((1u << nr) - 1), acc);
}

#else

/* Two rows' 16 bytes at offset off (group g: rows g, 4 + g in lanes 0, 1). */
IFY_INLINE __m256i iflg_load2(const uint8_t *const rows[8], int g, size_t off) {
    return _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(const void *)(rows[4 + g] + off)),
                            _mm_loadu_si128((const __m128i *)(const void *)(rows[g] + off)));
}

IFY_INLINE __m256i iflg_dot(__m256i lo, __m256i xlo, __m256i hi, __m256i xhi) {
#if defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), lo, xlo), hi,
                                   xhi);
#else
    return _mm256_madd_epi16(
        _mm256_add_epi16(_mm256_maddubs_epi16(lo, xlo), _mm256_maddubs_epi16(hi, xhi)),
        _mm256_set1_epi16(1));
#endif
}

/* The low 16 bits of each int32 lane as f16 -> float, exactly as ifk_f16. */
IFY_INLINE __m256 iflg_f16(__m256i x) {
    return ifky_f16_dw(_mm256_and_si256(x, _mm256_set1_epi32(0xffff)));
}

/* A VPSHUFB control that moves bytes o..o+3 of each lane into int32 slot g, zeroing the rest. */
IFY_INLINE __m256i iflg_slot(int g, int o) {
    _Alignas(32) int8_t c[32];
    for (int j = 0; j < 32; j++) c[j] = (int8_t)((j % 16) / 4 == g ? o + j % 4 : -128);
    return _mm256_load_si256((const __m256i *)(const void *)c);
}

/* 0 or 16 per byte: bit j of the 16-bit qh word at byte o of each lane's row, byte j. */
IFY_INLINE __m256i iflg_bit4(__m256i h, int o) {
    const __m256i spread = _mm256_setr_epi8(
        (char)o, (char)o, (char)o, (char)o, (char)o, (char)o, (char)o, (char)o, (char)(o + 1),
        (char)(o + 1), (char)(o + 1), (char)(o + 1), (char)(o + 1), (char)(o + 1), (char)(o + 1),
        (char)(o + 1), (char)o, (char)o, (char)o, (char)o, (char)o, (char)o, (char)o, (char)o,
        (char)(o + 1), (char)(o + 1), (char)(o + 1), (char)(o + 1), (char)(o + 1), (char)(o + 1),
        (char)(o + 1), (char)(o + 1));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i s = _mm256_and_si256(_mm256_shuffle_epi8(h, spread), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(s, bit), _mm256_set1_epi8(16));
}

IFY_INLINE void iflg_tile(ifl_type t, float *out, size_t nr, const uint8_t *const rows[8],
                          const int8_t *xq, const float *xd, const int16_t *xsum, size_t nb,
                          const uint8_t *next, const uint8_t *end) {
    (void)end;
    const int32_t z = t.qh ? 16 : 8;
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i c0 = iflg_slot(0, 0), c1 = iflg_slot(1, 0), c2 = iflg_slot(2, 0),
                  c3 = iflg_slot(3, 0);
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        if (next) ifky_prefetch(next + b * 8 * t.bb, 8 * t.bb);
        const size_t o = b * t.bb;
        const __m256i xlo = _mm256_broadcastsi128_si256(
            _mm_loadu_si128((const __m128i *)(const void *)(xq + b * IF_QL)));
        const __m256i xhi = _mm256_broadcastsi128_si256(
            _mm_loadu_si128((const __m128i *)(const void *)(xq + b * IF_QL + 16)));
        __m256i h[4], a[4];
        IFY_UNROLL
        for (int g = 0; g < 4; g++) {
            h[g] = iflg_load2(rows, g, o);
            const __m256i q = iflg_load2(rows, g, o + t.qs);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (t.qh) {
                lo = _mm256_or_si256(lo, iflg_bit4(h[g], (int)t.qh));
                hi = _mm256_or_si256(hi, iflg_bit4(h[g], (int)t.qh + 2));
            }
            a[g] = iflg_dot(lo, xlo, hi, xhi);
        }
        const __m256i t0 = _mm256_add_epi32(_mm256_unpacklo_epi32(a[0], a[1]),
                                            _mm256_unpackhi_epi32(a[0], a[1]));
        const __m256i t1 = _mm256_add_epi32(_mm256_unpacklo_epi32(a[2], a[3]),
                                            _mm256_unpackhi_epi32(a[2], a[3]));
        __m256i dot =
            _mm256_add_epi32(_mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1));
        /* Lane r = row r's head words 0, 1 (d, and m for the min types). */
        const __m256i dm = _mm256_or_si256(
            _mm256_or_si256(_mm256_shuffle_epi8(h[0], c0), _mm256_shuffle_epi8(h[1], c1)),
            _mm256_or_si256(_mm256_shuffle_epi8(h[2], c2), _mm256_shuffle_epi8(h[3], c3)));
        const int32_t xs = (int32_t)xsum[2 * b] + xsum[2 * b + 1];
        const __m256 xdb = _mm256_set1_ps(xd[b]);
        if (!t.min) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(z * xs));
        acc = _mm256_add_ps(
            acc, _mm256_mul_ps(_mm256_mul_ps(iflg_f16(dm), xdb), _mm256_cvtepi32_ps(dot)));
        if (t.min) {
            const __m256 m = iflg_f16(_mm256_srli_epi32(dm, 16));
            acc = _mm256_add_ps(acc,
                                _mm256_mul_ps(_mm256_mul_ps(m, xdb), _mm256_set1_ps((float)xs)));
        }
    }
    ifky_store(out, acc, nr);
}

#endif

/* The GEMV over rows [n0, n1) in tiles of IFLG_ROWS rows. The 512-bit body prefetches the
 * tile IFLG_PF_BYTES ahead (whole tiles, at least one), clipped at the end; the 256-bit body,
 * at its instruction limit, keeps the cheapest form: two tiles ahead, whole tiles only. */
IFY_INLINE void iflg_gemv(ifl_type t, float *out, const int8_t *xq, const float *xd,
                          const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL, rowbytes = nb * t.bb, tile = IFLG_ROWS * rowbytes;
#if IFLG_ROWS == 4
    const size_t ahead = IFLG_ROWS * ((IFLG_PF_BYTES + tile - 1) / tile), room = 1;
#else
    const size_t ahead = 2 * IFLG_ROWS, room = IFLG_ROWS;
    (void)tile;
#endif
    const uint8_t *end = w + n1 * rowbytes;
    for (size_t n = n0; n < n1; n += IFLG_ROWS) {
        const uint8_t *rows[IFLG_ROWS];
        const size_t nr = iflg_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = n + ahead + room <= n1 ? w + (n + ahead) * rowbytes : NULL;
        iflg_tile(t, out + n, nr, rows, xq, xd, xsum, nb, next, end);
    }
}

#endif
