/* attn_f32_simd_body.h - the fp32 attention kernel body shared by the AVX2 and AVX-512 files
 * (internal; each includes it once, compiled with only its own ISA flags). The loops and the
 * per-output float order are attn_f32_scalar.c's; only the inner loops are vectorized, in ways
 * that keep each output's order:
 *   scores  W keys per vector: the key block is transposed once per (tile, kv group) into
 *           kt[i][t] so s[t..t+W-1] = ((0 + q0*k0) + q1*k1) + ... runs head dim by head dim,
 *           exactly the scalar loop for each key, then one IEEE division by sqrt(head_size);
 *   P.V     W head dims per vector: acc = acc * alpha, then + p_t * v_t for keys t in order
 *           (broadcast p_t), masked for a head_size tail;
 *   exp     W keys at a time by VEXP, detmath.c's if_expf step by step in double lanes
 *           (same constants, same operation order, no FMA), so the same bits;
 *   max and the running sum stay scalar (keys in order).
 * So every includer equals the scalar kernel bit for bit.
 *
 * The includer defines: ATTN_FN (the function name); VF, VM (float vector and lane-mask types);
 * W (lanes); VMASK_ALL and VMASK_TAIL(n) (all lanes, the first n < W lanes); VZERO(), VSET1(x),
 * VADD, VSUB, VMUL, VDIV (IEEE, no FMA); VLOAD(p), VSTORE(p, v) (unaligned); VMLOAD(p, m)
 * (masked-off lanes read as 0 and never touched), VMSTORE(p, m, v); VEXP(v) (if_expf per lane). */

void ATTN_FN(const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1, float *scratch) {
    enum { B = IF_ATTN_KEY_BLOCK, TQ = IF_ATTN_Q_TILE };
    const size_t hs = j->head_size, kv_mul = j->n_heads / j->n_kv_heads;
    const float sq = sqrtf((float)hs);
    const VF vsq = VSET1(sq);
    const size_t H = h1 - h0, nv = (hs + W - 1) / W;
    const VM all = VMASK_ALL, tail = hs % W ? VMASK_TAIL(hs % W) : all;
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
                        /* scores of the W-key chunks covering [a, z) */
                        for (size_t c = (a - bs) / W; c * W < z - bs; c++) {
                            VF s = VZERO();
                            const float *kc = kt + c * W;
                            for (size_t i = 0; i < hs; i++)
                                s = VADD(s, VMUL(VSET1(q[i]), VLOAD(kc + i * B)));
                            VSTORE(sc + c * W, VDIV(s, vsq));
                        }
                        float m = ms[st], mb = -INFINITY;
                        for (int part = 0; part < 2; part++)
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++)
                                if (sc[t - bs] > mb) mb = sc[t - bs];
                        const float mn = mb > m ? mb : m;
                        const float alpha = if_expf(m - mn);
                        const VF vmn = VSET1(mn);
                        for (size_t c = (a - bs) / W; c * W < z - bs; c++)
                            VSTORE(sc + c * W, VEXP(VSUB(VLOAD(sc + c * W), vmn)));
                        float psum = 0.0f;
                        for (int part = 0; part < 2; part++)
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++)
                                psum += sc[t - bs];
                        ms[st] = mn;
                        ls[st] = ls[st] * alpha + psum;
                        float *o = acc + st * hs;
                        const VF va = VSET1(alpha);
                        for (size_t u = 0; u < nv; u++) {
                            const VM mk = u + 1 == nv ? tail : all;
                            VF x = VMUL(VMLOAD(o + W * u, mk), va);
                            for (int part = 0; part < 2; part++) {
                                for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                    VF pv = VMUL(VSET1(sc[t - bs]), VMLOAD(vr[t - bs] + W * u, mk));
                                    x = VADD(x, pv);
                                }
                            }
                            VMSTORE(o + W * u, mk, x);
                        }
                    }
                }
            }
            for (size_t r = rt; r < re; r++) {
                for (size_t h = ha; h < hb; h++) {
                    const size_t st = (r - rt) * H + (h - h0);
                    float *out = j->out + r * j->ldo + h * hs;
                    const VF vl = VSET1(ls[st]);
                    for (size_t u = 0; u < nv; u++) {
                        const VM mk = u + 1 == nv ? tail : all;
                        VMSTORE(out + W * u, mk, VDIV(VMLOAD(acc + st * hs + W * u, mk), vl));
                    }
                }
            }
        }
    }
}
