/* Q8_0 GEMV on 16-row groups (if_q80_pack_x16), avx512_vnni: lane r = row r throughout. Per
 * block 8 aligned 64-byte loads (the same 4 values of 16 rows) against the 4 activations
 * broadcast from memory, VPDPBUSD on value + 128 from -128 xs (xs the block's activation sum),
 * so each lane ends with its row's exact dot product; the float step is the scalar kernel's,
 * lane-wise, the 16 rows' f16 scales one VCVTPH2PS. No reduction across lanes, and the group
 * is read as one sequential stream, each pair of blocks' lines prefetched IFLX_PF bytes ahead. */
#include <immintrin.h>
#include <string.h>

#include "../kernels.h"

#ifndef IFLX_PF
#define IFLX_PF 4096
#endif

void if_q80x16_gemv_1x16_avx512_vnni(float *out, const int8_t *xq, const float *xd,
                                     const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                     size_t K) {
    const size_t nb = K / IF_QL, pair = 32 * IF_Q80_BLOCK_BYTES, gbytes = nb / 2 * pair;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (size_t n = n0; n < n1; n += 16) {
        const uint8_t *g = w + n / 16 * gbytes;
        __m512 acc = _mm512_setzero_ps();
        for (size_t p = 0; p < nb / 2; p++) {
            const uint8_t *pr = g + p * pair;
            for (size_t o = 0; o < pair; o += 64)
                _mm_prefetch((const char *)(pr + IFLX_PF + o), _MM_HINT_T0);
            _Pragma("GCC unroll 2")
            for (size_t e = 0; e < 2; e++) {
                const size_t b = 2 * p + e;
                const int8_t *x = xq + b * IF_QL;
                __m512i dot = _mm512_set1_epi32(-128 * ((int32_t)xsum[2 * b] + xsum[2 * b + 1]));
                _Pragma("GCC unroll 8")
                for (size_t k = 0; k < 8; k++) {
                    int32_t a;
                    memcpy(&a, x + 4 * k, 4);
                    const __m512i v = _mm512_xor_si512(
                        _mm512_loadu_si512((const void *)(pr + 64 + 512 * e + 64 * k)), flip);
                    dot = _mm512_dpbusd_epi32(dot, v, _mm512_set1_epi32(a));
                }
                const __m512 d = _mm512_cvtph_ps(
                    _mm256_loadu_si256((const __m256i *)(const void *)(pr + 32 * e)));
                acc = _mm512_add_ps(
                    acc, _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(xd[b])),
                                       _mm512_cvtepi32_ps(dot)));
            }
        }
        const size_t nr = n1 - n < 16 ? n1 - n : 16;
        _mm512_mask_storeu_ps(out + n, (__mmask16)(nr == 16 ? 0xFFFF : (1u << nr) - 1), acc);
    }
}

const if_kq_gemv_kernel if_k_q80x16_gemv_1x16_avx512_vnni = {
    .name = "q80x16_gemv_1x16_avx512_vnni",
    .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 1,
    .nr = 16,
    .run = if_q80x16_gemv_1x16_avx512_vnni};
