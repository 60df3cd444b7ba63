/* K8 activation quantization, AVX-512: the tier's Q8 quantizer at gs = 256 (bit-identical to
 * the scalar one), then the 16-value sums, 64 values per step (VPMADDUBSW against ones, then
 * VPMADDWD pairs: exact int16 sums). */
#include <immintrin.h>

#include "../kquant_common.h"

void if_k8_quantize_1x1_avx512(int8_t *q, float *d, int16_t *bsum, const float *x, size_t K) {
    if_q8_quantize_1x1_avx512(q, d, x, K, IF_QK);
    const __m512i ones8 = _mm512_set1_epi8(1), ones16 = _mm512_set1_epi16(1);
    for (size_t i = 0; i < K; i += 64) {
        const __m512i s2 = _mm512_maddubs_epi16(ones8, _mm512_loadu_si512(q + i));
        const __m512i s4 = _mm512_madd_epi16(s2, ones16);                  /* 16 sums of 4 */
        const __m512i s8 = _mm512_add_epi32(s4, _mm512_srli_epi64(s4, 32)); /* lanes 2k */
        const __m512i s16 = _mm512_add_epi32(s8, _mm512_bsrli_epi128(s8, 8)); /* lanes 4k */
        /* lanes 0, 4, 8, 12: the four 16-value sums of these 64 values */
        const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
        const __m128i s = _mm512_castsi512_si128(_mm512_permutexvar_epi32(idx, s16));
        _mm_storel_epi64((__m128i *)(void *)(bsum + i / 16), _mm_packs_epi32(s, s));
    }
}

const if_k8_quantize_kernel if_k_k8_quantize_1x1_avx512 = {.name = "k8_quantize_1x1_avx512",
    .requires = IF_FEATS_AVX512, .mr = 1, .nr = 1, .run = if_k8_quantize_1x1_avx512};
