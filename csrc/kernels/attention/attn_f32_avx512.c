/* attn_f32_avx512.c - fp32 attention with AVX-512F (-mavx512f ..., no FMA: -ffp-contract=off).
 *
 * The loops and the per-output float order are attn_f32_scalar.c's; only the inner loops are
 * vectorized, in ways that keep each output's order:
 *   scores  16 keys per zmm: the key block is transposed once per (tile, kv group) into
 *           kt[i][t] so s[t..t+15] = ((0 + q0*k0) + q1*k1) + ... runs head dim by head dim,
 *           exactly the scalar loop for each key, then one IEEE division by sqrt(head_size);
 *   P.V     16 head dims per zmm: acc[i..i+15] = acc * alpha, then + p_t * v_t for keys t in
 *           order (broadcast p_t), masked for a head_size tail;
 *   exp     16 keys at a time by exp16(), detmath.c's if_expf step by step in double lanes
 *           (same constants, same operation order, no FMA), so the same bits;
 *   max and the running sum stay scalar (keys in order).
 * So it equals the scalar kernel bit for bit. */
#include <immintrin.h>

#include "attn_common.h"
#include "../kernels.h"
#include "../../detmath.h"

/* exp_d of detmath.c on 8 double lanes: y = k ln2 + r, Taylor series of exp(r) to r^14 by
 * Horner, scaled by 2^(k/2) * 2^(k - k/2) (C's truncating k/2). */
static __m512d exp8d(__m512d y) {
    static const double inv_fact[] = {
        1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
        1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
        1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        1.0 / 2.0,
        1.0,                1.0};
    const __m512d t = _mm512_mul_pd(y, _mm512_set1_pd(1.44269504088896338700e+00));
    /* round half away from zero: trunc(t +- 0.5) */
    const __mmask8 neg = _mm512_cmp_pd_mask(t, _mm512_setzero_pd(), _CMP_LT_OQ);
    __m512d h = _mm512_mask_blend_pd(neg, _mm512_set1_pd(0.5), _mm512_set1_pd(-0.5));
    const __m512d kd =
        _mm512_roundscale_pd(_mm512_add_pd(t, h), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_sub_pd(y, _mm512_mul_pd(kd, _mm512_set1_pd(6.93147180369123816490e-01)));
    r = _mm512_sub_pd(r, _mm512_mul_pd(kd, _mm512_set1_pd(1.90821492927058770002e-10)));
    __m512d p = _mm512_set1_pd(1.0 / 87178291200.0);
    for (int i = 0; i < 14; i++)
        p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(inv_fact[i]));
    const __m256i k = _mm512_cvttpd_epi32(kd);
    const __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(k, _mm256_srli_epi32(k, 31)), 1);
    const __m256i k2 = _mm256_sub_epi32(k, k1);
    const __m512i bias = _mm512_set1_epi64(1023);
    const __m512d s1 = _mm512_castsi512_pd(
        _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(k1), bias), 52));
    const __m512d s2 = _mm512_castsi512_pd(
        _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtepi32_epi64(k2), bias), 52));
    return _mm512_mul_pd(_mm512_mul_pd(p, s1), s2);
}

/* if_expf on 16 lanes: the same bits (NaN passes through, > 88.8 is +inf, < -104 is 0). */
static __m512 exp16(__m512 x) {
    const __m512d lo = exp8d(_mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    const __m512d hi = exp8d(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
        _mm512_castps_pd(x), 1))));
    __m512 e = _mm512_castps256_ps512(_mm512_cvtpd_ps(lo));
    e = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(e),
                                            _mm256_castps_pd(_mm512_cvtpd_ps(hi)), 1));
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OQ), e,
                             _mm512_setzero_ps());
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(88.8f), _CMP_GT_OQ), e,
                             _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, x);
}

