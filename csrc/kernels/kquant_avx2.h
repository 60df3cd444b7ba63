/* kquant_avx2.h - the AVX2 and AVX-VNNI K-quant GEMVs (q4k/, q5k/, q6k/ *_avx2.c,
 * *_avx_vnni.c): one body per type, compiled once per ISA; the only difference is the int16
 * pair product-sum, VPDPWSSD under AVX-VNNI, VPMADDWD + VPADDD under AVX2 (the same int32
 * sums). Include only from translation units compiled with -mavx2 -mfma (and -mavxvnni for
 * the VNNI ones).
 *
 * A tile of 8 weight rows (lane = row in the float state) on the file's blocks, read in place.
 * Per row and block: VPMADDUBSW of the unsigned weight bytes against the int8 activations
 * (pairs, at most 2 * 63 * 127 in magnitude: no saturation), then the pair product-sum with
 * each 32-value product vector's sub-block scale(s) spread over its int16 lanes (VPSHUFB of the
 * row's scales), so the scales apply in integers; one 8-row reduction per block gives each
 * row's sumi in its lane; the float step is the scalar kernel's, lane-wise. The next tile is
 * prefetched into L1, a block's share per block (ifky_gemv_prefetch). */
#ifndef IF_KQUANT_AVX2_H
#define IF_KQUANT_AVX2_H

#include <immintrin.h>

#include "kquant_common.h"

#define IFY_INLINE static inline __attribute__((always_inline))
#define IFY_UNROLL _Pragma("GCC unroll 8")

IFY_INLINE __m256i ifky_dpwssd(__m256i acc, __m256i a, __m256i b) {
#if defined(__AVXVNNI__)
    return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* 8 row vectors -> lane r = the sum of v[r]'s lanes. */
IFY_INLINE __m256i ifky_net8(const __m256i v[8]) {
    __m256i t[4], u[2];
    IFY_UNROLL
    for (int k = 0; k < 4; k++)
        t[k] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]),
                                _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]));
    IFY_UNROLL
    for (int k = 0; k < 2; k++)
        u[k] = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2 * k], t[2 * k + 1]),
                                _mm256_unpackhi_epi64(t[2 * k], t[2 * k + 1]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u[0], u[1], 0x20),
                            _mm256_permute2x128_si256(u[0], u[1], 0x31));
}

/* 8 f16 values, one per int32 lane (its upper 16 bits zero) -> floats, exactly as ifk_f16 (no
 * F16C: the magnitude bits moved into a float's fields and scaled by 2^112, exact for normals
 * and subnormals; exponent 31 forced to 255). */
IFY_INLINE __m256 ifky_f16_dw(__m256i x) {
    const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fff)), 13);
    const __m256 f = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p112f));
    const __m256i e31 = _mm256_set1_epi32(0x7c00);
    const __m256i inf = _mm256_and_si256(_mm256_cmpeq_epi32(_mm256_and_si256(x, e31), e31),
                                         _mm256_set1_epi32(0x7f800000));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x8000)), 16);
    return _mm256_castsi256_ps(
        _mm256_or_si256(_mm256_or_si256(_mm256_castps_si256(f), inf), sign));
}

/* 8 f16 words -> floats, exactly as ifk_f16. */
IFY_INLINE __m256 ifky_f16x8(const uint16_t h[8]) {
    return ifky_f16_dw(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)h)));
}

/* A VPSHUFB control: 128-bit lane 0's 8 words all take word i0 of their lane, lane 1's word i1. */
IFY_INLINE __m256i ifky_spread(int i0, int i1) {
    const char a0 = (char)(2 * i0), a1 = (char)(2 * i0 + 1), b0 = (char)(2 * i1),
               b1 = (char)(2 * i1 + 1);
    return _mm256_setr_epi8(a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, b0, b1,
                            b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1);
}

/* Rows of the tile at n (rows past n1 repeat the last: read, never stored); returns how many
 * are real. */
IFY_INLINE size_t ifky_rows(const uint8_t *rows[8], const uint8_t *w, size_t rowbytes, size_t n,
                            size_t n1) {
    const size_t nr = n1 - n < 8 ? n1 - n : 8;
    for (size_t r = 0; r < 8; r++) rows[r] = w + (n + (r < nr ? r : nr - 1)) * rowbytes;
    return nr;
}

