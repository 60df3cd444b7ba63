/* K8 activation quantization, AVX2: the tier's Q8 quantizer at gs = 256 (bit-identical to the
 * scalar one), then the 16-value sums, 32 values per step (VPMADDUBSW against ones, VPMADDWD
 * pairs, then an in-lane add: exact). */
#include <immintrin.h>

#include "../kquant_common.h"

void if_k8_quantize_1x1_avx2(int8_t *q, float *d, int16_t *bsum, const float *x, size_t K) {
    if_q8_quantize_1x1_avx2(q, d, x, K, IF_QK);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (size_t i = 0; i < K; i += 32) {
        const __m256i s2 = _mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i *)(const void *)(q + i)));
        const __m256i s4 = _mm256_madd_epi16(s2, ones16); /* 8 sums of 4 */
        const __m256i s8 = _mm256_hadd_epi32(s4, s4);     /* lane: sums of 8, twice */
        const __m256i s16 = _mm256_hadd_epi32(s8, s8);    /* lane 0 of each 128: sum of 16 */
        bsum[i / 16] = (int16_t)_mm256_cvtsi256_si32(s16);
        bsum[i / 16 + 1] = (int16_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(s16, 1));
    }
}

const if_k8_quantize_kernel if_k_k8_quantize_1x1_avx2 = {.name = "k8_quantize_1x1_avx2",
    .requires = IF_FEATS_AVX2, .mr = 1, .nr = 1, .run = if_k8_quantize_1x1_avx2};
