/* Q4_0 GEMV on 16-row groups (if_q40_pack_x16), avx512_vnni: q80x16_gemv_1x16_avx512_vnni's
 * shape with 4-bit values. Per block 4 aligned 64-byte loads (the same 8 nibbles of 16 rows),
 * the low and high nibbles VPDPBUSD against the 4 activations broadcast, from -8 xs (xs the
 * block's activation sum), so each lane ends with its row's dot - 8 xs exactly; the float step
 * is the scalar kernel's, lane-wise, the 16 rows' f16 scales one VCVTPH2PS. No reduction
 * across lanes, and the group is read as one sequential stream with no software prefetch (the
 * hardware's keeps ahead of it: 93-99 % of the read bandwidth cold at the 1B shapes, where
 * prefetching 4 KiB ahead into L1 as the Q8_0 GEMV does read 76-100 %). */
#include <immintrin.h>
#include <string.h>

#include "../kernels.h"

static inline __m512i q40x16_x4(const int8_t *x) {
    int32_t a;
    memcpy(&a, x, 4);
    return _mm512_set1_epi32(a);
}

void if_q40x16_gemv_1x16_avx512_vnni(float *out, const int8_t *xq, const float *xd,
                                     const int16_t *xsum, const uint8_t *w, size_t n0, size_t n1,
                                     size_t K) {
    const size_t nb = K / IF_QL, pair = 32 * IF_Q40_BLOCK_BYTES, gbytes = nb / 2 * pair;
    const __m512i m4 = _mm512_set1_epi8(15);
    for (size_t n = n0; n < n1; n += 16) {
        const uint8_t *g = w + n / 16 * gbytes;
        __m512 acc = _mm512_setzero_ps();
        for (size_t p = 0; p < nb / 2; p++) {
            const uint8_t *pr = g + p * pair;
            _Pragma("GCC unroll 2")
            for (size_t e = 0; e < 2; e++) {
                const size_t b = 2 * p + e;
                const int8_t *x = xq + b * IF_QL;
                __m512i dot = _mm512_set1_epi32(-8 * ((int32_t)xsum[2 * b] + xsum[2 * b + 1]));
                _Pragma("GCC unroll 4")
                for (size_t k = 0; k < 4; k++) {
                    const __m512i v =
                        _mm512_loadu_si512((const void *)(pr + 64 + 256 * e + 64 * k));
                    dot = _mm512_dpbusd_epi32(dot, _mm512_and_si512(v, m4), q40x16_x4(x + 4 * k));
                    dot = _mm512_dpbusd_epi32(dot, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                              q40x16_x4(x + 16 + 4 * k));
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

const if_kq_gemv_kernel if_k_q40x16_gemv_1x16_avx512_vnni = {
    .name = "q40x16_gemv_1x16_avx512_vnni", .requires = IF_FEATS_AVX512 | IF_FEAT_AVX512_VNNI,
    .mr = 1, .nr = 16, .run = if_q40x16_gemv_1x16_avx512_vnni};