IFY_INLINE void ifky_prefetch(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + o), _MM_HINT_T1);
}

/* The GEMVs' prefetch: the next 8-row tile into L1, a block's share per block; on Zen 5, cold,
 * 1 thread it reads the 49152 x 2048 classifier ~10-25 % faster than two tiles ahead into L2
 * (docs/gguf_kernels.md). */
#ifndef IFKY_GEMV_PF_ROWS
#define IFKY_GEMV_PF_ROWS 8
#endif
#ifndef IFKY_GEMV_PF_HINT
#define IFKY_GEMV_PF_HINT _MM_HINT_T0
#endif
IFY_INLINE void ifky_gemv_prefetch(const uint8_t *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)(p + o), IFKY_GEMV_PF_HINT);
}

/* Store the first nr lanes of v at out. */
IFY_INLINE void ifky_store(float *out, __m256 v, size_t nr) {
    if (nr == 8) {
        _mm256_storeu_ps(out, v);
        return;
    }
    _Alignas(32) float t[8];
    _mm256_store_ps(t, v);
    for (size_t r = 0; r < nr; r++) out[r] = t[r];
}

/* Q5_K's bit 4 of the values of sub-block j from the 32 qh bytes (bit j of byte l, lane l),
 * as 0 or 16 per byte (the 16-bit shift's carry from the next byte is masked off). */
IFY_INLINE __m256i ifky_q5bit(__m256i qh, int j) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(1)), 4);
}

/* Q4_K (five = 0) and Q5_K (five = 1): per row and block the 6-bit scales and mins unpacked
 * with 32-bit masks, then per 32-byte chunk c the low nibbles (sub-block 2c) and the high ones
 * (2c + 1), Q5_K's with their qh bit as bit 4, against their 32 activations; the mins times
 * the 32-value activation sums by VPMADDWD into 4 vectors (row 4k + q in 128-bit lane k of
 * vector q), summed per row by two in-lane steps. */
