/* legacy_gemv_x86.h - the x86 legacy-block GEMV body (legacy/ *_gemv_1x8_avx2.c,
 * *_gemv_1x8_avx_vnni.c, *_gemv_1x16_avx512_vnni.c): one source compiled per ISA. Decode reads
 * far more weight bytes than any cache holds, so the body is cut to few instructions per weight
 * byte: a vector holds P rows' 16 nibble bytes of one block (P = 4 rows in 512 bits under
 * AVX512-VNNI, 2 rows in 256 bits otherwise), a tile is 4 such groups (16 or 8 rows). Per group
 * and block the low nibbles (values 0..15) and the high ones (16..31) meet the activation's two
 * 16-byte halves broadcast to every 128-bit lane, both products summed into one int32 vector
 * (two VPDPBUSD, or VPMADDUBSW twice + one VPADDW + VPMADDWD: at most 2 * 2 * 31 * 128 per
 * int16, no saturation), so each row's 32 products sit in its lane's 4 int32 words. Group g's
 * lane i holds row 4i + g: two unpack-and-add levels over the 4 groups then leave row r in int32
 * lane r with no cross-lane move. The scales come from a 16-byte load at each row's block head
 * (d, m, qh), gathered into lane order by one word permute (VPERMT2W) or byte shuffles; bit 4 of
 * the five-bit types is a byte mask from qh. The float step is the scalar kernel's, lane-wise,
 * on exact int32 block sums, so every result equals ifl_row's bit for bit. The tile ahead is
 * prefetched into L2, a block's share per block. */
#ifndef IF_LEGACY_GEMV_X86_H
#define IF_LEGACY_GEMV_X86_H

#include "kquant_avx2.h"
#include "legacy_common.h"

/* Tiles ahead the prefetch runs (1, 2 and 4 measured equal within noise on Zen 5; 2 kept). */
#define IFLG_AHEAD 2
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define IFLG_ROWS 16
#else
#define IFLG_ROWS 8
#endif

/* Tile rows at n (group g's lane i is row 4i + g; rows past n1 repeat the last: read, never
 * stored); returns how many are real. */
IFY_INLINE size_t iflg_rows(const uint8_t *rows[IFLG_ROWS], const uint8_t *w, size_t rowbytes,
                            size_t n, size_t n1) {
    const size_t nr = n1 - n < IFLG_ROWS ? n1 - n : IFLG_ROWS;
    for (size_t r = 0; r < IFLG_ROWS; r++) rows[r] = w + (n + (r < nr ? r : nr - 1)) * rowbytes;
    return nr;
}

#if IFLG_ROWS == 16

/* A word-permute control over groups (g0, g0 + 1): out word p takes word w of the row at p, where
 * rows[p] gives that row (4i + g) for each of the 32 outputs; words of the other pair are 0. */
IFY_INLINE __m512i iflg_pick(const int8_t row[32], const int8_t word[32], int g0) {
    _Alignas(64) int16_t ix[32];
    for (int p = 0; p < 32; p++) {
        const int r = row[p], g = r % 4, i = r / 4;
        ix[p] = (int16_t)((g - g0 == 1 ? 32 : 0) + 8 * i + word[p]);
    }
    return _mm512_load_si512((const void *)ix);
}

/* 32 head words into lane order: groups 0, 1 by one VPERMT2W, groups 2, 3 by another, merged. */
IFY_INLINE __m512i iflg_gather(const __m512i h[4], __m512i i01, __m512i i23, __mmask32 k23) {
    return _mm512_mask_blend_epi16(k23, _mm512_permutex2var_epi16(h[0], i01, h[1]),
                                   _mm512_permutex2var_epi16(h[2], i23, h[3]));
}

IFY_INLINE __m128i iflg_ld(const uint8_t *p) {
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}

/* Four rows' 16 bytes at offset off as one vector (group g: rows g, 4 + g, 8 + g, 12 + g in
 * lanes 0..3). */
IFY_INLINE __m512i iflg_load4(const uint8_t *const rows[16], int g, size_t off) {
    __m512i v = _mm512_castsi128_si512(iflg_ld(rows[g] + off));
    v = _mm512_inserti32x4(v, iflg_ld(rows[4 + g] + off), 1);
    v = _mm512_inserti32x4(v, iflg_ld(rows[8 + g] + off), 2);
    return _mm512_inserti32x4(v, iflg_ld(rows[12 + g] + off), 3);
}

