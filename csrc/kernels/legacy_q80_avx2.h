/* legacy_q80_avx2.h - the x86 Q8_0 GEMV and GEMM body (legacy/q80_*_avx2.c, *_avx_vnni.c,
 * *_avx512_vnni.c) on the file's 34-byte blocks: legacy_avx2.h's structure (a tile of 8 rows,
 * one activation vector per block for the 8 rows, ifky_net8's lane-per-row reduction, the 8
 * f16 scales in one vector, the tile two ahead prefetched) with Q8_0's value expansion and
 * product (ifly_u80, ifly_dot80, IFLY_Z80); the float step is the scalar kernel's, lane-wise. */
#ifndef IF_LEGACY_Q80_AVX2_H
#define IF_LEGACY_Q80_AVX2_H

#include "legacy_avx2.h"

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

#if IFLY_Z80
/* VNNI: block b of the tile transposed to 4-byte columns, t[k] lane r = row r's values 4k..4k+3
 * (an 8 x 8 transpose of 32-bit groups), so 8 VPDPBUSD against the activation's 4-byte groups
 * broadcast leave lane r = row r's dot with no lane reduction. */
IFY_INLINE void ifly_cols80(__m256i t[8], const __m256i u[8]) {
    __m256i a[8], c[8];
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm256_unpacklo_epi32(u[2 * i], u[2 * i + 1]);     /* d0 d1 | d4 d5 */
        a[2 * i + 1] = _mm256_unpackhi_epi32(u[2 * i], u[2 * i + 1]); /* d2 d3 | d6 d7 */
    }
    for (int h = 0; h < 2; h++) { /* rows 0-3, then 4-7: 4 rows of one group per lane half */
        c[4 * h] = _mm256_unpacklo_epi64(a[4 * h], a[4 * h + 2]);         /* d0 | d4 */
        c[4 * h + 1] = _mm256_unpackhi_epi64(a[4 * h], a[4 * h + 2]);     /* d1 | d5 */
        c[4 * h + 2] = _mm256_unpacklo_epi64(a[4 * h + 1], a[4 * h + 3]); /* d2 | d6 */
        c[4 * h + 3] = _mm256_unpackhi_epi64(a[4 * h + 1], a[4 * h + 3]); /* d3 | d7 */
    }
    for (int k = 0; k < 4; k++) {
        t[k] = _mm256_permute2x128_si256(c[k], c[4 + k], 0x20);
        t[k + 4] = _mm256_permute2x128_si256(c[k], c[4 + k], 0x31);
    }
}

/* The tile's 8 block dots against the 32 activations x (lane r = row r's, zero point removed). */
IFY_INLINE __m256i ifly_coldots80(const __m256i t[8], const int8_t *x, int32_t xs) {
    __m256i s = _mm256_set1_epi32(-IFLY_Z80 * xs);
    IFY_UNROLL
    for (int k = 0; k < 8; k++) {
        int32_t g;
        memcpy(&g, x + 4 * k, 4);
#if defined(__AVX512VNNI__)
        s = _mm256_dpbusd_epi32(s, t[k], _mm256_set1_epi32(g));
#else
        s = _mm256_dpbusd_avx_epi32(s, t[k], _mm256_set1_epi32(g));
#endif
    }
    return s;
}
#endif

/* The GEMM: per 8-row tile, up to 4 activation rows at a time run the GEMV's block loop
 * together, each with its running sum in a register, so the tile's values and scales are
 * unpacked (VNNI: and transposed, ifly_cols80) once per block for the 4 rows (the tile stays
 * in L1 between row groups); per output the integers and the float step are the GEMV's, so
 * prefill equals decode bit for bit. */
IFY_INLINE void ifly_gemm80(float *out, size_t ldo, const int8_t *xq, const float *xd,
                            const int16_t *xsum, size_t M, const uint8_t *w, size_t n0, size_t n1,
                            size_t K) {
    const size_t nb = K / IF_QL, rowbytes = nb * IF_Q80_BLOCK_BYTES;
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        for (size_t m0 = 0; m0 < M; m0 += 4) {
            const size_t mc = M - m0 < 4 ? M - m0 : 4;
            __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                             _mm256_setzero_ps()};
            for (size_t b = 0; b < nb; b++) {
                __m256i u[8];
                uint16_t dh[8];
                ifly_unpack80(u, dh, rows, b);
                const __m256 dv = ifky_f16x8(dh);
#if IFLY_Z80
                __m256i cols[8];
                ifly_cols80(cols, u);
#endif
                for (size_t i = 0; i < mc; i++) {
                    const size_t m = m0 + i;
                    const int8_t *x = xq + m * K + b * IF_QL;
                    const int16_t *bs = xsum + m * (K / 16) + 2 * b;
#if IFLY_Z80
                    const __m256i dot = ifly_coldots80(cols, x, (int32_t)bs[0] + bs[1]);
#else
                    const __m256i dot =
                        ifly_dots80(u, _mm256_loadu_si256((const __m256i *)(const void *)x),
                                    (int32_t)bs[0] + bs[1]);
#endif
                    const __m256 t = _mm256_mul_ps(dv, _mm256_set1_ps(xd[m * nb + b]));
                    acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(t, _mm256_cvtepi32_ps(dot)));
                }
            }
            for (size_t i = 0; i < mc; i++) ifky_store(out + (m0 + i) * ldo + n, acc[i], nr);
        }
    }
}

#endif