IFY_INLINE void ifky_q45k(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                          const uint8_t *w, size_t n0, size_t n1, size_t K, const int five) {
    const size_t bb = five ? IF_Q5K_BLOCK_BYTES : IF_Q4K_BLOCK_BYTES;
    const size_t nb = K / IF_QK, rowbytes = nb * bb, qoff = five ? 48 : 16;
    const __m256i m4 = _mm256_set1_epi8(15);
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = w + (n + IFKY_GEMV_PF_ROWS) * rowbytes;
        __m256 acc = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            ifky_gemv_prefetch(next + b * 8 * bb, 8 * bb);
            const int8_t *x = xq + b * IF_QK;
            const __m256i p32 = _mm256_madd_epi16(
                _mm256_loadu_si256((const __m256i *)(const void *)(xsum + b * 16)),
                _mm256_set1_epi16(1));
            const __m128i bs32 = _mm_packs_epi32(_mm256_castsi256_si128(p32),
                                                 _mm256_extracti128_si256(p32, 1));
            __m256i v[8], mz[4];
            _Alignas(16) uint16_t dh[8], mh[8];
            IFY_UNROLL
            for (int r = 0; r < 8; r++) {
                const uint8_t *blk = rows[r] + b * bb;
                memcpy(&dh[r], blk, 2);
                memcpy(&mh[r], blk + 2, 2);
                uint32_t u[3];
                memcpy(u, blk + 4, 12);
                const uint32_t k1 = 0x3f3f3f3fu, k2 = 0x0f0f0f0fu, k3 = 0x03030303u;
                const __m128i scm = _mm_set_epi32(
                    (int)(((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4)), (int)(u[1] & k1),
                    (int)((u[2] & k2) | (((u[0] >> 6) & k3) << 4)), (int)(u[0] & k1));
                const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
                const __m128i mins = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(scm, 8)), bs32);
                if (r < 4) mz[r] = _mm256_castsi128_si256(mins);
                else mz[r - 4] = _mm256_inserti128_si256(mz[r - 4], mins, 1);
                __m256i a = _mm256_setzero_si256();
                const __m256i qh =
                    five ? _mm256_loadu_si256((const __m256i *)(const void *)(blk + 16))
                         : _mm256_setzero_si256();
                IFY_UNROLL
                for (int c = 0; c < 4; c++) {
                    const __m256i q =
                        _mm256_loadu_si256((const __m256i *)(const void *)(blk + qoff + 32 * c));
                    const __m256i xl = _mm256_loadu_si256((const __m256i *)(const void *)(x + 64 * c));
                    const __m256i xh = _mm256_loadu_si256((const __m256i *)(const void *)(x + 64 * c + 32));
                    __m256i lo = _mm256_and_si256(q, m4),
                            hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    if (five) {
                        lo = _mm256_or_si256(lo, ifky_q5bit(qh, 2 * c));
                        hi = _mm256_or_si256(hi, ifky_q5bit(qh, 2 * c + 1));
                    }
                    a = ifky_dpwssd(a, _mm256_maddubs_epi16(lo, xl),
                                    _mm256_shuffle_epi8(sc, ifky_spread(2 * c, 2 * c)));
                    a = ifky_dpwssd(a, _mm256_maddubs_epi16(hi, xh),
                                    _mm256_shuffle_epi8(sc, ifky_spread(2 * c + 1, 2 * c + 1)));
                }
                v[r] = a;
            }
            const __m256i sumi = ifky_net8(v);
            /* lane 4k + q = mz[q]'s lane k = row 4k + q */
            const __m256i h0 = _mm256_add_epi32(_mm256_unpacklo_epi32(mz[0], mz[1]),
                                                _mm256_unpackhi_epi32(mz[0], mz[1]));
            const __m256i h1 = _mm256_add_epi32(_mm256_unpacklo_epi32(mz[2], mz[3]),
                                                _mm256_unpackhi_epi32(mz[2], mz[3]));
            const __m256i summ = _mm256_add_epi32(_mm256_unpacklo_epi64(h0, h1),
                                                  _mm256_unpackhi_epi64(h0, h1));
            const __m256 xdb = _mm256_set1_ps(xd[b]);
            const __m256 t1 = _mm256_mul_ps(ifky_f16x8(dh), xdb);
            const __m256 t2 = _mm256_mul_ps(ifky_f16x8(mh), xdb);
            acc = _mm256_sub_ps(_mm256_add_ps(acc, _mm256_mul_ps(t1, _mm256_cvtepi32_ps(sumi))),
                                _mm256_mul_ps(t2, _mm256_cvtepi32_ps(summ)));
        }
        ifky_store(out + n, acc, nr);
    }
}

IFY_INLINE void ifky_q4k(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                         const uint8_t *w, size_t n0, size_t n1, size_t K) {
    ifky_q45k(out, xq, xd, xsum, w, n0, n1, K, 0);
}

/* A VPSHUFB control: dword r of each 128-bit lane becomes the int16 pair (byte 4r + i0 of v,
 * byte 4r + i1), bytes zero-extended: a row's scale or min k spread over its lane. */
IFY_INLINE __m256i ifkx_pick(int i0, int i1) {
    const char z = (char)0x80;
    return _mm256_setr_epi8((char)i0, z, (char)i1, z, (char)(4 + i0), z, (char)(4 + i1), z,
                            (char)(8 + i0), z, (char)(8 + i1), z, (char)(12 + i0), z,
                            (char)(12 + i1), z, (char)i0, z, (char)i1, z, (char)(4 + i0), z,
                            (char)(4 + i1), z, (char)(8 + i0), z, (char)(8 + i1), z,
                            (char)(12 + i0), z, (char)(12 + i1), z);
}

/* Q4_K on 8-row groups (isaforge.h, if_kq_pack_x8), lane r = row r throughout: per block the
 * 8 rows' 6-bit scales and mins unpacked at once from three loads, then per sub-block 8 loads
 * of 4 nibble bytes x 8 rows against the broadcast 4 activations, VPMADDUBSW summed in int16
 * (8 x 2 x 15 x 127 = 30480: no overflow), and one pair product-sum by the row's scale; the
 * mins by 4 VPMADDWD of (m_j, m_j+1) against the activations' 32-value sums. No reduction
 * across lanes; the float step is the scalar kernel's, lane-wise. n0 is a multiple of 8 and
 * whole groups are read (rows past n1 in the last group are not stored). */
