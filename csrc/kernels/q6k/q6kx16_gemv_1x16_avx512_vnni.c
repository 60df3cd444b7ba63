/* Q6_K GEMV on 16-row groups (if_kq_pack_x16 with 210-byte blocks), avx512_vnni: lane r = row r
 * throughout, each group one sequential stream of aligned loads (as q4kx16_gemv_1x16_avx512_vnni;
 * blocks in pairs, kquant_common.h's ifk_x16_block). Per 4-value
 * dword of the 16 rows the unsigned 6-bit values from an ql dword (low or high nibbles) and a qh
 * dword (2 bits), VPDPBUSD against the 4 activations broadcast, 4 a sub-block of 16 (int32: at
 * most 16 x 63 x 127); times the row's signed scale (VPMULLD); the -32 zero point as
 * 32 sum_j sc_j xsum_j by 8 VPDPWSSD of the scales' int16 pairs against the activations'
 * 16-value sums. No reduction across lanes; the float step is the scalar kernel's, lane-wise.
 * n0 is a multiple of 16 and whole groups are read. */
#include "../kquant_avx512.h"

/* A VPSHUFB control: in every dword, byte i (0..3) of it at the top of the dword (then VPSRAD
 * 24: the signed byte as int32), or (pair) bytes i, i + 1 at the top of its two words (then
 * VPSRAW 8: a signed int16 pair). */
IFZ_INLINE __m512i q6kx16_top(int i, int pair) {
    const char z = (char)0x80;
    char c[16];
    for (int r = 0; r < 4; r++) {
        c[4 * r] = z;
        c[4 * r + 1] = pair ? (char)(4 * r + i) : z;
        c[4 * r + 2] = z;
        c[4 * r + 3] = (char)(4 * r + i + pair);
    }
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)c));
}

IFZ_INLINE __m512i q6kx16_ld(const uint8_t *blk, int k) {
    return _mm512_loadu_si512((const void *)(blk + 64 * ifk_x16_row(IF_Q6K_BLOCK_BYTES, (size_t)k)));
}

IFZ_INLINE __m512i q6kx16_x4(const int8_t *x) {
    int32_t v;
    memcpy(&v, x, 4);
    return _mm512_set1_epi32(v);
}

void if_q6kx16_gemv_1x16_avx512_vnni(float *out, const int8_t *xq, const float *xd,
                                     const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                     size_t K) {
    const size_t nb = K / IF_QK, bb = 16 * IF_Q6K_BLOCK_BYTES, gbytes = nb * bb;
    const __m512i m4 = _mm512_set1_epi8(15), k30 = _mm512_set1_epi8(0x30);
    for (size_t n = n0; n < n1; n += 16) {
        const uint8_t *g = w + n / 16 * gbytes;
        __m512 acc = _mm512_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            size_t dw, tl;
            ifk_x16_block(b, nb, IF_Q6K_BLOCK_BYTES, &dw, &tl);
            const uint8_t *blk = g + dw;
            const int8_t *x = xq + b * IF_QK;
            const int16_t *xs = xsum + b * 16;
            __m512i S[4]; /* lane r: row r's scales 4i .. 4i + 3 */
            IFZ_UNROLL
            for (int i = 0; i < 4; i++) S[i] = q6kx16_ld(blk, 48 + i);
            /* sum_j sc_j xsum_j, by int16 pairs (sc_2p, sc_2p+1) x (xsum_2p, xsum_2p+1) */
            __m512i corr = _mm512_setzero_si512();
            IFZ_UNROLL
            for (int p = 0; p < 8; p++) {
                const __m512i sp = _mm512_srai_epi16(
                    _mm512_shuffle_epi8(S[p / 2], q6kx16_top(2 * (p % 2), 1)), 8);
                corr = _mm512_dpwssd_epi32(corr, sp, q6kx16_x4((const int8_t *)(xs + 2 * p)));
            }
            __m512i sumi = _mm512_setzero_si512();
            IFZ_UNROLL
            for (int h = 0; h < 2; h++) {
                __m512i dot[4][2]; /* t, half of the 32 values: sub-block 8h + 2t + half */
                IFZ_UNROLL
                for (int t = 0; t < 4; t++) dot[t][0] = dot[t][1] = _mm512_setzero_si512();
                IFZ_UNROLL
                for (int q = 0; q < 8; q++) { /* values l = 4q .. 4q + 3 of each t */
                    const __m512i A = q6kx16_ld(blk, 16 * h + q);
                    const __m512i B = q6kx16_ld(blk, 16 * h + 8 + q);
                    const __m512i C = q6kx16_ld(blk, 32 + 8 * h + q);
                    __m512i u[4];
                    u[0] = _mm512_or_si512(_mm512_and_si512(A, m4),
                                           _mm512_and_si512(_mm512_slli_epi16(C, 4), k30));
                    u[1] = _mm512_or_si512(_mm512_and_si512(B, m4),
                                           _mm512_and_si512(_mm512_slli_epi16(C, 2), k30));
                    u[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(A, 4), m4),
                                           _mm512_and_si512(C, k30));
                    u[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(B, 4), m4),
                                           _mm512_and_si512(_mm512_srli_epi16(C, 2), k30));
                    IFZ_UNROLL
                    for (int t = 0; t < 4; t++)
                        dot[t][q / 4] = _mm512_dpbusd_epi32(
                            dot[t][q / 4], u[t], q6kx16_x4(x + 128 * h + 32 * t + 4 * q));
                }
                IFZ_UNROLL
                for (int t = 0; t < 4; t++)
                    IFZ_UNROLL
                    for (int e = 0; e < 2; e++) {
                        const int j = 8 * h + 2 * t + e;
                        const __m512i sc = _mm512_srai_epi32(
                            _mm512_shuffle_epi8(S[j / 4], q6kx16_top(j % 4, 0)), 24);
                        sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(dot[t][e], sc));
                    }
            }
            sumi = _mm512_sub_epi32(sumi, _mm512_slli_epi32(corr, 5));
            const __m512 d = _mm512_cvtph_ps(
                _mm256_loadu_si256((const __m256i *)(const void *)(g + tl)));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(xd[b])),
                                                   _mm512_cvtepi32_ps(sumi)));
        }
        const size_t nr = n1 - n < 16 ? n1 - n : 16;
        _mm512_mask_storeu_ps(out + n, (__mmask16)((1u << nr) - 1u), acc);
    }
}

const if_kq_gemv_kernel if_k_q6kx16_gemv_1x16_avx512_vnni = {
    .name = "q6kx16_gemv_1x16_avx512_vnni", .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 1, .nr = 16, .run = if_q6kx16_gemv_1x16_avx512_vnni};
