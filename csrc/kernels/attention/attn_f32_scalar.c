/* attn_f32_scalar.c - the reference attention kernel: plain C, fp32 arithmetic over any cache
 * type, in exactly the order the contract in isaforge.h (if_attn_fn) states. Every other fp32
 * tier equals it bit for bit.
 *
 * Per query tile (IF_ATTN_Q_TILE rows) and kv group: walk the key blocks any row of the tile
 * sees; convert each block's keys and values to float once (float32 caches are read in
 * place); then for each row and head of the tile do one online-softmax step over the keys of
 * the block that row sees. No (seq x seq) buffer: the state is (m, l, acc[head_size]) per
 * row and head. */
#include "attn_common.h"
#include "../kernels.h"
#include "../../detmath.h"

void if_attn_f32_scalar(const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1,
                        float *scratch) {
    enum { B = IF_ATTN_KEY_BLOCK, TQ = IF_ATTN_Q_TILE };
    const size_t hs = j->head_size, kv_mul = j->n_heads / j->n_kv_heads;
    const float sq = sqrtf((float)hs);
    const size_t H = h1 - h0;
    float *ms = scratch, *ls = ms + TQ * H, *acc = ls + TQ * H; /* (TQ, H), (TQ, H), (TQ, H, hs) */
    float *sc = acc + TQ * H * hs;                              /* (B) scores of one row, head */
    float *kb = sc + B, *vb = kb + (size_t)B * hs;              /* (B, hs) converted rows */
    const float *kr[B], *vr[B];
    for (size_t rt = r0; rt < r1; rt += TQ) {
        const size_t re = rt + TQ < r1 ? rt + TQ : r1, last = j->pos0 + re - 1;
        for (size_t g = h0 / kv_mul; g * kv_mul < h1; g++) {
            const size_t ha = g * kv_mul > h0 ? g * kv_mul : h0;
            const size_t hb = (g + 1) * kv_mul < h1 ? (g + 1) * kv_mul : h1;
            attn_tile_start(ms, ls, acc, TQ * H, hs);
            for (size_t bs = 0; bs <= last; bs += B) {
                const size_t be = bs + B;
                /* the keys of this block any row of the tile sees */
                size_t lo, hi, iv[4];
                attn_tile_span(j, rt, re, bs, be, &lo, &hi);
                if (lo >= hi) continue;
                for (size_t t = lo; t < hi; t++) {
                    kr[t - bs] = attn_row(j->kv, 0, t, g, hs, kb + (t - bs) * hs);
                    vr[t - bs] = attn_row(j->kv, 1, t, g, hs, vb + (t - bs) * hs);
                }
                for (size_t r = rt; r < re; r++) {
                    if (!attn_visible(j, j->pos0 + r, bs, be, iv)) continue;
                    for (size_t h = ha; h < hb; h++) {
                        const float *q = j->q + r * j->ldq + h * hs;
                        const size_t st = (r - rt) * H + (h - h0);
                        float m = ms[st], mb = -INFINITY;
                        for (int part = 0; part < 2; part++) {
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                const float *k = kr[t - bs];
                                float s = 0.0f;
                                for (size_t i = 0; i < hs; i++) s += q[i] * k[i];
                                s /= sq;
                                sc[t - bs] = s;
                                if (s > mb) mb = s;
                            }
                        }
                        const float mn = mb > m ? mb : m;
                        const float alpha = if_expf(m - mn);
                        float psum = 0.0f;
                        for (int part = 0; part < 2; part++) {
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                sc[t - bs] = if_expf(sc[t - bs] - mn);
                                psum += sc[t - bs];
                            }
                        }
                        ms[st] = mn;
                        ls[st] = ls[st] * alpha + psum;
                        float *o = acc + st * hs;
                        for (size_t i = 0; i < hs; i++) o[i] *= alpha;
                        for (int part = 0; part < 2; part++) {
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                const float p = sc[t - bs], *v = vr[t - bs];
                                for (size_t i = 0; i < hs; i++) o[i] += p * v[i];
                            }
                        }
                    }
                }
            }
            for (size_t r = rt; r < re; r++) {
                for (size_t h = ha; h < hb; h++) {
                    const size_t st = (r - rt) * H + (h - h0);
                    float *out = j->out + r * j->ldo + h * hs;
                    for (size_t i = 0; i < hs; i++) out[i] = acc[st * hs + i] / ls[st];
                }
            }
        }
    }
}