IFY_INLINE void ifkx_q4k(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                         const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK, bb = 8 * IF_Q4K_BLOCK_BYTES, gbytes = nb * bb;
    const __m256i m4 = _mm256_set1_epi8(15), k6 = _mm256_set1_epi8(0x3f);
    const __m256i k30 = _mm256_set1_epi8(0x30);
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *g = w + n / 8 * gbytes, *next = g + gbytes;
        __m256 acc = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = g + b * bb;
            ifky_gemv_prefetch(next + b * bb, bb);
            const int8_t *x = xq + b * IF_QK;
            const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)blk);
            const __m256i s0 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 32));
            const __m256i s1 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 64));
            const __m256i s2 = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 96));
            /* lane r, byte j: sc[j] / m[j] (j < 4), sc[j + 4] / m[j + 4] */
            const __m256i scl = _mm256_and_si256(s0, k6), ml = _mm256_and_si256(s1, k6);
            const __m256i sch = _mm256_or_si256(_mm256_and_si256(s2, m4),
                                                _mm256_and_si256(_mm256_srli_epi16(s0, 2), k30));
            const __m256i mh =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(s2, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(s1, 2), k30));
            /* the activations' 32-value sums as int16 pairs (j, j + 1), dword j / 2 */
            const __m256i p32 = _mm256_madd_epi16(
                _mm256_loadu_si256((const __m256i *)(const void *)(xsum + b * 16)),
                _mm256_set1_epi16(1));
            const __m256i bs = _mm256_broadcastsi128_si256(_mm_packs_epi32(
                _mm256_castsi256_si128(p32), _mm256_extracti128_si256(p32, 1)));
            __m256i summ = _mm256_madd_epi16(_mm256_shuffle_epi8(ml, ifkx_pick(0, 1)),
                                             _mm256_shuffle_epi32(bs, 0x00));
            summ = ifky_dpwssd(summ, _mm256_shuffle_epi8(ml, ifkx_pick(2, 3)),
                               _mm256_shuffle_epi32(bs, 0x55));
            summ = ifky_dpwssd(summ, _mm256_shuffle_epi8(mh, ifkx_pick(0, 1)),
                               _mm256_shuffle_epi32(bs, 0xAA));
            summ = ifky_dpwssd(summ, _mm256_shuffle_epi8(mh, ifkx_pick(2, 3)),
                               _mm256_shuffle_epi32(bs, 0xFF));
            __m256i sumi = _mm256_setzero_si256();
            IFY_UNROLL
            for (int c = 0; c < 4; c++) {
                const uint8_t *q = blk + 128 + 256 * c;
                __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
                IFY_UNROLL
                for (int i = 0; i < 8; i++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(q + 32 * i));
                    int32_t a, e;
                    memcpy(&a, x + 64 * c + 4 * i, 4);
                    memcpy(&e, x + 64 * c + 32 + 4 * i, 4);
                    lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(_mm256_and_si256(v, m4),
                                                                   _mm256_set1_epi32(a)));
                    hi = _mm256_add_epi16(
                        hi, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                                 _mm256_set1_epi32(e)));
                }
                const __m256i sc = c < 2 ? scl : sch;
                const int j = (2 * c) & 3;
                sumi = ifky_dpwssd(sumi, lo, _mm256_shuffle_epi8(sc, ifkx_pick(j, j)));
                sumi = ifky_dpwssd(sumi, hi, _mm256_shuffle_epi8(sc, ifkx_pick(j + 1, j + 1)));
            }
            const __m256 xdb = _mm256_set1_ps(xd[b]);
            const __m256 d = ifky_f16_dw(_mm256_and_si256(h, _mm256_set1_epi32(0xffff)));
            const __m256 dmin = ifky_f16_dw(_mm256_srli_epi32(h, 16));
            const __m256 t1 = _mm256_mul_ps(d, xdb), t2 = _mm256_mul_ps(dmin, xdb);
            acc = _mm256_sub_ps(_mm256_add_ps(acc, _mm256_mul_ps(t1, _mm256_cvtepi32_ps(sumi))),
                                _mm256_mul_ps(t2, _mm256_cvtepi32_ps(summ)));
        }
        ifky_store(out + n, acc, n1 - n < 8 ? n1 - n : 8);
    }
}

