/* Q6_K GEMM, AVX-512 VNNI: 16 weight rows per tile, like the GEMV (q6k_gemv_1x16_avx512_vnni.c),
 * but each block of the tile is unpacked once for every activation row: per block the 16 rows'
 * 6-bit values (as unsigned bytes u = q + 32, in the GEMV's order), their VPERMW-spread scales
 * and their 16 scales as int16 go to an L1 scratch (8.5 KiB), then each activation row runs 4
 * VPMADDUBSW + 4 VPDPWSSD per weight row from it, less 32 * (scales . 16-value sums). The
 * weights are read from memory once per call. Per output the GEMV's arithmetic (the running
 * sums live in out between blocks, stored and reloaded as they are). */
#include "../kquant_avx512.h"

typedef struct q6kg_blk {
    __m512i u[16][4];  /* per row: half 0 low / high nibble values, then half 1 */
    __m512i s[16][4];  /* the matching int16 scale spreads */
    __m256i sc[16];    /* the 16 scales as int16 */
    __m512 d;          /* lane = row */
} q6kg_blk;

IFZ_INLINE void q6kg_unpack(q6kg_blk *B, const uint8_t *const rows[16], size_t b) {
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    const __m512i sh_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i sh_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i p[4] = {ifkz_spread(0, 1, 2, 3), ifkz_spread(4, 5, 6, 7),
                          ifkz_spread(8, 9, 10, 11), ifkz_spread(12, 13, 14, 15)};
    _Alignas(32) uint16_t dh[16];
    for (int r = 0; r < 16; r++) {
        const uint8_t *blk = rows[r] + b * IF_Q6K_BLOCK_BYTES;
        memcpy(&dh[r], blk + 208, 2);
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(blk + 192)));
        B->sc[r] = sc;
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)(const void *)(blk + 128 + 32 * h)));
            B->u[r][2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                             _mm512_and_si512(_mm512_sllv_epi16(qh, sh_lo), m30));
            B->u[r][2 * h + 1] = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                _mm512_and_si512(_mm512_srlv_epi16(qh, sh_hi), m30));
            B->s[r][2 * h] = _mm512_permutexvar_epi16(p[2 * h], _mm512_castsi256_si512(sc));
            B->s[r][2 * h + 1] = _mm512_permutexvar_epi16(p[2 * h + 1], _mm512_castsi256_si512(sc));
        }
    }
    B->d = ifkz_f16x16(dh);
}

void if_q6k_gemm_1x16_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                  const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                  size_t n1, size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * IF_Q6K_BLOCK_BYTES;
    q6kg_blk B;
    for (size_t n = n0; n < n1; n += 16) {
        const uint8_t *rows[16];
        const __mmask16 om = ifkz_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = w + (n + 32) * rowbytes;
        for (size_t b = 0; b < nb; b++) {
            ifkz_prefetch(next + b * 16 * IF_Q6K_BLOCK_BYTES, 16 * IF_Q6K_BLOCK_BYTES);
            q6kg_unpack(&B, rows, b);
            for (size_t m = 0; m < M; m++) {
                const int8_t *x = xq + m * K + b * IF_QK;
                const __m512i xv[4] = {_mm512_loadu_si512(x), _mm512_loadu_si512(x + 64),
                                       _mm512_loadu_si512(x + 128), _mm512_loadu_si512(x + 192)};
                const __m256i s16 = _mm256_loadu_si256((const __m256i *)(const void *)(xsum + m * (K / 16) + b * 16));
                __m512i v[16];
                IFZ_UNROLL
                for (int r = 0; r < 16; r++) {
                    const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(B.sc[r], s16), 5);
                    __m512i a = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), corr));
                    IFZ_UNROLL
                    for (int k = 0; k < 4; k++)
                        a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(B.u[r][k], xv[k]), B.s[r][k]);
                    v[r] = a;
                }
                const __m512i sumi = ifkz_net16(v);
                const __m512 t = _mm512_mul_ps(B.d, _mm512_set1_ps(xd[m * nb + b]));
                float *o = out + m * ldo + n;
                const __m512 acc = b ? _mm512_maskz_loadu_ps(om, o) : _mm512_setzero_ps();
                _mm512_mask_storeu_ps(o, om, _mm512_add_ps(acc, _mm512_mul_ps(t, _mm512_cvtepi32_ps(sumi))));
            }
        }
    }
}

const if_kq_gemm_kernel if_k_q6k_gemm_1x16_avx512_vnni = {.name = "q6k_gemm_1x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 1, .nr = 16,
    .run = if_q6k_gemm_1x16_avx512_vnni};
