/* Q4_K GEMV on 16-row groups (if_kq_pack_x16), avx512_vnni: lane r = row r throughout, each
 * group one sequential stream of aligned 64-byte loads (the file's rows would be 16 streams
 * side by side; the hardware prefetcher keeps one stream ahead, so the reads overlap the
 * arithmetic, as Q8_0's 16-row groups do). Per block the 16 rows' 6-bit scales and mins unpack
 * at once from three loads; per sub-block 8 VPDPBUSD of 4 nibbles x 16 rows against the 4
 * activations broadcast (int32: at most 32 x 15 x 127), times the row's scale (VPMULLD); the
 * mins by 4 VPDPWSSD of (m_j, m_j+1) against the activations' 32-value sums. No reduction
 * across lanes; the float step is the scalar kernel's, lane-wise. n0 is a multiple of 16 and
 * whole groups are read (rows past n1 in the last group are not stored). */
#include "../kquant_avx512.h"

/* A VPSHUFB control: dword r of each 128-bit lane becomes byte 4r + i of v, zero-extended to
 * 32 bits (i1 < 0) or the int16 pair (byte 4r + i0, byte 4r + i1). */
IFZ_INLINE __m512i q4kx16_pick(int i0, int i1) {
    const char z = (char)0x80, a = (char)i0, b = i1 < 0 ? z : (char)i1;
    return _mm512_broadcast_i32x4(_mm_setr_epi8(a, z, b, z, (char)(4 + i0), z,
                                                i1 < 0 ? z : (char)(4 + i1), z, (char)(8 + i0),
                                                z, i1 < 0 ? z : (char)(8 + i1), z,
                                                (char)(12 + i0), z, i1 < 0 ? z : (char)(12 + i1),
                                                z));
}

IFZ_INLINE __m512i q4kx16_x4(const int8_t *x) {
    int32_t v;
    memcpy(&v, x, 4);
    return _mm512_set1_epi32(v);
}

void if_q4kx16_gemv_1x16_avx512_vnni(float *out, const int8_t *xq, const float *xd,
                                     const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                     size_t K) {
    const size_t nb = K / IF_QK, bb = 16 * IF_Q4K_BLOCK_BYTES, gbytes = nb * bb;
    const __m512i m4 = _mm512_set1_epi8(15), k6 = _mm512_set1_epi8(0x3f);
    const __m512i k30 = _mm512_set1_epi8(0x30);
    for (size_t n = n0; n < n1; n += 16) {
        const uint8_t *g = w + n / 16 * gbytes;
        __m512 acc = _mm512_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = g + b * bb;
            const int8_t *x = xq + b * IF_QK;
            const __m512i h = _mm512_loadu_si512((const void *)blk);
            const __m512i s0 = _mm512_loadu_si512((const void *)(blk + 64));
            const __m512i s1 = _mm512_loadu_si512((const void *)(blk + 128));
            const __m512i s2 = _mm512_loadu_si512((const void *)(blk + 192));
            /* lane r, byte j: sc[j] / m[j] (j < 4), sc[j + 4] / m[j + 4] */
            const __m512i scl = _mm512_and_si512(s0, k6), ml = _mm512_and_si512(s1, k6);
            const __m512i sch = _mm512_or_si512(_mm512_and_si512(s2, m4),
                                                _mm512_and_si512(_mm512_srli_epi16(s0, 2), k30));
            const __m512i mh =
                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(s2, 4), m4),
                                _mm512_and_si512(_mm512_srli_epi16(s1, 2), k30));
            /* the activations' 32-value sums as int16 pairs (j, j + 1), dword j / 2 */
            const __m256i p32 = _mm256_madd_epi16(
                _mm256_loadu_si256((const __m256i *)(const void *)(xsum + b * 16)),
                _mm256_set1_epi16(1));
            const __m512i bs = _mm512_broadcast_i32x4(_mm_packs_epi32(
                _mm256_castsi256_si128(p32), _mm256_extracti128_si256(p32, 1)));
            __m512i summ = _mm512_madd_epi16(_mm512_shuffle_epi8(ml, q4kx16_pick(0, 1)),
                                             _mm512_shuffle_epi32(bs, 0x00));
            summ = _mm512_dpwssd_epi32(summ, _mm512_shuffle_epi8(ml, q4kx16_pick(2, 3)),
                                       _mm512_shuffle_epi32(bs, 0x55));
            summ = _mm512_dpwssd_epi32(summ, _mm512_shuffle_epi8(mh, q4kx16_pick(0, 1)),
                                       _mm512_shuffle_epi32(bs, 0xAA));
            summ = _mm512_dpwssd_epi32(summ, _mm512_shuffle_epi8(mh, q4kx16_pick(2, 3)),
                                       _mm512_shuffle_epi32(bs, 0xFF));
            __m512i sumi = _mm512_setzero_si512();
            IFZ_UNROLL
            for (int c = 0; c < 4; c++) { /* nibble bytes 32c .. 32c + 31: dwords 4 + 8c + i */
                const uint8_t *q = blk + 256 + 512 * c;
                __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
                IFZ_UNROLL
                for (int i = 0; i < 8; i++) {
                    const __m512i v = _mm512_loadu_si512((const void *)(q + 64 * i));
                    lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(v, m4),
                                             q4kx16_x4(x + 64 * c + 4 * i));
                    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                             q4kx16_x4(x + 64 * c + 32 + 4 * i));
                }
                const __m512i sc = c < 2 ? scl : sch;
                const int j = (2 * c) & 3;
                sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(
                                                  lo, _mm512_shuffle_epi8(sc, q4kx16_pick(j, -1))));
                sumi = _mm512_add_epi32(
                    sumi, _mm512_mullo_epi32(hi, _mm512_shuffle_epi8(sc, q4kx16_pick(j + 1, -1))));
            }
            const __m512 xdb = _mm512_set1_ps(xd[b]);
            const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
            const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16)));
            const __m512 t1 = _mm512_mul_ps(d, xdb), t2 = _mm512_mul_ps(dmin, xdb);
            acc = _mm512_sub_ps(_mm512_add_ps(acc, _mm512_mul_ps(t1, _mm512_cvtepi32_ps(sumi))),
                                _mm512_mul_ps(t2, _mm512_cvtepi32_ps(summ)));
        }
        const size_t nr = n1 - n < 16 ? n1 - n : 16;
        _mm512_mask_storeu_ps(out + n, (__mmask16)((1u << nr) - 1u), acc);
    }
}

const if_kq_gemv_kernel if_k_q4kx16_gemv_1x16_avx512_vnni = {
    .name = "q4kx16_gemv_1x16_avx512_vnni", .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 1, .nr = 16, .run = if_q4kx16_gemv_1x16_avx512_vnni};