/* Q6_K's unsigned 6-bit values, 4 quarters of 32 bytes: u[t] byte l = the low (t < 2) or
 * high nibble of l0 (t even) or l1 (t odd), with bits 2t, 2t + 1 of qh byte l as bits 4-5. */
IFY_INLINE void ifky_q6u(__m256i l0, __m256i l1, __m256i qh, __m256i u[4]) {
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    u[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
    u[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
    u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
    u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
}

/* A VPSHUFB control: dword r of each 128-bit lane becomes the int16 pair (byte 4r + i0 of v,
 * byte 4r + i1) with each byte in the high half, so VPSRAW by 8 gives them sign-extended. */
IFY_INLINE __m256i ifkx_pick_hi(int i0, int i1) {
    const char z = (char)0x80;
    return _mm256_setr_epi8(z, (char)i0, z, (char)i1, z, (char)(4 + i0), z, (char)(4 + i1), z,
                            (char)(8 + i0), z, (char)(8 + i1), z, (char)(12 + i0), z,
                            (char)(12 + i1), z, (char)i0, z, (char)i1, z, (char)(4 + i0), z,
                            (char)(4 + i1), z, (char)(8 + i0), z, (char)(8 + i1), z,
                            (char)(12 + i0), z, (char)(12 + i1));
}

/* Q6_K on 8-row groups (isaforge.h, if_kq_pack_x8), lane r = row r throughout: per block and
 * 4-byte column i of a half, three loads (two of low nibbles, one of top bits) give the 4
 * quarters' values of 8 rows (u = q + 32, 0..63); two VPMADDUBSW against the broadcast
 * activations summed in int16 (2 x 2 x 63 x 127 = 32004: no overflow), then one pair
 * product-sum by the rows' int8 sub-block scale (sign-extended by VPSHUFB + VPSRAW); the
 * 32 * scale * sum(x) part per row by 8 VPMADDWD of scale pairs against the activations'
 * 16-value sums. No reduction across lanes; the float step is the scalar kernel's, lane-wise.
 * n0 is a multiple of 8 and whole groups are read. */
IFY_INLINE void ifkx_q6k(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                         const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK, bb = 8 * IF_Q6K_BLOCK_BYTES, gbytes = nb * bb;
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *g = w + n / 8 * gbytes, *next = g + gbytes;
        __m256 acc = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = g + b * bb;
            ifky_gemv_prefetch(next + b * bb, bb);
            const int8_t *x = xq + b * IF_QK;
            const __m256i xs = _mm256_loadu_si256((const __m256i *)(const void *)(xsum + b * 16));
            __m256i S[4], corr = _mm256_setzero_si256();
            IFY_UNROLL
            for (int q = 0; q < 4; q++) { /* lane r: row r's scales 4q .. 4q + 3 */
                S[q] = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 32 * (48 + q)));
                IFY_UNROLL
                for (int p = 0; p < 2; p++) {
                    const __m256i sp =
                        _mm256_srai_epi16(_mm256_shuffle_epi8(S[q], ifkx_pick_hi(2 * p, 2 * p + 1)), 8);
                    const __m256i xp =
                        _mm256_permutevar8x32_epi32(xs, _mm256_set1_epi32(2 * q + p));
                    corr = ifky_dpwssd(corr, sp, xp);
                }
            }
            __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5));
            IFY_UNROLL
            for (int h = 0; h < 2; h++) {
                __m256i p[4];
                IFY_UNROLL
                for (int i = 0; i < 8; i++) {
                    const __m256i A = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 32 * (16 * h + i)));
                    const __m256i B = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 32 * (16 * h + 8 + i)));
                    const __m256i Q = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 32 * (32 + 8 * h + i)));
                    __m256i u[4];
                    ifky_q6u(A, B, Q, u);
                    IFY_UNROLL
                    for (int t = 0; t < 4; t++) {
                        int32_t a;
                        memcpy(&a, x + 128 * h + 32 * t + 4 * i, 4);
                        const __m256i m = _mm256_maddubs_epi16(u[t], _mm256_set1_epi32(a));
                        p[t] = i % 2 ? _mm256_add_epi16(p[t], m) : m;
                        if (i % 2) { /* sub-block j = 8h + 2t + i / 4: scale byte j % 4 of dword j / 4 */
                            const int j = 8 * h + 2 * t + i / 4;
                            const __m256i sc = _mm256_srai_epi16(
                                _mm256_shuffle_epi8(S[j / 4], ifkx_pick_hi(j % 4, j % 4)), 8);
                            sumi = ifky_dpwssd(sumi, p[t], sc);
                        }
                    }
                }
            }
            const __m256 d = ifky_f16_dw(_mm256_cvtepu16_epi32(
                _mm_loadu_si128((const __m128i *)(const void *)(blk + 32 * 52))));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(xd[b])),
                                                   _mm256_cvtepi32_ps(sumi)));
        }
        ifky_store(out + n, acc, n1 - n < 8 ? n1 - n : 8);
    }
}

