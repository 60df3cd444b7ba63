/* attn_f32_simd_body.h - the fp32 attention kernel body shared by the AVX2 and AVX-512 files
 * (internal; each includes it once, compiled with only its own ISA flags). The passes and the
 * per-output float order are f32_attn_16x64_scalar.c's (run.c's); only the inner loops are
 * vectorized, in ways that keep each output's order:
 *   keys    the block's keys are transposed once per (tile, kv group) into kt[i][t], in 8x8
 *           tiles (KT8X8), whole W-key chunks (a chunk's keys past the ones the tile sees are
 *           copies of its nearest seen key, so every lane read below holds a real key); a
 *           cache whose keys are stored block-transposed (if_kv_layer.keys_t, no sinks) is
 *           read in place by a decode row, or its chunks copied into kt for a longer tile
 *           (lanes past the keys a row sees hold other slots' keys or the zeros the cache
 *           started with: computed, never used);
 *   scores  W keys per vector: s[t..t+W-1] = ((0 + q0*k0) + q1*k1) + ... head dim by head
 *           dim, exactly the scalar loop for each key, then one IEEE division by
 *           sqrt(head_size); up to 8 chunks at once, each its own accumulator (independent
 *           chains, interleaved);
 *   softmax the max and the sum stay scalar (keys in order; the chains of up to 4 heads of a
 *           row interleaved); p = exp(s - max) W keys at a time by VEXP (if_expf lane by
 *           lane: detmath_avx2.h / detmath_avx512.h), p / sum W at a time (IEEE division);
 *           whole vectors, masked only for the row's tail;
 *   P.V     W head dims per vector: out = out + p_t * v_t for keys t in order (broadcast p_t),
 *           up to 8 vectors of head dims at once, each its own accumulator (the key loop
 *           outside, the head-dim vectors inside: independent chains interleaved), masked for
 *           a head_size tail.
 * So every includer equals the scalar kernel bit for bit.
 *
 * The includer defines: ATTN_FN (the function name); VF, VM (float vector and lane-mask types);
 * W (lanes, a multiple of 8 dividing IF_ATTN_KEY_BLOCK); VMASK_ALL and VMASK_TAIL(n) (all
 * lanes, the first n < W lanes); VZERO(), VSET1(x), VADD, VSUB, VMUL, VDIV (IEEE, no FMA);
 * VLOAD(p), VSTORE(p, v) (unaligned); VMLOAD(p, m) (masked-off lanes read as 0 and never
 * touched), VMSTORE(p, m, v); VEXP(v) (if_expf per lane); KT8X8(src, i, dst, ld) (a copy:
 * dst[m * ld + k] = src[k][i + m] for k, m < 8; src an array of 8 float pointers). */

#define ATTN_INLINE static inline __attribute__((always_inline))

/* Scores of the block's W-key chunks c .. c + N - 1 (N <= 8) into bsc: per chunk one
 * accumulator, head dim by head dim in order, then / sqrt(head_size). */
ATTN_INLINE void attn_scores_n(const float *q, const float *kt, size_t hs, VF vsq, float *bsc,
                               size_t c, const int N) {
    VF s[8];
    for (int k = 0; k < N; k++) s[k] = VZERO();
    const float *kc = kt + c * W;
    for (size_t i = 0; i < hs; i++) {
        const VF qi = VSET1(q[i]);
        const float *ki = kc + i * IF_ATTN_KEY_BLOCK;
        for (int k = 0; k < N; k++) s[k] = VADD(s[k], VMUL(qi, VLOAD(ki + k * W)));
    }
    for (int k = 0; k < N; k++) VSTORE(bsc + (c + k) * W, VDIV(s[k], vsq));
}

/* out[0 .. N*W) += p_t * v_t[off ..] for the block's visible keys t in order (N <= 8 vectors,
 * one accumulator each; masked: the last vector is the head_size tail, lanes mk). row: the
 * (row, head)'s probabilities; key t's is row[t] (sinks) or row[ns + t - w0] (window). */
