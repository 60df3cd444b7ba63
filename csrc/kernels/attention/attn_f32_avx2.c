/* attn_f32_avx2.c - fp32 attention with AVX2 (-mavx2 -mfma, -ffp-contract=off: no FMA is
 * formed): attn_f32_avx512.c's loops on 8-wide vectors, so it keeps each output's float order
 * exactly as attn_f32_scalar.c does:
 *   scores  8 keys per ymm from the block's transposed keys, q_i * k_i added head dim by head
 *           dim from 0, then one IEEE division by sqrt(head_size);
 *   P.V     8 head dims per ymm: acc * alpha, then + p_t * v_t for keys t in order (a masked
 *           load/store for a head_size tail);
 *   exp     8 keys at a time by exp8() (detmath_avx2.h: if_expf's steps in double lanes);
 *   max and the running sum stay scalar (keys in order).
 * So it equals the scalar kernel bit for bit. */
#include <immintrin.h>

#include "attn_common.h"
#include "../kernels.h"
#include "../../detmath.h"
#include "../detmath_avx2.h"

void if_attn_f32_avx2(const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1,
                      float *scratch) {
    enum { B = IF_ATTN_KEY_BLOCK, TQ = IF_ATTN_Q_TILE };
    const size_t hs = j->head_size, kv_mul = j->n_heads / j->n_kv_heads;
    const float sq = sqrtf((float)hs);
    const __m256 vsq = _mm256_set1_ps(sq);
    const size_t H = h1 - h0, nv = (hs + 7) / 8;
    /* lanes of the last 8-wide head-dim chunk that exist (all when 8 divides hs) */
    const __m256i all = _mm256_set1_epi32(-1);
    const __m256i tail = hs % 8 ? _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(hs % 8)),
                                                     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
                                : all;
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
                        /* scores of the 8-key chunks covering [a, z) */
                        for (size_t c = (a - bs) / 8; c * 8 < z - bs; c++) {
                            __m256 s = _mm256_setzero_ps();
                            const float *kc = kt + c * 8;
                            for (size_t i = 0; i < hs; i++)
                                s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_set1_ps(q[i]),
                                                                   _mm256_loadu_ps(kc + i * B)));
                            _mm256_storeu_ps(sc + c * 8, _mm256_div_ps(s, vsq));
                        }
                        float m = ms[st], mb = -INFINITY;
                        for (int part = 0; part < 2; part++)
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++)
                                if (sc[t - bs] > mb) mb = sc[t - bs];
                        const float mn = mb > m ? mb : m;
                        const float alpha = if_expf(m - mn);
                        const __m256 vmn = _mm256_set1_ps(mn);
                        for (size_t c = (a - bs) / 8; c * 8 < z - bs; c++)
                            _mm256_storeu_ps(sc + c * 8,
                                             exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + c * 8), vmn)));
                        float psum = 0.0f;
                        for (int part = 0; part < 2; part++)
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++)
                                psum += sc[t - bs];
                        ms[st] = mn;
                        ls[st] = ls[st] * alpha + psum;
                        float *o = acc + st * hs;
                        const __m256 va = _mm256_set1_ps(alpha);
                        for (size_t u = 0; u < nv; u++) {
                            const __m256i mk = u + 1 == nv ? tail : all;
                            __m256 x = _mm256_mul_ps(_mm256_maskload_ps(o + 8 * u, mk), va);
                            for (int part = 0; part < 2; part++) {
                                for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                    __m256 v = _mm256_maskload_ps(vr[t - bs] + 8 * u, mk);
                                    __m256 pv = _mm256_mul_ps(_mm256_set1_ps(sc[t - bs]), v);
                                    x = _mm256_add_ps(x, pv);
                                }
                            }
                            _mm256_maskstore_ps(o + 8 * u, mk, x);
                        }
                    }
                }
            }
            for (size_t r = rt; r < re; r++) {
                for (size_t h = ha; h < hb; h++) {
                    const size_t st = (r - rt) * H + (h - h0);
                    float *out = j->out + r * j->ldo + h * hs;
                    const __m256 vl = _mm256_set1_ps(ls[st]);
                    for (size_t u = 0; u < nv; u++) {
                        const __m256i mk = u + 1 == nv ? tail : all;
                        __m256 x = _mm256_maskload_ps(acc + st * hs + 8 * u, mk);
                        _mm256_maskstore_ps(out + 8 * u, mk, _mm256_div_ps(x, vl));
                    }
                }
            }
        }
    }
}
