/* kquant_gemv_avx512.h - helpers of the AVX-512 VNNI K-quant GEMVs (q4k/, q5k/, q6k/
 * *_gemv_1x16_avx512_vnni.c) that cut the per-row work of a 16-row tile's block: the 6-bit
 * scales unpacked with vector ops, the f16 block scales of 16 rows as one 32-bit word each,
 * and the 16-row reduction folded in as the rows come so few row vectors stay live.
 * Include only from translation units compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512vnni. */
#ifndef IF_KQUANT_GEMV_AVX512_H
#define IF_KQUANT_GEMV_AVX512_H

#include "kquant_avx512.h"

/* The GEMVs prefetch the tile one ahead (16 rows), a block's share of it per block, into L1:
 * measured on Zen 5 at the 1B model's shapes, cold, against two tiles ahead into L2 (the
 * GEMMs' setting), it lifts the 49152 x 2048 Q6_K matrix from ~20 to ~25 GB/s and costs
 * nothing hot (a hint: a line past the weights is never read). */
#define IFKZ_GEMV_PF_ROWS 16
IFZ_INLINE void ifkz_gemv_prefetch(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
}

/* Q4_K / Q5_K's 12 scale bytes at s -> sc[0..7] in the low 8 bytes, m[0..7] in the high 8
 * (ifk_q4k_scales' packing), from one 16-byte load (s + 12..15 lie in the block's next field
 * and are dropped): dword k of the load is ggml's u[k]; six vector ops replace the scalar
 * unpack and its four inserts. */
IFZ_INLINE __m128i ifkz_q4k_scales_v(const uint8_t *s) {
    const __m128i u = _mm_loadu_si128((const __m128i *)(const void *)s);
    const __m128i lo6 = _mm_and_si128(u, _mm_set1_epi8(0x3F)); /* [sc_lo, m_lo, ., .] */
    /* [u2 & 0x0f.., (u2 >> 4) & 0x0f..] | [(u0 >> 6) << 4, (u1 >> 6) << 4] per byte */
    const __m128i nib = _mm_and_si128(
        _mm_srlv_epi32(_mm_shuffle_epi32(u, 0xAA), _mm_set_epi32(0, 0, 4, 0)), _mm_set1_epi8(15));
    const __m128i top = _mm_and_si128(_mm_srli_epi32(u, 2), _mm_set1_epi8(0x30));
    return _mm_unpacklo_epi32(lo6, _mm_or_si128(nib, top));
}

/* A VPERMW index: 128-bit block k's words 0-3 all select word i[k], words 4-7 word j[k] (the
 * layout of VPACKSSDW(p, q): per block, p's four dwords then q's, as words). */
IFZ_INLINE __m512i ifkz_spread2(int i0, int j0, int i1, int j1, int i2, int j2, int i3, int j3) {
    return _mm512_set_epi16(j3, j3, j3, j3, i3, i3, i3, i3, j2, j2, j2, j2, i2, i2, i2, i2, j1,
                            j1, j1, j1, i1, i1, i1, i1, j0, j0, j0, j0, i0, i0, i0, i0);
}

/* Two sub-block products scaled in integers: p = VPDPBUSD(u, x) and q = VPDPBUSD(v, y) (each
 * dword a sum of 4 products, |.| < 2^15 for unsigned values below 64 against int8, so
 * VPACKSSDW never saturates), packed to words and multiplied by their scales (spread by
 * VPERMW with an ifkz_spread2 index) in one VPDPWSSD into acc: 5 instructions per 128 values
 * where VPMADDUBSW + VPDPWSSD per operand take 6. */
IFZ_INLINE __m512i ifkz_dp2(__m512i acc, __m512i u, __m512i x, __m512i v, __m512i y,
                            __m512i idx, __m512i sc16) {
    const __m512i z = _mm512_setzero_si512();
    const __m512i pq =
        _mm512_packs_epi32(_mm512_dpbusd_epi32(z, u, x), _mm512_dpbusd_epi32(z, v, y));
    return _mm512_dpwssd_epi32(acc, pq, _mm512_permutexvar_epi16(idx, sc16));
}

/* The 16-row reduction of ifkz_net16, taken as the rows come: row r's vector v is folded
 * into the pairwise tree so at most one partial per level stays live. Lane r of the final
 * value = the sum of row r's lanes (exact int32, the same sums as ifkz_net16). */
typedef struct {
    __m512i a, b[4], c;
} ifkz_tree16;

IFZ_INLINE void ifkz_tree_add(ifkz_tree16 *t, int r, __m512i v, __m512i *prev) {
    if (!(r & 1)) {
        *prev = v;
        return;
    }
    const __m512i a = ifz_hA(*prev, v);
    if (!(r & 2)) {
        t->a = a;
        return;
    }
    t->b[r >> 2] = ifz_hB(t->a, a);
}

IFZ_INLINE __m512i ifkz_tree_sum(const ifkz_tree16 *t) {
    return ifz_hC(ifz_hC(t->b[0], t->b[1]), ifz_hC(t->b[2], t->b[3]));
}

#endif
