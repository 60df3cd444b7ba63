/* Q5_K GEMM, AVX-512 VNNI: 16 weight rows per tile, like the GEMV (q5k_gemv_1x16_avx512_vnni.c),
 * with each block of the tile unpacked once for every activation row as Q4_K's GEMM does
 * (q4k_gemm_1x16_avx512_vnni.c): per block the 16 rows' 5-bit values (nibbles with the qh bit
 * added, as unsigned bytes, in the GEMV's sub-block order), their VPERMW-spread scales and
 * their mins go to an L1 scratch, then each activation row runs 4 VPMADDUBSW + 4 VPDPWSSD per
 * weight row from it. Per output the GEMV's arithmetic: exact int32 sums per block, then the
 * same float step in block order (the running sums live in out between blocks). */
#include "../kquant_avx512.h"

/* One block of the tile, unpacked. */
typedef struct q5kg_blk {
    __m512i q[16][4]; /* per row: the values of qs bytes 0-63's low / high nibbles, then 64-127's */
    __m512i s[16][4]; /* the matching int16 scale spreads */
    __m128i mn[16];   /* the 8 mins as int16 */
    __m512 d, dmin;   /* lane = row */
} q5kg_blk;

IFZ_INLINE void q5kg_unpack(q5kg_blk *B, const uint8_t *const rows[16], size_t b) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i pa_lo = ifkz_spread(0, 0, 2, 2), pa_hi = ifkz_spread(1, 1, 3, 3);
    const __m512i pb_lo = ifkz_spread(4, 4, 6, 6), pb_hi = ifkz_spread(5, 5, 7, 7);
    _Alignas(32) uint16_t dh[16], mh[16];
    for (int r = 0; r < 16; r++) {
        const uint8_t *blk = rows[r] + b * IF_Q5K_BLOCK_BYTES;
        memcpy(&dh[r], blk, 2);
        memcpy(&mh[r], blk + 2, 2);
        uint8_t sc[8], m[8];
        ifk_q4k_scales(blk + 4, sc, m);
        const __m512i sc16 = _mm512_cvtepu8_epi16(
            _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(const void *)sc)));
        B->mn[r] = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)m));
        const __m512i qa = _mm512_loadu_si512(blk + 48), qb = _mm512_loadu_si512(blk + 112);
        const __m512i qh2 =
            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(blk + 16)));
        B->q[r][0] = ifkz_q5bit(_mm512_and_si512(qa, m4), qh2, 0, 2);
        B->q[r][1] = ifkz_q5bit(_mm512_and_si512(_mm512_srli_epi16(qa, 4), m4), qh2, 1, 3);
        B->q[r][2] = ifkz_q5bit(_mm512_and_si512(qb, m4), qh2, 4, 6);
        B->q[r][3] = ifkz_q5bit(_mm512_and_si512(_mm512_srli_epi16(qb, 4), m4), qh2, 5, 7);
        B->s[r][0] = _mm512_permutexvar_epi16(pa_lo, sc16);
        B->s[r][1] = _mm512_permutexvar_epi16(pa_hi, sc16);
        B->s[r][2] = _mm512_permutexvar_epi16(pb_lo, sc16);
        B->s[r][3] = _mm512_permutexvar_epi16(pb_hi, sc16);
    }
    B->d = ifkz_f16x16(dh);
    B->dmin = ifkz_f16x16(mh);
}

void if_q5k_gemm_1x16_avx512_vnni(float *out, size_t ldo, const int8_t *xq, const float *xd,
                                  const int16_t *xsum, size_t M, const uint8_t *w, size_t n0,
                                  size_t n1, size_t K) {
    const size_t nb = K / IF_QK, rowbytes = nb * IF_Q5K_BLOCK_BYTES;
    q5kg_blk B;
    for (size_t n = n0; n < n1; n += 16) {
        const uint8_t *rows[16];
        const __mmask16 om = ifkz_rows(rows, w, rowbytes, n, n1);
        const uint8_t *next = w + (n + 32) * rowbytes;
        for (size_t b = 0; b < nb; b++) {
            ifkz_prefetch(next + b * 16 * IF_Q5K_BLOCK_BYTES, 16 * IF_Q5K_BLOCK_BYTES);
            q5kg_unpack(&B, rows, b);
            for (size_t m = 0; m < M; m++) {
                const int8_t *x = xq + m * K + b * IF_QK;
                const __m512i x0 = _mm512_loadu_si512(x), x1 = _mm512_loadu_si512(x + 64);
                const __m512i x2 = _mm512_loadu_si512(x + 128), x3 = _mm512_loadu_si512(x + 192);
                const __m512i xv[4] = {
                    _mm512_shuffle_i64x2(x0, x1, 0x44), _mm512_shuffle_i64x2(x0, x1, 0xEE),
                    _mm512_shuffle_i64x2(x2, x3, 0x44), _mm512_shuffle_i64x2(x2, x3, 0xEE)};
                const __m256i x16 = _mm256_loadu_si256(
                    (const __m256i *)(const void *)(xsum + m * (K / 16) + b * 16));
                const __m256i p32 = _mm256_madd_epi16(x16, _mm256_set1_epi16(1));
                const __m128i bs32 =
                    _mm_packs_epi32(_mm256_castsi256_si128(p32), _mm256_extracti128_si256(p32, 1));
                __m512i v[16], mz[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(),
                                        _mm512_setzero_si512(), _mm512_setzero_si512()};
                IFZ_UNROLL
                for (int r = 0; r < 16; r++) {
                    __m512i a = _mm512_setzero_si512();
                    IFZ_UNROLL
                    for (int k = 0; k < 4; k++)
                        a = _mm512_dpwssd_epi32(a, _mm512_maddubs_epi16(B.q[r][k], xv[k]),
                                                B.s[r][k]);
                    v[r] = a;
                    mz[r & 3] =
                        _mm512_inserti32x4(mz[r & 3], _mm_madd_epi16(B.mn[r], bs32), r >> 2);
                }
                const __m512i sumi = ifkz_net16(v);
                const __m512i summ = ifz_hB(ifz_hA(mz[0], mz[1]), ifz_hA(mz[2], mz[3]));
                const __m512 xdb = _mm512_set1_ps(xd[m * nb + b]);
                const __m512 t1 = _mm512_mul_ps(B.d, xdb), t2 = _mm512_mul_ps(B.dmin, xdb);
                float *o = out + m * ldo + n;
                const __m512 acc = b ? _mm512_maskz_loadu_ps(om, o) : _mm512_setzero_ps();
                _mm512_mask_storeu_ps(
                    o, om,
                    _mm512_sub_ps(_mm512_add_ps(acc, _mm512_mul_ps(t1, _mm512_cvtepi32_ps(sumi))),
                                  _mm512_mul_ps(t2, _mm512_cvtepi32_ps(summ))));
            }
        }
    }
}

const if_kq_gemm_kernel if_k_q5k_gemm_1x16_avx512_vnni = {.name = "q5k_gemm_1x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI, .mr = 1, .nr = 16,
    .run = if_q5k_gemm_1x16_avx512_vnni};
