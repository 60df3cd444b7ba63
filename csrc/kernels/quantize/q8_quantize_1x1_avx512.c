/* Activation quantization to Q8, AVX-512: 16 floats per vector, any group size (the last
 * vector of a group is a masked load, so buffers may end exactly at the last value).
 *
 * Exactly the scalar arithmetic: wmax = max |x| (VMAXPS with the running max as the second
 * operand, so a NaN input is ignored as by `a > wmax`), scale = wmax / 127.0f (true division),
 * v = x / scale (VDIVPS), then roundf's half away from zero done exactly: t = trunc(v);
 * t += copysign(1, v) when |v - t| >= 0.5 (v - t is exact). The int8 store truncates the int32
 * conversion to its low byte (VPMOVDB), as the scalar (int8_t) cast of cvttss2si does. A zero
 * group stores scale 0 and q 0. */
#include "../kernels.h"

#include <immintrin.h>

/* q[K], s[K/gs] from x[K]; see if_quantize_fn. Bit-exact with if_q8_quantize_1x1_scalar. */
void if_q8_quantize_1x1_avx512(int8_t *q, float *s, const float *x, size_t K, size_t gs) {
    if (gs == 0) {
        if_q8_quantize_1x1_scalar(q, s, x, K, gs);
        return;
    }
    const __m512i signbit = _mm512_set1_epi32((int)0x80000000u);
    const __m512i one = _mm512_castps_si512(_mm512_set1_ps(1.0f));
    const __m512 half = _mm512_set1_ps(0.5f);
    const size_t ng = K / gs;
    for (size_t g = 0; g < ng; g++) {
        const float *xg = x + g * gs;
        int8_t *qg = q + g * gs;
        __m512 vmax = _mm512_setzero_ps();
        size_t i = 0;
        for (; i + 16 <= gs; i += 16)
            vmax = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xg + i)), vmax);
        if (i < gs) {
            const __mmask16 m = (__mmask16)((1u << (gs - i)) - 1);
            vmax = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(m, xg + i)), vmax);
        }
        const float wmax = _mm512_reduce_max_ps(vmax);
        const float scale = wmax / 127.0f;
        s[g] = scale;
        if (scale == 0.0f) {
            for (i = 0; i + 64 <= gs; i += 64) _mm512_storeu_si512((void *)(qg + i), _mm512_setzero_si512());
            if (i < gs) _mm512_mask_storeu_epi8(qg + i, ((__mmask64)1 << (gs - i)) - 1, _mm512_setzero_si512());
            continue;
        }
        const __m512 vs = _mm512_set1_ps(scale);
        for (i = 0; i < gs; i += 16) {
            const __mmask16 m = gs - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (gs - i)) - 1);
            const __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, xg + i), vs);
            __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m512 d = _mm512_abs_ps(_mm512_sub_ps(v, t));
            const __mmask16 up = _mm512_cmp_ps_mask(d, half, _CMP_GE_OQ);
            const __m512i sgn = _mm512_and_si512(_mm512_castps_si512(v), signbit);
            t = _mm512_mask_add_ps(t, up, t, _mm512_castsi512_ps(_mm512_or_si512(one, sgn)));
            _mm512_mask_cvtepi32_storeu_epi8(qg + i, m, _mm512_cvttps_epi32(t));
        }
    }
}

const if_quantize_kernel if_k_q8_quantize_1x1_avx512 = {.name = "q8_quantize_1x1_avx512",
    .requires = IF_FEATS_AVX512, .mr = 1, .nr = 1, .run = if_q8_quantize_1x1_avx512};