void if_attn_f32_avx512(const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1,
                        float *scratch) {
    enum { B = IF_ATTN_KEY_BLOCK, TQ = IF_ATTN_Q_TILE };
    const size_t hs = j->head_size, kv_mul = j->n_heads / j->n_kv_heads;
    const float sq = sqrtf((float)hs);
    const __m512 vsq = _mm512_set1_ps(sq);
    const size_t H = h1 - h0, nv = (hs + 15) / 16;
    const __mmask16 tail = (__mmask16)((hs % 16) ? ((1u << (hs % 16)) - 1) : 0xffffu);
    float *ms = scratch, *ls = ms + TQ * H, *acc = ls + TQ * H; /* as the scalar kernel */
    float *sc = acc + TQ * H * hs;                              /* (B) */
    /* (hs, B) transposed keys, (B, hs) converted values, (hs) one converted key */
    float *kt = sc + B, *vb = kt + (size_t)B * hs, *kb = vb + (size_t)B * hs;
    const float *vr[B];
    for (size_t rt = r0; rt < r1; rt += TQ) {
        const size_t re = rt + TQ < r1 ? rt + TQ : r1, last = j->pos0 + re - 1;
        for (size_t g = h0 / kv_mul; g * kv_mul < h1; g++) {
            const size_t ha = g * kv_mul > h0 ? g * kv_mul : h0;
            const size_t hb = (g + 1) * kv_mul < h1 ? (g + 1) * kv_mul : h1;
            attn_tile_start(ms, ls, acc, TQ * H, hs);
            for (size_t bs = 0; bs <= last; bs += B) {
                const size_t be = bs + B;
                size_t lo, hi, iv[4];
                attn_tile_span(j, rt, re, bs, be, &lo, &hi);
                if (lo >= hi) continue;
                for (size_t t = lo; t < hi; t++) {
                    const float *k = attn_row(j->kv, 0, t, g, hs, kb);
                    for (size_t i = 0; i < hs; i++) kt[i * B + (t - bs)] = k[i];
                    vr[t - bs] = attn_row(j->kv, 1, t, g, hs, vb + (t - bs) * hs);
                }
                for (size_t r = rt; r < re; r++) {
                    if (!attn_visible(j, j->pos0 + r, bs, be, iv)) continue;
                    const size_t a = iv[1] > iv[0] ? iv[0] : iv[2];
                    const size_t z = iv[3] > iv[2] ? iv[3] : iv[1];
                    for (size_t h = ha; h < hb; h++) {
                        const float *q = j->q + r * j->ldq + h * hs;
                        const size_t st = (r - rt) * H + (h - h0);
                        /* scores of the 16-key chunks covering [a, z) */
                        for (size_t c = (a - bs) / 16; c * 16 < z - bs; c++) {
                            __m512 s = _mm512_setzero_ps();
                            const float *kc = kt + c * 16;
                            for (size_t i = 0; i < hs; i++)
                                s = _mm512_add_ps(s, _mm512_mul_ps(_mm512_set1_ps(q[i]),
                                                                   _mm512_loadu_ps(kc + i * B)));
                            _mm512_storeu_ps(sc + c * 16, _mm512_div_ps(s, vsq));
                        }
                        float m = ms[st], mb = -INFINITY;
                        for (int part = 0; part < 2; part++)
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++)
                                if (sc[t - bs] > mb) mb = sc[t - bs];
                        const float mn = mb > m ? mb : m;
                        const float alpha = if_expf(m - mn);
                        const __m512 vmn = _mm512_set1_ps(mn);
                        for (size_t c = (a - bs) / 16; c * 16 < z - bs; c++)
                            _mm512_storeu_ps(sc + c * 16, exp16(_mm512_sub_ps(
                                                               _mm512_loadu_ps(sc + c * 16), vmn)));
                        float psum = 0.0f;
                        for (int part = 0; part < 2; part++)
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++)
                                psum += sc[t - bs];
                        ms[st] = mn;
                        ls[st] = ls[st] * alpha + psum;
                        float *o = acc + st * hs;
                        const __m512 va = _mm512_set1_ps(alpha);
                        for (size_t u = 0; u < nv; u++) {
                            const __mmask16 mk = u + 1 == nv ? tail : 0xffff;
                            __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, o + 16 * u), va);
                            for (int part = 0; part < 2; part++) {
                                for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                    __m512 v = _mm512_maskz_loadu_ps(mk, vr[t - bs] + 16 * u);
                                    __m512 pv = _mm512_mul_ps(_mm512_set1_ps(sc[t - bs]), v);
                                    x = _mm512_add_ps(x, pv);
                                }
                            }
                            _mm512_mask_storeu_ps(o + 16 * u, mk, x);
                        }
                    }
                }
            }
            for (size_t r = rt; r < re; r++) {
                for (size_t h = ha; h < hb; h++) {
                    const size_t st = (r - rt) * H + (h - h0);
                    float *out = j->out + r * j->ldo + h * hs;
                    const __m512 vl = _mm512_set1_ps(ls[st]);
                    for (size_t u = 0; u < nv; u++) {
                        const __mmask16 mk = u + 1 == nv ? tail : 0xffff;
                        __m512 x = _mm512_maskz_loadu_ps(mk, acc + st * hs + 16 * u);
                        _mm512_mask_storeu_ps(out + 16 * u, mk, _mm512_div_ps(x, vl));
                    }
                }
            }
        }
    }
}
