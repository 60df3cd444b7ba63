/* kquant_avx512.h - helpers of the AVX-512 VNNI K-quant kernels (q4k/, q5k/, q6k/
 * *_avx512_vnni.c).
 * Include only from translation units compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni.
 *
 * The kernels share one shape: a tile of 16 weight rows (lane = row in the float state), the
 * file's blocks read in place, block by block. Per row and 256-value block the products go
 * VPMADDUBSW (unsigned weight bytes x int8 activations: pairs, at most 2 * 63 * 127 in
 * magnitude, no saturation) then VPDPWSSD with the sub-block scales spread over the int16
 * lanes of their sub-block (VPERMW), so the scales are applied in integers without separating
 * the sub-blocks; one 16-row reduction per block then gives each row's sumi in a lane. */
#ifndef IF_KQUANT_AVX512_H
#define IF_KQUANT_AVX512_H

#include "kquant_common.h"
#include "q8_avx512_common.h"

/* 16 row vectors -> lane r = the sum of all of v[r]'s lanes (exact int32). */
IFZ_INLINE __m512i ifkz_net16(const __m512i v[16]) {
    __m512i a[8], b[4];
    IFZ_UNROLL
    for (int k = 0; k < 8; k++) a[k] = ifz_hA(v[2 * k], v[2 * k + 1]);
    IFZ_UNROLL
    for (int k = 0; k < 4; k++) b[k] = ifz_hB(a[2 * k], a[2 * k + 1]);
    /* b[k] block j lane q = row 4k + q's sum over block j */
    return ifz_hC(ifz_hC(b[0], b[1]), ifz_hC(b[2], b[3]));
}

/* A VPERMW index: 128-bit block k's 8 words all select word i[k]. */
IFZ_INLINE __m512i ifkz_spread(int i0, int i1, int i2, int i3) {
    return _mm512_set_epi16(i3, i3, i3, i3, i3, i3, i3, i3, i2, i2, i2, i2, i2, i2, i2, i2, i1,
                            i1, i1, i1, i1, i1, i1, i1, i0, i0, i0, i0, i0, i0, i0, i0);
}

/* The f16 words at byte offset `off` of 16 rows' current blocks (rows[r] + off), as floats. */
IFZ_INLINE __m512 ifkz_f16x16(const uint16_t h[16]) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)h));
}

/* The 16 row pointers of the tile at row n (rows past n1 repeat the last one: read, never
 * stored) and the store mask. */
IFZ_INLINE __mmask16 ifkz_rows(const uint8_t *rows[16], const uint8_t *w, size_t rowbytes,
                               size_t n, size_t n1) {
    const size_t nr = n1 - n < 16 ? n1 - n : 16;
    for (size_t r = 0; r < 16; r++) rows[r] = w + (n + (r < nr ? r : nr - 1)) * rowbytes;
    return (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1);
}

/* Software prefetch into L2 of the lines of [p, p + n): the bytes of the tile two ahead, a
 * block's share of them per block of this tile, so the 16 interleaved row streams do not wait
 * on memory (a hint: a line past the weights is never read; docs/gguf_kernels.md has the
 * figures). */
#ifndef IFKZ_PF_HINT
#define IFKZ_PF_HINT _MM_HINT_T1
#endif
IFZ_INLINE void ifkz_prefetch(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + o), IFKZ_PF_HINT);
}

/* Q4_K / Q5_K's 12 scale bytes -> sc[0..7] in the low 8 bytes, m[0..7] in the high 8 (ggml's
 * packing: see ifk_q4k_scales). */
IFZ_INLINE __m128i ifkz_q4k_scales(const uint8_t *s) {
    uint32_t u[3];
    memcpy(u, s, 12);
    const uint32_t k1 = 0x3f3f3f3fu, k2 = 0x0f0f0f0fu, k3 = 0x03030303u;
    const uint32_t sc_lo = u[0] & k1, m_lo = u[1] & k1;
    const uint32_t sc_hi = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    return _mm_set_epi32((int)m_hi, (int)m_lo, (int)sc_hi, (int)sc_lo);
}

/* Q5_K: v (nibbles of one 64-byte load, values l of the 256-bit half's sub-block) with 16
 * added where bit j0 (low 256 bits) / j1 (high 256 bits) of qh2 = qh[32] twice is set. */
IFZ_INLINE __m512i ifkz_q5bit(__m512i v, __m512i qh2, int j0, int j1) {
    const __m512i bit =
        _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << j0)), _mm256_set1_epi8((char)(1 << j1)), 1);
    return _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(qh2, bit), v, _mm512_set1_epi8(16));
}

#endif
