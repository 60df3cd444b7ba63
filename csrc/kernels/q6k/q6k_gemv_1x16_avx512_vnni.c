/* Q6_K GEMV, AVX-512 VNNI (-mavx512f -mavx512bw -mavx512vl -mavx512vnni): 16 weight rows per
 * tile on the file's 210-byte blocks (kquant_avx512.h). Per row and 128-value half: one load
 * of the 64 low-nibble bytes and a broadcast of the 32 high-bit bytes; the low nibbles are
 * values 0..63 of the half, the high ones 64..127, in natural order against the activations;
 * their top two bits come from the high-bit bytes shifted per 256-bit half (VPSLLVW /
 * VPSRLVW) and masked to bits 4-5. Each 128-bit block is one 16-value sub-block: VPMADDUBSW
 * of the unsigned values u = q + 32, then VPDPWSSD with its int8 scale spread by VPERMW. The
 * 32 * sum(x) part of u is taken off per row with one VPMADDWD of the 16 scales and the
 * activations' 16-value sums. Then, lane = row, acc = acc + (d * xd) * sumi. */
#include "../kquant_gemv_avx512.h"

void if_q6k_gemv_1x16_avx512_vnni(float *out, const int8_t *xq, const float *xd,
                                  const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                  size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * IF_Q6K_BLOCK_BYTES;
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    /* per 256-bit half of the broadcast high bits: quarter 0 / 1 (low nibbles), 2 / 3 (high) */
    const __m512i sh_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sh_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i p0 = ifkz_spread(0, 1, 2, 3), p1 = ifkz_spread(4, 5, 6, 7);
    const __m512i p2 = ifkz_spread(8, 9, 10, 11), p3 = ifkz_spread(12, 13, 14, 15);
    for (size_t n = n0; n < n1; n += 16) {
        const uint8_t *rows[16];
        const __mmask16 om = ifkz_rows(rows, w, rowbytes, n, n1);
        __m512 acc = _mm512_setzero_ps();
        const uint8_t *next = w + (n + IFKZ_GEMV_PF_ROWS) * rowbytes;
        for (size_t b = 0; b < nb; b++) {
            ifkz_gemv_prefetch(next + b * 16 * IF_Q6K_BLOCK_BYTES, 16 * IF_Q6K_BLOCK_BYTES);
            const int8_t *x = xq + b * IF_QK;
            const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 64);
            const __m512i x2 = _mm512_loadu_si512(x + 128), x3 = _mm512_loadu_si512(x + 192);
            const __m256i s16 = _mm256_loadu_si256((const __m256i *)(const void *)(xsum + b * 16));
            __m512i v[16];
            _Alignas(32) uint16_t dh[16];
            IFZ_UNROLL
            for (int r = 0; r < 16; r++) {
                const uint8_t *blk = rows[r] + b * IF_Q6K_BLOCK_BYTES;
                memcpy(&dh[r], blk + 208, 2);
                const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(blk + 192)));
                const __m512i sc16 = _mm512_castsi256_si512(sc);
                const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(sc, s16), 5);
                __m512i a = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), corr));
                IFZ_UNROLL
                for (int h = 0; h < 2; h++) {
                    const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
                    const __m512i qh = _mm512_broadcast_i64x4(
                        _mm256_loadu_si256((const __m256i *)(const void *)(blk + 128 + 32 * h)));
                    const __m512i lo = _mm512_or_si512(
                        _mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, sh_lo), m30));
                    const __m512i hi = _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                        _mm512_and_si512(_mm512_srlv_epi16(qh, sh_hi), m30));
                    a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(lo, h ? x2 : x0),
                                            _mm512_permutexvar_epi16(h ? p2 : p0, sc16));
                    a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(hi, h ? x3 : x1),
                                            _mm512_permutexvar_epi16(h ? p3 : p1, sc16));
                }
                v[r] = a;
            }
            const __m512i sumi = ifkz_net16(v);
            const __m512 t = _mm512_mul_ps(ifkz_f16x16(dh), _mm512_set1_ps(xd[b]));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(t, _mm512_cvtepi32_ps(sumi)));
        }
        _mm512_mask_storeu_ps(out + n, om, acc);
    }
}

const if_kq_gemv_kernel if_k_q6k_gemv_1x16_avx512_vnni = {.name = "q6k_gemv_1x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 1, .nr = 16,
    .run = if_q6k_gemv_1x16_avx512_vnni};
