/* Q4_K GEMV, AVX-512 VNNI (-mavx512f -mavx512bw -mavx512vl -mavx512vnni): 16 weight rows per
 * tile on the file's 144-byte blocks (kquant_avx512.h, kquant_gemv_avx512.h). Per row and
 * block: the 128 nibble bytes in two loads; in each, the low nibbles are sub-blocks 4c and
 * 4c + 2 (128-bit blocks 0-1 and 2-3) and the high ones 4c + 1 and 4c + 3, against
 * activations permuted once per block to match (VSHUFI64X2); 4 VPDPBUSD, packed by pairs to
 * words (VPACKSSDW), then 2 VPDPWSSD with the 6-bit scales spread by VPERMW. The scales and
 * mins are unpacked from one 16-byte load with vector ops; the mins times the activations'
 * 32-value sums (VPMADDWD) go to 4 vectors (row 4k + q in block k of
 * vector q), summed per row by two in-block reduction steps. Then, lane = row, the scalar
 * kernel's float step: acc = (acc + (d * xd) * sumi) - (dmin * xd) * summ. */
#include "../kquant_gemv_avx512.h"

void if_q4k_gemv_1x16_avx512_vnni(float *out, const int8_t *xq, const float *xd,
                                  const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                  size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * IF_Q4K_BLOCK_BYTES;
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i pa = ifkz_spread2(0, 1, 0, 1, 2, 3, 2, 3);
    const __m512i pb = ifkz_spread2(4, 5, 4, 5, 6, 7, 6, 7);
    for (size_t n = n0; n < n1; n += 16) {
        const uint8_t *rows[16];
        const __mmask16 om = ifkz_rows(rows, w, rowbytes, n, n1);
        __m512 acc = _mm512_setzero_ps();
        const uint8_t *next = w + (n + IFKZ_GEMV_PF_ROWS) * rowbytes;
        for (size_t b = 0; b < nb; b++) {
            ifkz_gemv_prefetch(next + b * 16 * IF_Q4K_BLOCK_BYTES, 16 * IF_Q4K_BLOCK_BYTES);
            const int8_t *x = xq + b * IF_QK;
            const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 64);
            const __m512i x2 = _mm512_loadu_si512(x + 128), x3 = _mm512_loadu_si512(x + 192);
            const __m512i xa_lo = _mm512_shuffle_i64x2(x0, x1, 0x44);
            const __m512i xa_hi = _mm512_shuffle_i64x2(x0, x1, 0xEE);
            const __m512i xb_lo = _mm512_shuffle_i64x2(x2, x3, 0x44);
            const __m512i xb_hi = _mm512_shuffle_i64x2(x2, x3, 0xEE);
            /* the 8 sums of 32 activations (pairs of the 16-value sums) as int16 */
            const __m256i s16 = _mm256_loadu_si256((const __m256i *)(const void *)(xsum + b * 16));
            const __m128i bs32 = _mm_packs_epi32(
                _mm256_castsi256_si128(_mm256_madd_epi16(s16, _mm256_set1_epi16(1))),
                _mm256_extracti128_si256(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)), 1));
            ifkz_tree16 tr;
            __m512i prev = _mm512_setzero_si512();
            __m512i mz[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(),
                             _mm512_setzero_si512(), _mm512_setzero_si512()};
            _Alignas(64) uint32_t dm[16];
            IFZ_UNROLL
            for (int r = 0; r < 16; r++) {
                const uint8_t *blk = rows[r] + b * IF_Q4K_BLOCK_BYTES;
                memcpy(&dm[r], blk, 4);
                const __m128i scm = ifkz_q4k_scales_v(blk + 4);
                const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(scm));
                const __m128i mins =
                    _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(scm, 8)), bs32);
                mz[r & 3] = _mm512_inserti32x4(mz[r & 3], mins, r >> 2);
                const __m512i qa = _mm512_loadu_si512(blk + 16), qb = _mm512_loadu_si512(blk + 80);
                __m512i a = ifkz_dp2(_mm512_setzero_si512(), _mm512_and_si512(qa, m4), xa_lo,
                                     _mm512_and_si512(_mm512_srli_epi16(qa, 4), m4), xa_hi, pa,
                                     sc16);
                a = ifkz_dp2(a, _mm512_and_si512(qb, m4), xb_lo,
                             _mm512_and_si512(_mm512_srli_epi16(qb, 4), m4), xb_hi, pb, sc16);
                ifkz_tree_add(&tr, r, a, &prev);
            }
            const __m512i sumi = ifkz_tree_sum(&tr);
            /* lane 4k + q = vector q's block k = row 4k + q */
            const __m512i summ = ifz_hB(ifz_hA(mz[0], mz[1]), ifz_hA(mz[2], mz[3]));
            const __m512 xdb = _mm512_set1_ps(xd[b]);
            const __m512i dmv = _mm512_load_si512(dm);
            const __m512 t1 = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(dmv)), xdb);
            const __m256i mhv = _mm512_cvtepi32_epi16(_mm512_srli_epi32(dmv, 16));
            const __m512 t2 = _mm512_mul_ps(_mm512_cvtph_ps(mhv), xdb);
            acc = _mm512_sub_ps(_mm512_add_ps(acc, _mm512_mul_ps(t1, _mm512_cvtepi32_ps(sumi))),
                                _mm512_mul_ps(t2, _mm512_cvtepi32_ps(summ)));
        }
        _mm512_mask_storeu_ps(out + n, om, acc);
    }
}

const if_kq_gemv_kernel if_k_q4k_gemv_1x16_avx512_vnni = {.name = "q4k_gemv_1x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 1, .nr = 16,
    .run = if_q4k_gemv_1x16_avx512_vnni};