IFY_INLINE void iflg_tile(ifl_type t, float *out, size_t nr, const uint8_t *const rows[16],
                          const int8_t *xq, const float *xd, const int16_t *xsum, size_t nb,
                          const uint8_t *next) {
    const int32_t z = t.qh ? 16 : 8;
    /* Scale words: out p < 16 is row p's d, p >= 16 row p - 16's m (min types); qh words: out
     * 4g + i is the low qh word of row 4i + g, 16 + 4g + i its high word. */
    int8_t srow[32], sword[32], hrow[32], hword[32];
    for (int p = 0; p < 32; p++) {
        srow[p] = (int8_t)(p % 16);
        sword[p] = (int8_t)(p < 16 ? 0 : 1);
        hrow[p] = (int8_t)(4 * (p % 4) + (p % 16) / 4);
        hword[p] = (int8_t)(t.qh / 2 + (p < 16 ? 0 : 1));
    }
    __mmask32 ks = 0, kh = 0;
    for (int p = 0; p < 32; p++) {
        ks |= (__mmask32)(srow[p] % 4 >= 2) << p;
        kh |= (__mmask32)(hrow[p] % 4 >= 2) << p;
    }
    const __m512i s01 = iflg_pick(srow, sword, 0), s23 = iflg_pick(srow, sword, 2);
    const __m512i h01 = iflg_pick(hrow, hword, 0), h23 = iflg_pick(hrow, hword, 2);
    const __m512i m4 = _mm512_set1_epi8(15), sixteen = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        if (next) ifky_prefetch(next + b * 16 * t.bb, 16 * t.bb);
        const size_t o = b * t.bb;
        const __m512i xlo = _mm512_broadcast_i32x4(
            _mm_loadu_si128((const __m128i *)(const void *)(xq + b * IF_QL)));
        const __m512i xhi = _mm512_broadcast_i32x4(
            _mm_loadu_si128((const __m128i *)(const void *)(xq + b * IF_QL + 16)));
        __m512i a[4];
        __m512i h[4];
        IFY_UNROLL
        for (int g = 0; g < 4; g++) h[g] = iflg_load4(rows, g, o);
        _Alignas(64) uint64_t qm[8];
        if (t.qh) _mm512_store_si512((void *)qm, iflg_gather(h, h01, h23, kh));
        const __m512i dm = iflg_gather(h, s01, s23, ks);
        IFY_UNROLL
        for (int g = 0; g < 4; g++) {
            const __m512i q = iflg_load4(rows, g, o + t.qs);
            __m512i lo = _mm512_and_si512(q, m4);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            if (t.qh) {
                lo = _mm512_mask_add_epi8(lo, (__mmask64)qm[g], lo, sixteen);
                hi = _mm512_mask_add_epi8(hi, (__mmask64)qm[4 + g], hi, sixteen);
            }
            a[g] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi,
                                       xhi);
        }
        const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]),
                                            _mm512_unpackhi_epi32(a[0], a[1]));
        const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]),
                                            _mm512_unpackhi_epi32(a[2], a[3]));
        __m512i dot =
            _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
        const int32_t xs = (int32_t)xsum[2 * b] + xsum[2 * b + 1];
        const __m512 xdb = _mm512_set1_ps(xd[b]);
        const __m512 d = _mm512_cvtph_ps(_mm512_castsi512_si256(dm));
        if (!t.min) dot = _mm512_sub_epi32(dot, _mm512_set1_epi32(z * xs));
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(d, xdb), _mm512_cvtepi32_ps(dot)));
        if (t.min) {
            const __m512 m = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(dm, 1));
            acc = _mm512_add_ps(acc,
                                _mm512_mul_ps(_mm512_mul_ps(m, xdb), _mm512_set1_ps((float)xs)));
        }
    }
    _mm512_mask_storeu_ps(out, (__mmask16)((1u << nr) - 1), acc);
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

/* The low 16 bits of each int32 lane as f16 -> float, exactly as ifk_f16 (ifky_f16x8's fields). */
IFY_INLINE __m256 iflg_f16(__m256i x) {
    x = _mm256_and_si256(x, _mm256_set1_epi32(0xffff));
    const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fff)), 13);
    const __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p112f));
    const __m256i e31 = _mm256_set1_epi32(0x7c00);
    const __m256i inf = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(x, e31), e31),
                                         _mm256_set1_epi32(0x7f800000));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x8000)), 16);
    return _mm256_castsi256_ps(
        _mm256_or_si256(_mm256_or_si256(_mm256_castps_si256(f), inf), sign));
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
                          const uint8_t *next) {
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

/* The GEMV over rows [n0, n1): tiles of IFLG_ROWS rows, the tile after next prefetched. */
IFY_INLINE void iflg_gemv(ifl_type t, float *out, const int8_t *xq, const float *xd,
                          const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL, rowbytes = nb * t.bb;
    for (size_t n = n0; n < n1; n += IFLG_ROWS) {
        const uint8_t *rows[IFLG_ROWS];
        const size_t nr = iflg_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = n + (IFLG_AHEAD + 1) * IFLG_ROWS <= n1
                                  ? w + (n + IFLG_AHEAD * IFLG_ROWS) * rowbytes
                                  : NULL;
        iflg_tile(t, out + n, nr, rows, xq, xd, xsum, nb, next);
    }
}

#endif
