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
#include "../detmath_avx512.h"

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
