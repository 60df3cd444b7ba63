/* f32_attn_16x64_scalar.c - the reference attention kernel: plain C, fp32 arithmetic over any cache
 * type, in exactly llama2.c run.c's order (the contract in isaforge.h, if_attn_fn). Every
 * other fp32 tier equals it bit for bit.
 *
 * Per query tile (IF_ATTN_Q_TILE rows) and kv group, three passes over the key blocks any row
 * of the tile sees, each block's keys or values converted to float once (float32 caches are
 * read in place): (1) every visible key's score into the (row, head)'s row of scores, at the
 * key's ordinal; (2) run.c's softmax of each row; (3) out += p_t * v_t, keys in order. No
 * (seq x seq) buffer: one row of scores per row and head of a tile. */
#include "attn_common.h"
#include "../kernels.h"
#include "../../detmath.h"

void if_f32_attn_16x64_scalar(const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1,
                        float *scratch) {
    enum { B = IF_ATTN_KEY_BLOCK, TQ = IF_ATTN_Q_TILE };
    const size_t hs = j->head_size, kv_mul = j->n_heads / j->n_kv_heads, ld = attn_score_ld(j);
    const size_t G = h1 - h0 < kv_mul ? h1 - h0 : kv_mul; /* heads of one group in the call */
    const float sq = sqrtf((float)hs);
    float *sc = scratch;                            /* (TQ, G, ld) scores, then probabilities */
    float *kb = sc + TQ * G * ld, *vb = kb + B * hs; /* (B, hs) converted rows */
    const float *br[B]; /* the block's keys (pass 1) or values (pass 3) */
    for (size_t rt = r0; rt < r1; rt += TQ) {
        const size_t re = rt + TQ < r1 ? rt + TQ : r1, last = j->pos0 + re - 1;
        for (size_t g = h0 / kv_mul; g * kv_mul < h1; g++) {
            const size_t ha = g * kv_mul > h0 ? g * kv_mul : h0;
            const size_t hb = (g + 1) * kv_mul < h1 ? (g + 1) * kv_mul : h1;
            /* 1. s_t = (q . k_t) / sqrt(head_size) for every key t the row sees */
            for (size_t bs = 0; bs <= last; bs += B) {
                size_t iv[4], ns, w0;
                if (!attn_block_rows(j, rt, re, bs, g, 0, kb, br)) continue;
                for (size_t r = rt; r < re; r++) {
                    if (!attn_visible(j, j->pos0 + r, bs, bs + B, iv)) continue;
                    attn_row_keys(j, j->pos0 + r, &ns, &w0);
                    for (size_t h = ha; h < hb; h++) {
                        const float *q = j->q + r * j->ldq + h * hs;
                        float *row = sc + ((r - rt) * G + (h - ha)) * ld;
                        for (int part = 0; part < 2; part++) {
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                const float *k = br[t - bs];
                                float s = 0.0f;
                                for (size_t i = 0; i < hs; i++) s += q[i] * k[i];
                                s /= sq;
                                row[t < ns ? t : ns + t - w0] = s;
                            }
                        }
                    }
                }
            }
            /* 2. run.c's softmax of each row: max, p = expf(s - max), sum in order, p /= sum */
            for (size_t r = rt; r < re; r++) {
                size_t ns, w0;
                const size_t n = attn_row_keys(j, j->pos0 + r, &ns, &w0);
                for (size_t h = ha; h < hb; h++) {
                    float *row = sc + ((r - rt) * G + (h - ha)) * ld, mx = row[0], sum = 0.0f;
                    for (size_t t = 1; t < n; t++)
                        if (row[t] > mx) mx = row[t];
                    for (size_t t = 0; t < n; t++) {
                        row[t] = if_expf(row[t] - mx);
                        sum += row[t];
                    }
                    for (size_t t = 0; t < n; t++) row[t] /= sum;
                    float *out = j->out + r * j->ldo + h * hs;
                    for (size_t i = 0; i < hs; i++) out[i] = 0.0f;
                }
            }
            /* 3. out_i += p_t * v_t,i, keys in order */
            for (size_t bs = 0; bs <= last; bs += B) {
                size_t iv[4], ns, w0;
                if (!attn_block_rows(j, rt, re, bs, g, 1, vb, br)) continue;
                for (size_t r = rt; r < re; r++) {
                    if (!attn_visible(j, j->pos0 + r, bs, bs + B, iv)) continue;
                    attn_row_keys(j, j->pos0 + r, &ns, &w0);
                    for (size_t h = ha; h < hb; h++) {
                        const float *row = sc + ((r - rt) * G + (h - ha)) * ld;
                        float *out = j->out + r * j->ldo + h * hs;
                        for (int part = 0; part < 2; part++) {
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                const float p = row[t < ns ? t : ns + t - w0], *v = br[t - bs];
                                for (size_t i = 0; i < hs; i++) out[i] += p * v[i];
                            }
                        }
                    }
                }
            }
        }
    }
}

const if_attn_kernel if_k_f32_attn_16x64_scalar = {.name = "f32_attn_16x64_scalar",
    .mr = IF_ATTN_Q_TILE, .nr = IF_ATTN_KEY_BLOCK, .run = if_f32_attn_16x64_scalar};