ATTN_INLINE void attn_pv_n(float *out, const float *row, const float *const *vr, size_t off,
                           const size_t iv[4], size_t bs, size_t ns, size_t w0, const int N,
                           const int masked, VM mk) {
    VF x[8];
    for (int k = 0; k < N; k++)
        x[k] = masked && k == N - 1 ? VMLOAD(out + k * W, mk) : VLOAD(out + k * W);
    for (int part = 0; part < 2; part++) {
        const size_t d = part ? ns - w0 : 0; /* ordinal = t + d (mod 2^64) */
        for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
            const VF p = VSET1(row[t + d]);
            const float *v = vr[t - bs] + off;
            for (int k = 0; k < N; k++)
                x[k] = VADD(x[k], VMUL(p, masked && k == N - 1 ? VMLOAD(v + k * W, mk)
                                                               : VLOAD(v + k * W)));
        }
    }
    for (int k = 0; k < N; k++) {
        if (masked && k == N - 1)
            VMSTORE(out + k * W, mk, x[k]);
        else
            VSTORE(out + k * W, x[k]);
    }
}

/* For N <= 4 rows of n scores, one chain each, interleaved: mx[k] = run.c's max of rows[k]
 * (row[0], then each later score greater than it) when mx, else sum[k] = its sum in key
 * order from 0. */
ATTN_INLINE void attn_max_sum_n(float *const *rows, size_t n, float *mx, float *sum,
                                const int N) {
    float a[4];
    if (mx) {
        for (int k = 0; k < N; k++) a[k] = rows[k][0];
        for (size_t t = 1; t < n; t++)
            for (int k = 0; k < N; k++)
                if (rows[k][t] > a[k]) a[k] = rows[k][t];
        for (int k = 0; k < N; k++) mx[k] = a[k];
    } else {
        for (int k = 0; k < N; k++) a[k] = 0.0f;
        for (size_t t = 0; t < n; t++)
            for (int k = 0; k < N; k++) a[k] += rows[k][t];
        for (int k = 0; k < N; k++) sum[k] = a[k];
    }
}

static void attn_max_sum(float *const *rows, size_t n, float *mx, float *sum, size_t N) {
    switch (N) {
    case 4: attn_max_sum_n(rows, n, mx, sum, 4); break;
    case 3: attn_max_sum_n(rows, n, mx, sum, 3); break;
    case 2: attn_max_sum_n(rows, n, mx, sum, 2); break;
    default: attn_max_sum_n(rows, n, mx, sum, 1); break;
    }
}

