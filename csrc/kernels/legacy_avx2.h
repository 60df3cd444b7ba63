/* legacy_avx2.h - the x86 legacy-block GEMV body (legacy/ *_gemv_*_avx2.c, *_avx_vnni.c,
 * *_avx512_vnni.c; the GEMMs are legacy_gemm_x86.h's): one source compiled per ISA; the only
 * difference is the u8 x s8 product sum of 32 values into 8 int32 lanes: VPDPBUSD (AVX-VNNI
 * or AVX512-VNNI, 256-bit) or VPMADDUBSW + VPMADDWD against ones (at most 2 * 31 * 127 per
 * pair: no saturation). The same exact int32 sums either way.
 *
 * Decode reads far more weight bytes than any cache holds, so the GEMV is built for the
 * stream: a tile of 8 rows, each row's blocks (scales beside their nibbles, as in the file) read
 * in order, one 32-value activation vector loaded once per block for the 8 rows, the 8 rows'
 * product vectors reduced together (ifky_net8: lane r = row r's dot, no per-row horizontal
 * sum), the 8 rows' f16 scales converted in one vector; the float step is the scalar kernel's,
 * lane-wise. The tile two ahead is prefetched into L2, a block's share per block. */
#ifndef IF_LEGACY_AVX2_H
#define IF_LEGACY_AVX2_H

#include "kquant_avx2.h"
#include "legacy_common.h"

IFY_INLINE __m256i ifly_dot(__m256i u, __m256i x) {
#if defined(__AVX512VNNI__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, x);
#elif defined(__AVXVNNI__)
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
#endif
}

/* A block's 32 unsigned values, value j in byte j (low nibbles in lane 0, high in lane 1),
 * bit 4 from qh for the five-bit types (VPSHUFB spreads qh byte j / 8 to byte j, then each
 * byte's own bit is tested). */
IFY_INLINE __m256i ifly_u(ifl_type t, const uint8_t *blk) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(blk + t.qs));
    const __m128i m4 = _mm_set1_epi8(15);
    __m256i u = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
    if (t.qh) {
        int32_t qh;
        memcpy(&qh, blk + t.qh, 4);
        const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2,
                                                2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
        const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
        const __m256i h = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(qh), spread), bit);
        u = _mm256_or_si256(u, _mm256_and_si256(_mm256_cmpeq_epi8(h, bit), _mm256_set1_epi8(16)));
    }
    return u;
}

/* Q8_0's 32 values as the product's weight operand (ifly_u80), that product (ifly_dot80) and
 * the zero point it leaves (IFLY_Z80, subtracted times the block's activation sum). VNNI:
 * value + 128 (the sign bit flipped), VPDPBUSD never saturates, IFLY_Z80 = 128 (exact in
 * int32). Plain AVX2: VPMADDUBSW would saturate (255 * 127 * 2 > 32767), so the values stay
 * signed and the product is |q| times x with q's sign (VPSIGNB twice: at most 2 * 128 * 127
 * per pair for the Q8 rule's |x| <= 127), IFLY_Z80 = 0. */
#if defined(__AVX512VNNI__) || defined(__AVXVNNI__)
#define IFLY_Z80 128
IFY_INLINE __m256i ifly_u80(const uint8_t *blk) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
    return _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
}
IFY_INLINE __m256i ifly_dot80(__m256i u, __m256i x) { return ifly_dot(u, x); }
#else
#define IFLY_Z80 0
IFY_INLINE __m256i ifly_u80(const uint8_t *blk) {
    return _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
}
IFY_INLINE __m256i ifly_dot80(__m256i u, __m256i x) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(u, u), _mm256_sign_epi8(x, u));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
#endif

/* One activation row against the tile's 8 rows (rows[r], nb blocks each): out[0..nr). */
IFY_INLINE void ifly_tile(ifl_type t, float *out, size_t nr, const uint8_t *const rows[8],
                          const int8_t *xq, const float *xd, const int16_t *xsum, size_t nb,
                          const uint8_t *next) {
    const int32_t z = t.qh ? 16 : 8;
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        if (next) ifky_prefetch(next + b * 8 * t.bb, 8 * t.bb);
        const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + b * IF_QL));
        __m256i p[8];
        uint16_t dh[8], mh[8];
        IFY_UNROLL
        for (int r = 0; r < 8; r++) {
            const uint8_t *blk = rows[r] + b * t.bb;
            memcpy(&dh[r], blk, 2);
            if (t.min) memcpy(&mh[r], blk + 2, 2);
            p[r] = ifly_dot(ifly_u(t, blk), x);
        }
        __m256i dot = ifky_net8(p);
        const int32_t xs = (int32_t)xsum[2 * b] + xsum[2 * b + 1];
        const __m256 xdb = _mm256_set1_ps(xd[b]);
        if (!t.min) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(z * xs));
        acc = _mm256_add_ps(
            acc, _mm256_mul_ps(_mm256_mul_ps(ifky_f16x8(dh), xdb), _mm256_cvtepi32_ps(dot)));
        if (t.min)
            acc = _mm256_add_ps(
                acc, _mm256_mul_ps(_mm256_mul_ps(ifky_f16x8(mh), xdb), _mm256_set1_ps((float)xs)));
    }
    ifky_store(out, acc, nr);
}

IFY_INLINE void ifly_gemv(ifl_type t, float *out, const int8_t *xq, const float *xd,
                          const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL, rowbytes = nb * t.bb;
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = n + 24 <= n1 ? w + (n + 16) * rowbytes : NULL;
        ifly_tile(t, out + n, nr, rows, xq, xd, xsum, nb, next);
    }
}

#endif
