/* Activation quantization to Q8, AVX2 (-mavx2 -mfma; also the avx_vnni tier's quantizer).
 * Per group: max |x| with VMAXPS (|x| first, so a NaN input is skipped exactly like the
 * scalar `if (a > wmax)`), scale = wmax / 127.0f (a true division), then 8 (or 4) values at a
 * time: v = x / scale with VDIVPS, rounded half away from zero exactly as roundf:
 * t = trunc(v); t += copysign(1, v) when |v - t| >= 0.5 (v - t is exact), converted and
 * packed to int8 keeping the low byte of the int32 (as the scalar cast compiles: with a
 * denormal scale x / scale can round to 128 or more, which the scalar wraps, not saturates).
 * Bit-identical to q8_quantize_1x1_scalar; gs not a multiple of 4 uses it. */
#include <immintrin.h>
#include <string.h>

#include "../kernels.h"

static inline __m256 round_away8(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 d = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 ge = _mm256_cmp_ps(d, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    return _mm256_add_ps(t, _mm256_and_ps(ge, one));
}

static inline __m128 round_away4(__m128 v) {
    const __m128 sign = _mm_set1_ps(-0.0f);
    const __m128 t = _mm_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m128 d = _mm_andnot_ps(sign, _mm_sub_ps(v, t));
    const __m128 ge = _mm_cmpge_ps(d, _mm_set1_ps(0.5f));
    const __m128 one = _mm_or_ps(_mm_and_ps(v, sign), _mm_set1_ps(1.0f));
    return _mm_add_ps(t, _mm_and_ps(ge, one));
}

void if_q8_quantize_1x1_avx2(int8_t *q, float *s, const float *x, size_t K, size_t gs) {
    if (gs == 0 || gs % 4 != 0) {
        if_q8_quantize_1x1_scalar(q, s, x, K, gs);
        return;
    }
    const __m256 sign8 = _mm256_set1_ps(-0.0f);
    const __m128 sign4 = _mm_set1_ps(-0.0f);
    for (size_t g = 0; g < K / gs; g++) {
        const float *xg = x + g * gs;
        int8_t *qg = q + g * gs;
        __m256 m8 = _mm256_setzero_ps();
        size_t i = 0;
        for (; i + 8 <= gs; i += 8)
            m8 = _mm256_max_ps(_mm256_andnot_ps(sign8, _mm256_loadu_ps(xg + i)), m8);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
        if (i < gs) m4 = _mm_max_ps(_mm_andnot_ps(sign4, _mm_loadu_ps(xg + i)), m4);
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        const float wmax = _mm_cvtss_f32(m4);
        const float scale = wmax / 127.0f;
        s[g] = scale;
        if (scale == 0.0f) {
            memset(qg, 0, gs);
            continue;
        }
        const __m256 sc8 = _mm256_set1_ps(scale);
        const __m256i lo = _mm256_set1_epi32(0xFF);
        for (i = 0; i + 32 <= gs; i += 32) {
            const __m256i a = _mm256_and_si256(lo, _mm256_cvttps_epi32(round_away8(_mm256_div_ps(_mm256_loadu_ps(xg + i), sc8))));
            const __m256i b = _mm256_and_si256(lo, _mm256_cvttps_epi32(round_away8(_mm256_div_ps(_mm256_loadu_ps(xg + i + 8), sc8))));
            const __m256i c = _mm256_and_si256(lo, _mm256_cvttps_epi32(round_away8(_mm256_div_ps(_mm256_loadu_ps(xg + i + 16), sc8))));
            const __m256i d = _mm256_and_si256(lo, _mm256_cvttps_epi32(round_away8(_mm256_div_ps(_mm256_loadu_ps(xg + i + 24), sc8))));
            /* the packs work per 128-bit lane: bytes come out in order a0 b0 c0 d0 a1 b1 c1 d1
             * (4-value pieces); the dword permute restores a b c d. */
            const __m256i p = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));
            const __m256i o = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(qg + i), o);
        }
        for (; i + 8 <= gs; i += 8) {
            const __m256i a = _mm256_and_si256(lo, _mm256_cvttps_epi32(round_away8(_mm256_div_ps(_mm256_loadu_ps(xg + i), sc8))));
            const __m128i p16 = _mm_packus_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
            _mm_storel_epi64((__m128i *)(qg + i), _mm_packus_epi16(p16, p16));
        }
        if (i < gs) {
            const __m128i a = _mm_and_si128(_mm256_castsi256_si128(lo),
                                            _mm_cvttps_epi32(round_away4(_mm_div_ps(_mm_loadu_ps(xg + i), _mm_set1_ps(scale)))));
            const __m128i p16 = _mm_packus_epi32(a, a);
            const int32_t v = _mm_cvtsi128_si32(_mm_packus_epi16(p16, p16));
            memcpy(qg + i, &v, 4);
        }
    }
}

const if_quantize_kernel if_k_q8_quantize_1x1_avx2 = {.name = "q8_quantize_1x1_avx2",
    .requires = IF_FEATS_AVX2, .mr = 1, .nr = 1, .run = if_q8_quantize_1x1_avx2};
