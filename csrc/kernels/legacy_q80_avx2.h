/* legacy_q80_avx2.h - the 256-bit Q8_0 GEMV body (legacy/q80_gemv_1x8_avx2.c, *_avx_vnni.c;
 * avx512_vnni's is legacy_gemv_x86.h's iflg_step80, the GEMMs legacy_gemm_x86.h's) on the
 * file's 34-byte blocks: a tile of 8 rows, one activation vector per block for the 8 rows,
 * ifky_net8's lane-per-row reduction, the 8 f16 scales in one vector, the tile two ahead
 * prefetched, with Q8_0's value expansion and product (ifly_u80, ifly_dot80, IFLY_Z80); the
 * float step is the scalar kernel's, lane-wise. */
#ifndef IF_LEGACY_Q80_AVX2_H
#define IF_LEGACY_Q80_AVX2_H

#include "kquant_avx2.h"
#include "legacy_common.h"

/* Q8_0's 32 values as the product's weight operand (ifly_u80), that product (ifly_dot80) and
 * the zero point it leaves (IFLY_Z80, subtracted times the block's activation sum). VNNI:
 * value + 128 (the sign bit flipped), VPDPBUSD never saturates, IFLY_Z80 = 128 (exact in
 * int32). Plain AVX2: VPMADDUBSW would saturate (255 * 127 * 2 > 32767), so the values stay
 * signed and the product is |q| times x with q's sign (VPSIGNB twice: at most 2 * 128 * 127
 * per pair for the Q8 rule's |x| <= 127), IFLY_Z80 = 0. */
#if defined(__AVXVNNI__)
#define IFLY_Z80 128
IFY_INLINE __m256i ifly_u80(const uint8_t *blk) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 2));
    return _mm256_xor_si256(q, _mm256_set1_epi8((char)0x80));
}
IFY_INLINE __m256i ifly_dot80(__m256i u, __m256i x) {
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, x);
}
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

/* The tile's 8 block dots (lane r = row r's, the zero point removed) of block b. */
IFY_INLINE __m256i ifly_dots80(const __m256i u[8], __m256i x, int32_t xs) {
    __m256i p[8];
    IFY_UNROLL
    for (int r = 0; r < 8; r++) p[r] = ifly_dot80(u[r], x);
    const __m256i dot = ifky_net8(p);
    return IFLY_Z80 ? _mm256_sub_epi32(dot, _mm256_set1_epi32(IFLY_Z80 * xs)) : dot;
}

/* Block b of the tile's 8 rows: values (ifly_u80) into u, f16 scales into dh. */
IFY_INLINE void ifly_unpack80(__m256i u[8], uint16_t dh[8], const uint8_t *const rows[8],
                              size_t b) {
    IFY_UNROLL
    for (int r = 0; r < 8; r++) {
        const uint8_t *blk = rows[r] + b * IF_Q80_BLOCK_BYTES;
        memcpy(&dh[r], blk, 2);
        u[r] = ifly_u80(blk);
    }
}

/* One activation row against the tile's 8 rows (rows[r], nb blocks each): out[0..nr). */
IFY_INLINE void ifly_tile80(float *out, size_t nr, const uint8_t *const rows[8],
                            const int8_t *xq, const float *xd, const int16_t *xsum, size_t nb,
                            const uint8_t *next) {
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        if (next) ifky_prefetch(next + b * 8 * IF_Q80_BLOCK_BYTES, 8 * IF_Q80_BLOCK_BYTES);
        const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(xq + b * IF_QL));
        __m256i u[8];
        uint16_t dh[8];
        ifly_unpack80(u, dh, rows, b);
        const __m256i dot = ifly_dots80(u, x, (int32_t)xsum[2 * b] + xsum[2 * b + 1]);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(ifky_f16x8(dh), _mm256_set1_ps(xd[b])),
                                               _mm256_cvtepi32_ps(dot)));
    }
    ifky_store(out, acc, nr);
}

IFY_INLINE void ifly_gemv80(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                            const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QL, rowbytes = nb * IF_Q80_BLOCK_BYTES;
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = n + 24 <= n1 ? w + (n + 16) * rowbytes : NULL;
        ifly_tile80(out + n, nr, rows, xq, xd, xsum, nb, next);
    }
}

#endif