/* Q6_K: per row and 128-value half, the 64 low-nibble bytes in two loads and the 32 high-bit
 * bytes in one; each 32-value product vector is two 16-value sub-blocks (one per 128-bit
 * lane), values 32t .. 32t + 31 of the half from quarter t: low nibbles of the first (t = 0)
 * or second (t = 1) load, high nibbles (t = 2, 3), top bits 2t, 2t + 1 of the high-bit bytes
 * moved to bits 4-5. The 32 * sum(x) part of u = q + 32 comes off per row with one VPMADDWD of
 * the 16 scales and the activations' 16-value sums. */
IFY_INLINE void ifky_q6k(float *out, const int8_t *xq, const float *xd, const int16_t *xsum,
                         const uint8_t *w, size_t n0, size_t n1, size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * IF_Q6K_BLOCK_BYTES;
    for (size_t n = n0; n < n1; n += 8) {
        const uint8_t *rows[8];
        const size_t nr = ifky_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = w + (n + IFKY_GEMV_PF_ROWS) * rowbytes;
        __m256 acc = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            ifky_gemv_prefetch(next + b * 8 * IF_Q6K_BLOCK_BYTES, 8 * IF_Q6K_BLOCK_BYTES);
            const int8_t *x = xq + b * IF_QK;
            const __m256i s16 = _mm256_loadu_si256((const __m256i *)(const void *)(xsum + b * 16));
            __m256i v[8];
            _Alignas(16) uint16_t dh[8];
            IFY_UNROLL
            for (int r = 0; r < 8; r++) {
                const uint8_t *blk = rows[r] + b * IF_Q6K_BLOCK_BYTES;
                memcpy(&dh[r], blk + 208, 2);
                const __m128i sc8 = _mm_loadu_si128((const __m128i *)(const void *)(blk + 192));
                __m256i a = _mm256_sub_epi32(
                    _mm256_setzero_si256(),
                    _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), s16), 5));
                IFY_UNROLL
                for (int h = 0; h < 2; h++) {
                    const __m256i sc = _mm256_broadcastsi128_si256(
                        _mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
                    const uint8_t *ql = blk + 64 * h;
                    const __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)ql);
                    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 32));
                    const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 128 + 32 * h));
                    __m256i u[4];
                    ifky_q6u(l0, l1, qh, u);
                    IFY_UNROLL
                    for (int t = 0; t < 4; t++) {
                        const __m256i xv = _mm256_loadu_si256(
                            (const __m256i *)(const void *)(x + 128 * h + 32 * t));
                        a = ifky_dpwssd(a, _mm256_maddubs_epi16(u[t], xv),
                                        _mm256_shuffle_epi8(sc, ifky_spread(2 * t, 2 * t + 1)));
                    }
                }
                v[r] = a;
            }
            const __m256i sumi = ifky_net8(v);
            const __m256 t = _mm256_mul_ps(ifky_f16x8(dh), _mm256_set1_ps(xd[b]));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(t, _mm256_cvtepi32_ps(sumi)));
        }
        ifky_store(out + n, acc, nr);
    }
}

#endif