void ATTN_FN(const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1, float *scratch) {
    enum { B = IF_ATTN_KEY_BLOCK, TQ = IF_ATTN_Q_TILE };
    const size_t hs = j->head_size, kv_mul = j->n_heads / j->n_kv_heads, ld = attn_score_ld(j);
    const size_t G = h1 - h0 < kv_mul ? h1 - h0 : kv_mul;
    const float sq = sqrtf((float)hs);
    const VF vsq = VSET1(sq);
    const size_t nv = (hs + W - 1) / W, nf = hs / W;
    const VM all = VMASK_ALL, tail = hs % W ? VMASK_TAIL(hs % W) : all;
    float *sc = scratch;    /* (TQ, G, ld) scores, then probabilities, as the scalar kernel */
    float *bsc = sc + TQ * G * ld; /* (B) one block's scores of one row and head */
    /* (hs, B) transposed keys, (B, hs) converted values, (B, hs) converted keys */
    float *kt = bsc + B, *vb = kt + (size_t)B * hs, *kb = vb + (size_t)B * hs;
    const float *vr[B], *kr[B];
    for (size_t rt = r0; rt < r1; rt += TQ) {
        const size_t re = rt + TQ < r1 ? rt + TQ : r1, last = j->pos0 + re - 1;
        for (size_t g = h0 / kv_mul; g * kv_mul < h1; g++) {
            const size_t ha = g * kv_mul > h0 ? g * kv_mul : h0;
            const size_t hb = (g + 1) * kv_mul < h1 ? (g + 1) * kv_mul : h1;
            /* 1. scores of the W-key chunks covering the row's keys of the block, then the
             * visible ones to their ordinals */
            for (size_t bs = 0; bs <= last; bs += B) {
                const size_t be = bs + B;
                size_t lo, hi, iv[4], ns, w0;
                attn_tile_span(j, rt, re, bs, be, &lo, &hi);
                if (lo >= hi) continue;
                /* block-transposed float32 keys without sinks (if_kv_layer.keys_t): the
                 * block is already kt's layout, in slots (bs % cap) .. + B - 1; a one-row
                 * tile (decode) scores from it in place, a longer tile copies the chunks it
                 * needs into kt first (its 16 rows score faster from the scratch than from
                 * the cache in place; docs/performance.md) */
                const int direct = j->kv->keys_t && !j->kv->n_sinks;
                const float *ktb = kt;
                if (direct) {
                    ktb = (const float *)j->kv->k +
                          if_kv_key_t_index(j->kv, bs % j->kv->cap, g * hs);
                    if (re - rt > 1) {
                        const size_t c0 = (lo - bs) / W * W, c9 = (hi - bs + W - 1) / W * W;
                        for (size_t i = 0; i < hs; i++)
                            memcpy(kt + i * B + c0, ktb + i * B + c0, (c9 - c0) * sizeof(float));
                        ktb = kt;
                    }
                } else {
                    attn_rows(j->kv, 0, lo, hi, g, hs, kb + (lo - bs) * hs, kr + (lo - bs));
                    const size_t t1 = (hi - bs + W - 1) / W * W;
                    for (size_t t = (lo - bs) / W * W; t < t1; t += 8) {
                        const float *k8[8];
                        for (size_t m = 0; m < 8; m++) {
                            const size_t k = bs + t + m;
                            k8[m] = kr[(k < lo ? lo : k >= hi ? hi - 1 : k) - bs];
                        }
                        size_t i = 0;
                        for (; i + 8 <= hs; i += 8) KT8X8(k8, i, kt + i * B + t, B);
                        for (; i < hs; i++)
                            for (size_t m = 0; m < 8; m++) kt[i * B + t + m] = k8[m][i];
                    }
                }
                for (size_t r = rt; r < re; r++) {
                    if (!attn_visible(j, j->pos0 + r, bs, be, iv)) continue;
                    attn_row_keys(j, j->pos0 + r, &ns, &w0);
                    const size_t a = iv[1] > iv[0] ? iv[0] : iv[2];
                    const size_t z = iv[3] > iv[2] ? iv[3] : iv[1];
                    for (size_t h = ha; h < hb; h++) {
                        const float *q = j->q + r * j->ldq + h * hs;
                        float *row = sc + ((r - rt) * G + (h - ha)) * ld;
                        size_t c = (a - bs) / W;
                        const size_t c1 = (z - bs + W - 1) / W;
                        for (; c + 8 <= c1; c += 8) attn_scores_n(q, ktb, hs, vsq, bsc, c, 8);
                        if (c + 4 <= c1) attn_scores_n(q, ktb, hs, vsq, bsc, c, 4), c += 4;
                        if (c + 2 <= c1) attn_scores_n(q, ktb, hs, vsq, bsc, c, 2), c += 2;
                        if (c < c1) attn_scores_n(q, ktb, hs, vsq, bsc, c, 1);
                        if (iv[1] > iv[0]) /* sinks: ordinal t */
                            memcpy(row + iv[0], bsc + (iv[0] - bs),
                                   (iv[1] - iv[0]) * sizeof(float));
                        if (iv[3] > iv[2]) /* window: ordinal ns + t - w0 */
                            memcpy(row + ns + iv[2] - w0, bsc + (iv[2] - bs),
                                   (iv[3] - iv[2]) * sizeof(float));
                    }
                }
            }
            /* 2. run.c's softmax of each row (its heads' max and sum chains interleaved, up
             * to 4 at once); the outputs start at 0 */
            for (size_t r = rt; r < re; r++) {
                size_t ns, w0;
                const size_t n = attn_row_keys(j, j->pos0 + r, &ns, &w0), nw = n / W * W;
                const VM mn = n % W ? VMASK_TAIL(n % W) : all;
                for (size_t h4 = ha; h4 < hb; h4 += 4) {
                    const size_t nh = hb - h4 < 4 ? hb - h4 : 4;
                    float *rows[4], mx[4], sum[4];
                    for (size_t k = 0; k < nh; k++)
                        rows[k] = sc + ((r - rt) * G + (h4 + k - ha)) * ld;
                    attn_max_sum(rows, n, mx, NULL, nh);
                    for (size_t k = 0; k < nh; k++) {
                        const VF vmx = VSET1(mx[k]);
                        float *row = rows[k];
                        for (size_t t = 0; t < nw; t += W)
                            VSTORE(row + t, VEXP(VSUB(VLOAD(row + t), vmx)));
                        if (nw < n) VMSTORE(row + nw, mn, VEXP(VSUB(VMLOAD(row + nw, mn), vmx)));
                    }
                    attn_max_sum(rows, n, NULL, sum, nh);
                    for (size_t k = 0; k < nh; k++) {
                        const VF vsum = VSET1(sum[k]);
                        float *row = rows[k];
                        for (size_t t = 0; t < nw; t += W)
                            VSTORE(row + t, VDIV(VLOAD(row + t), vsum));
                        if (nw < n) VMSTORE(row + nw, mn, VDIV(VMLOAD(row + nw, mn), vsum));
                        float *out = j->out + r * j->ldo + (h4 + k) * hs;
                        for (size_t u = 0; u < nf; u++) VSTORE(out + W * u, VZERO());
                        if (nf < nv) VMSTORE(out + W * nf, tail, VZERO());
                    }
                }
            }
            /* 3. out += p_t * v_t, keys in order, W head dims at a time */
            for (size_t bs = 0; bs <= last; bs += B) {
                size_t iv[4], ns, w0;
                if (!attn_block_rows(j, rt, re, bs, g, 1, vb, vr)) continue;
                for (size_t r = rt; r < re; r++) {
                    if (!attn_visible(j, j->pos0 + r, bs, bs + B, iv)) continue;
                    attn_row_keys(j, j->pos0 + r, &ns, &w0);
                    for (size_t h = ha; h < hb; h++) {
                        const float *row = sc + ((r - rt) * G + (h - ha)) * ld;
                        float *out = j->out + r * j->ldo + h * hs;
                        size_t u = 0; /* head-dim vectors: nf whole, then the tail */
                        for (; u + 8 <= nf; u += 8)
                            attn_pv_n(out + W * u, row, vr, W * u, iv, bs, ns, w0, 8, 0, all);
                        if (u + 4 <= nf)
                            attn_pv_n(out + W * u, row, vr, W * u, iv, bs, ns, w0, 4, 0, all),
                                u += 4;
                        if (u + 2 <= nf)
                            attn_pv_n(out + W * u, row, vr, W * u, iv, bs, ns, w0, 2, 0, all),
                                u += 2;
                        if (u < nf)
                            attn_pv_n(out + W * u, row, vr, W * u, iv, bs, ns, w0, 1, 0, all),
                                u++;
                        if (hs % W)
                            attn_pv_n(out + W * u, row, vr, W * u, iv, bs, ns, w0, 1, 1, tail);
                    }
                }
            }
        }
    }
}
