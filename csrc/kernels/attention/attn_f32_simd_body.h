/* attn_f32_simd_body.h - the fp32 attention kernel body shared by the AVX2 and AVX-512 files
 * (internal; each includes it once, compiled with only its own ISA flags). The passes and the
 * per-output float order are f32_attn_16x64_scalar.c's (run.c's); only the inner loops are
 * vectorized, in ways that keep each output's order:
 *   scores  W keys per vector: the key block is transposed once per (tile, kv group) into
 *           kt[i][t] so s[t..t+W-1] = ((0 + q0*k0) + q1*k1) + ... runs head dim by head dim,
 *           exactly the scalar loop for each key, then one IEEE division by sqrt(head_size);
 *   softmax the max and the sum stay scalar (keys in order); p = exp(s - max) W keys at a time
 *           by VEXP (if_expf lane by lane: detmath_avx2.h / detmath_avx512.h), p / sum W at a
 *           time (IEEE division);
 *   P.V     W head dims per vector: out = out + p_t * v_t for keys t in order (broadcast p_t),
 *           masked for a head_size tail.
 * So every includer equals the scalar kernel bit for bit.
 *
 * The includer defines: ATTN_FN (the function name); VF, VM (float vector and lane-mask types);
 * W (lanes); VMASK_ALL and VMASK_TAIL(n) (all lanes, the first n < W lanes); VZERO(), VSET1(x),
 * VADD, VSUB, VMUL, VDIV (IEEE, no FMA); VLOAD(p), VSTORE(p, v) (unaligned); VMLOAD(p, m)
 * (masked-off lanes read as 0 and never touched), VMSTORE(p, m, v); VEXP(v) (if_expf per lane). */

void ATTN_FN(const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1, float *scratch) {
    enum { B = IF_ATTN_KEY_BLOCK, TQ = IF_ATTN_Q_TILE };
    const size_t hs = j->head_size, kv_mul = j->n_heads / j->n_kv_heads, ld = attn_score_ld(j);
    const size_t G = h1 - h0 < kv_mul ? h1 - h0 : kv_mul;
    const float sq = sqrtf((float)hs);
    const VF vsq = VSET1(sq);
    const size_t nv = (hs + W - 1) / W;
    const VM all = VMASK_ALL, tail = hs % W ? VMASK_TAIL(hs % W) : all;
    float *sc = scratch;    /* (TQ, G, ld) scores, then probabilities, as the scalar kernel */
    float *bsc = sc + TQ * G * ld; /* (B) one block's scores of one row and head */
    /* (hs, B) transposed keys, (B, hs) converted values, (hs) one converted key */
    float *kt = bsc + B, *vb = kt + (size_t)B * hs, *kb = vb + (size_t)B * hs;
    const float *vr[B];
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
                for (size_t t = lo; t < hi; t++) {
                    const float *k = attn_row(j->kv, 0, t, g, hs, kb);
                    for (size_t i = 0; i < hs; i++) kt[i * B + (t - bs)] = k[i];
                }
                for (size_t r = rt; r < re; r++) {
                    if (!attn_visible(j, j->pos0 + r, bs, be, iv)) continue;
                    attn_row_keys(j, j->pos0 + r, &ns, &w0);
                    const size_t a = iv[1] > iv[0] ? iv[0] : iv[2];
                    const size_t z = iv[3] > iv[2] ? iv[3] : iv[1];
                    for (size_t h = ha; h < hb; h++) {
                        const float *q = j->q + r * j->ldq + h * hs;
                        float *row = sc + ((r - rt) * G + (h - ha)) * ld;
                        for (size_t c = (a - bs) / W; c * W < z - bs; c++) {
                            VF s = VZERO();
                            const float *kc = kt + c * W;
                            for (size_t i = 0; i < hs; i++)
                                s = VADD(s, VMUL(VSET1(q[i]), VLOAD(kc + i * B)));
                            VSTORE(bsc + c * W, VDIV(s, vsq));
                        }
                        if (iv[1] > iv[0]) /* sinks: ordinal t */
                            memcpy(row + iv[0], bsc + (iv[0] - bs),
                                   (iv[1] - iv[0]) * sizeof(float));
                        if (iv[3] > iv[2]) /* window: ordinal ns + t - w0 */
                            memcpy(row + ns + iv[2] - w0, bsc + (iv[2] - bs),
                                   (iv[3] - iv[2]) * sizeof(float));
                    }
                }
            }
            /* 2. run.c's softmax of each row; the outputs start at 0 */
            for (size_t r = rt; r < re; r++) {
                size_t ns, w0;
                const size_t n = attn_row_keys(j, j->pos0 + r, &ns, &w0);
                const VM mn = n % W ? VMASK_TAIL(n % W) : all;
                for (size_t h = ha; h < hb; h++) {
                    float *row = sc + ((r - rt) * G + (h - ha)) * ld, mx = row[0], sum = 0.0f;
                    for (size_t t = 1; t < n; t++)
                        if (row[t] > mx) mx = row[t];
                    const VF vmx = VSET1(mx);
                    for (size_t t = 0; t < n; t += W) {
                        const VM mk = t + W > n ? mn : all;
                        VMSTORE(row + t, mk, VEXP(VSUB(VMLOAD(row + t, mk), vmx)));
                    }
                    for (size_t t = 0; t < n; t++) sum += row[t];
                    const VF vsum = VSET1(sum);
                    for (size_t t = 0; t < n; t += W) {
                        const VM mk = t + W > n ? mn : all;
                        VMSTORE(row + t, mk, VDIV(VMLOAD(row + t, mk), vsum));
                    }
                    float *out = j->out + r * j->ldo + h * hs;
                    for (size_t u = 0; u < nv; u++)
                        VMSTORE(out + W * u, u + 1 == nv ? tail : all, VZERO());
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
                        for (size_t u = 0; u < nv; u++) {
                            const VM mk = u + 1 == nv ? tail : all;
                            VF x = VMLOAD(out + W * u, mk);
                            for (int part = 0; part < 2; part++) {
                                for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                    const VF p = VSET1(row[t < ns ? t : ns + t - w0]);
                                    x = VADD(x, VMUL(p, VMLOAD(vr[t - bs] + W * u, mk)));
                                }
                            }
                            VMSTORE(out + W * u, mk, x);
                        }
                    }
                }
            }
        }
    }
}
