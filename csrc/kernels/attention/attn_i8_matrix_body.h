/* attn_i8_matrix_body.h - matrix-engine attention (int8 Q.K^T, u8 P.V), written once and
 * compiled three times: with real AMX tile intrinsics (i8_attn_16x64_amx.c: TDPBSSD, TDPBUSD), with
 * the AMX tile operations emulated in plain C (i8_attn_16x64_amx_emulated.c, the test-only
 * "amx_emulated" table, so the layouts and bookkeeping are tested on CPUs without AMX), and
 * with SME2 outer products (i8_attn_16x64_sme2.c: SMOPA, USMOPA). The includer defines ATTN_AMX_FN
 * (the function name) and either ATTN_AMX_EMULATE, or the AMX tile macros TILE_STATE,
 * TILE_CONFIG(cfg), TILE_RELEASE(), TILE_ZERO(t), TILE_LOAD(t, p, stride), TILE_STORE(t, p,
 * stride), TILE_DPBSSD(c, a, b), TILE_DPBUSD(c, a, b), or (ATTN_ENGINE_CUSTOM) its own
 * ENGINE_BEGIN/ENGINE_END/ENGINE_QK/ENGINE_PV (see the AMX versions below).
 *
 * Per-output contract (inexact by design; bounded against the float64 oracle), per query
 * row r and head h, with G the int8 cache group (G | head_size; Gp = G rounded up to 4):
 *   q, per group g of G dims: qs = max|q| / 127, x = q / qs, hi = roundf(x),
 *         lo = roundf((x - hi) * 254)  (two int8 planes: q ~ qs * (hi + lo / 254), ~15 bits)
 *   k, v: the int8 cache's q and scales (float caches are quantized per group on the fly,
 *         as if_kv_store would)
 *   per key block (IF_ATTN_KEY_BLOCK keys at absolute positions), if the row sees any key:
 *     s_t = (0 + x_{t,0} + x_{t,1} + ...) / sqrtf(head_size), in group order, with
 *           x_{t,g} = (((float)ihi_{t,g} + (float)ilo_{t,g} / 254) * ks_{t,g}) * qs_g
 *           (ihi, ilo: int32 dot products of group g's hi and lo planes with k, TDPBSSD)
 *     m' = max(m, max s_t); a = expf(m - m'); p_t = expf(s_t - m') for visible t (else 0);
 *     l = l * a + sum p_t (in key order)
 *     per V group g: p'_t = p_t * vs_{t,g}; ps = max p' / 255; y = p'_t / ps;
 *       uhi_t = floorf(y), ulo_t = roundf((y - uhi_t) * 255) (two u8 planes, p' ~ ps * (uhi +
 *       ulo / 255)); with ihi_i, ilo_i = sum_t uhi_t * vq_{t,i}, sum_t ulo_t * vq_{t,i}:
 *       acc_i = acc_i * a; acc_i = acc_i + ((float)ihi_i + (float)ilo_i / 255) * ps (TDPBUSD)
 *   out_i = acc_i / l.
 * Integer sums are exact in any order, so every engine following this contract (AMX, its
 * emulation, SME2's SMOPA/USMOPA) gives the same bits.
 *
 * Tiles (palette 1, configured once per call; query tiles are always 16 rows, the rows past
 * the end are zero in the scratch copies): tmm0/tmm6 C (16 rows x 16 keys int32, hi/lo),
 * tmm1/tmm7 A (16 rows x Gp bytes of q's hi/lo plane), tmm2 B (Gp/4 rows x 64 bytes: 16 keys
 * x 4 dims), tmm3 C (16 rows x nd dims int32), tmm4 A (16 rows x 64 keys u8), tmm5 B (16
 * rows x 4*nd: nd dims x 4 keys), nd = min(16, G) dims per P.V tile. Packed layouts per key block, zero outside the keys
 * converted:  kp[g][k4][n*4 + j] = kq[16c + n][g*G + 4k4 + j] for key chunk c (of 16 keys):
 * kp + ((c * ng + g) * Gp/4) * 64;  vp[d][k4][n*4 + j] = vq[4k4 + j][d*nd + n] (+ d * 16*64). */
#ifndef ISAFORGE_ATTN_I8_AMX_BODY_H
#define ISAFORGE_ATTN_I8_AMX_BODY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn_common.h"
#include "../kernels.h"
#include "../../detmath.h"

typedef struct attn_tilecfg {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} attn_tilecfg;

#if defined(ATTN_AMX_EMULATE)
#include <stdio.h>
#include <stdlib.h>
/* A minimal tile machine with the checks of the real instructions that matter here. */
typedef struct attn_emu {
    attn_tilecfg cfg;
    int on;
    uint8_t t[8][16][64];
} attn_emu;
static void attn_emu_fault(const char *what) {
    fprintf(stderr, "amx attention emulation: %s (would fault on hardware)\n", what);
    abort();
}
static void attn_emu_check(const attn_emu *s, int t) {
    if (!s->on || t < 0 || t > 7 || !s->cfg.rows[t]) attn_emu_fault("unconfigured tile");
}
static void attn_emu_config(attn_emu *s, const attn_tilecfg *c) {
    if (c->palette_id != 1) attn_emu_fault("palette != 1");
    for (int t = 0; t < 16; t++)
        if (c->rows[t] > 16 || c->colsb[t] > 64 || (t >= 8 && (c->rows[t] || c->colsb[t])))
            attn_emu_fault("bad tile shape");
    memset(s, 0, sizeof *s);
    s->cfg = *c;
    s->on = 1;
}
static void attn_emu_load(attn_emu *s, int t, const void *p, size_t stride) {
    attn_emu_check(s, t);
    memset(s->t[t], 0, sizeof s->t[t]);
    for (size_t r = 0; r < s->cfg.rows[t]; r++)
        memcpy(s->t[t][r], (const uint8_t *)p + r * stride, s->cfg.colsb[t]);
}
static void attn_emu_store(const attn_emu *s, int t, void *p, size_t stride) {
    attn_emu_check(s, t);
    for (size_t r = 0; r < s->cfg.rows[t]; r++)
        memcpy((uint8_t *)p + r * stride, s->t[t][r], s->cfg.colsb[t]);
}
/* c[m].dword[n] += sum_j A(a[m].byte[4k+j]) * (int8)b[k].byte[4n+j], A signed or unsigned */
static void attn_emu_dp(attn_emu *s, int c, int a, int b, int a_unsigned) {
    attn_emu_check(s, c);
    attn_emu_check(s, a);
    attn_emu_check(s, b);
    const attn_tilecfg *f = &s->cfg;
    if (f->colsb[a] / 4 != f->rows[b] || f->colsb[c] != f->colsb[b] || f->rows[c] != f->rows[a])
        attn_emu_fault("tile shapes do not chain");
    for (size_t m = 0; m < f->rows[c]; m++) {
        for (size_t n = 0; n < f->colsb[c] / 4u; n++) {
            int32_t d;
            memcpy(&d, &s->t[c][m][4 * n], 4);
            for (size_t k = 0; k < f->colsb[a] / 4u; k++)
                for (size_t j = 0; j < 4; j++) {
                    int32_t x = a_unsigned ? (int32_t)s->t[a][m][4 * k + j]
                                           : (int32_t)(int8_t)s->t[a][m][4 * k + j];
                    d = (int32_t)((uint32_t)d + (uint32_t)(x * (int8_t)s->t[b][k][4 * n + j]));
                }
            memcpy(&s->t[c][m][4 * n], &d, 4);
        }
    }
}
#define TILE_STATE attn_emu emu_
#define TILE_CONFIG(cfg) attn_emu_config(&emu_, (cfg))
#define TILE_RELEASE() memset(&emu_, 0, sizeof emu_)
#define TILE_ZERO(x) memset(emu_.t[x], 0, sizeof emu_.t[x])
#define TILE_LOAD(t, p, s) attn_emu_load(&emu_, (t), (p), (size_t)(s))
#define TILE_STORE(t, p, s) attn_emu_store(&emu_, (t), (p), (size_t)(s))
#define TILE_DPBSSD(c, a, b) attn_emu_dp(&emu_, (c), (a), (b), 0)
#define TILE_DPBUSD(c, a, b) attn_emu_dp(&emu_, (c), (a), (b), 1)
#endif

#if !defined(ATTN_ENGINE_CUSTOM)
/* The AMX engine: tiles configured once per call, integer products by tile ops. */
#define ENGINE_BEGIN(Gp, nd)                                                               \
    attn_tilecfg cfg;                                                                      \
    memset(&cfg, 0, sizeof cfg);                                                           \
    cfg.palette_id = 1;                                                                    \
    cfg.rows[0] = 16, cfg.colsb[0] = 64;                                                   \
    cfg.rows[1] = 16, cfg.colsb[1] = (uint16_t)(Gp);                                       \
    cfg.rows[2] = (uint8_t)((Gp) / 4), cfg.colsb[2] = 64;                                  \
    cfg.rows[3] = 16, cfg.colsb[3] = (uint16_t)(4 * (nd));                                 \
    cfg.rows[4] = 16, cfg.colsb[4] = 64;                                                   \
    cfg.rows[5] = 16, cfg.colsb[5] = (uint16_t)(4 * (nd));                                 \
    cfg.rows[6] = 16, cfg.colsb[6] = 64;                                                   \
    cfg.rows[7] = 16, cfg.colsb[7] = (uint16_t)(Gp);                                       \
    TILE_STATE;                                                                            \
    TILE_CONFIG(&cfg)
#define ENGINE_END() TILE_RELEASE()
/* C, C2 (16 x 16 int32, row stride 16) = q hi / lo planes (16 rows x Gp bytes, stride lda)
 * times the packed key chunk kpc (Gp/4 rows of 16 keys x 4 bytes) */
#define ENGINE_QK(C, C2, qhi, qlo, lda, kpc, Gp)                                           \
    do {                                                                                   \
        TILE_ZERO(0);                                                                      \
        TILE_ZERO(6);                                                                      \
        TILE_LOAD(1, (qhi), (lda));                                                        \
        TILE_LOAD(7, (qlo), (lda));                                                        \
        TILE_LOAD(2, (kpc), 64);                                                           \
        TILE_DPBSSD(0, 1, 2);                                                              \
        TILE_DPBSSD(6, 7, 2);                                                              \
        TILE_STORE(0, (C), 64);                                                            \
        TILE_STORE(6, (C2), 64);                                                           \
    } while (0)
/* C, C2 (16 x nd int32, row stride 16) = u8 P' hi / lo planes (16 rows x 64 keys) times the
 * packed value chunk vpc (16 rows of nd dims x 4 keys) */
#define ENGINE_PV(C, C2, uhi, ulo, vpc, nd)                                                \
    do {                                                                                   \
        TILE_LOAD(5, (vpc), 64);                                                           \
        TILE_ZERO(3);                                                                      \
        TILE_LOAD(4, (uhi), IF_ATTN_KEY_BLOCK);                                            \
        TILE_DPBUSD(3, 4, 5);                                                              \
        TILE_STORE(3, (C), 64);                                                            \
        TILE_ZERO(3);                                                                      \
        TILE_LOAD(4, (ulo), IF_ATTN_KEY_BLOCK);                                            \
        TILE_DPBUSD(3, 4, 5);                                                              \
        TILE_STORE(3, (C2), 64);                                                           \
    } while (0)
#endif

/* int8 copy of one cached row's head g (hs values) with its per-group scales. */
static void attn_i8_row(const if_kv_layer *kv, int which, size_t pos, size_t g, size_t hs,
                        size_t G, int8_t *q, float *s, float *tmp) {
    if (kv->type == IF_KV_I8 && kv->group == G) {
        size_t off = if_kv_slot(kv, pos) * kv->kv_dim + g * hs;
        memcpy(q, (const int8_t *)(which ? kv->v : kv->k) + off, hs);
        memcpy(s, (which ? kv->vs : kv->ks) + off / G, hs / G * sizeof(float));
        return;
    }
    if_q8_quantize_1x1_scalar(q, s, attn_row(kv, which, pos, g, hs, tmp), hs, G);
}

void ATTN_AMX_FN(const if_attn_job *j, size_t r0, size_t r1, size_t h0, size_t h1,
                 float *scratch) {
    enum { B = IF_ATTN_KEY_BLOCK, TQ = IF_ATTN_Q_TILE };
    const size_t hs = j->head_size, kv_mul = j->n_heads / j->n_kv_heads;
    size_t G = j->kv->type == IF_KV_I8 ? j->kv->group : 32;
    while (hs % G) G /= 2;
    const size_t Gp = (G + 3) / 4 * 4, ng = hs / G, nd = G < 16 ? G : 16, ndc = hs / nd;
    const float sq = sqrtf((float)hs);
    const size_t H = h1 - h0;
    /* scratch (floats first, then bytes; the caller's size covers it, see ops.c) */
    float *ms = scratch, *ls = ms + TQ * H, *acc = ls + TQ * H; /* (TQ, H), (TQ, H), (TQ,H,hs) */
    float *sc = acc + TQ * H * hs;                              /* (TQ, B) scores of one head */
    float *ks = sc + TQ * B, *vs = ks + B * ng;                 /* (B, ng) scales */
    float *qs = vs + B * ng, *alpha = qs + TQ * H * ng, *ps = alpha + TQ; /* (TQ*H*ng) (TQ) (TQ) */
    float *tmp = ps + TQ, *kss = tmp + hs, *vss = kss + hs;    /* (hs) each */
    int32_t *cbuf = (int32_t *)(vss + hs);                      /* (16, 16) */
    int32_t *cbuf2 = cbuf + 256;                                /* (16, 16) */
    int8_t *qq = (int8_t *)(cbuf2 + 256);                       /* (H, 2, TQ, ng*Gp) */
    int8_t *kp = qq + H * 2 * TQ * ng * Gp;                       /* (B/16, ng, Gp/4, 64) */
    int8_t *vp = kp + (B / 16) * ng * Gp * 16;                  /* (ndc, 16, 64) */
    uint8_t *up = (uint8_t *)(vp + ndc * 16 * 64), *ulo = up + TQ * B; /* (TQ, B) each */
    int8_t *krow = (int8_t *)(ulo + TQ * B), *vrow = krow + hs;
    size_t iv[4];
    ENGINE_BEGIN(Gp, nd);
    for (size_t rt = r0; rt < r1; rt += TQ) {
        const size_t re = rt + TQ < r1 ? rt + TQ : r1, last = j->pos0 + re - 1;
        for (size_t g = h0 / kv_mul; g * kv_mul < h1; g++) {
            const size_t ha = g * kv_mul > h0 ? g * kv_mul : h0;
            const size_t hb = (g + 1) * kv_mul < h1 ? (g + 1) * kv_mul : h1;
            /* quantize the tile's queries per group into hi and lo planes; rows past the end
             * stay zero, each group zero-padded from G to Gp bytes */
            memset(qq, 0, H * 2 * TQ * ng * Gp);
            for (size_t h = ha; h < hb; h++) {
                for (size_t r = rt; r < re; r++) {
                    int8_t *hi = qq + ((h - h0) * 2 * TQ + (r - rt)) * ng * Gp;
                    int8_t *lo = hi + TQ * ng * Gp;
                    const float *x = j->q + r * j->ldq + h * hs;
                    float *sg = qs + ((r - rt) * H + (h - h0)) * ng;
                    if_q8_quantize_1x1_scalar(krow, sg, x, hs, G);
                    for (size_t gg = 0; gg < ng; gg++) {
                        for (size_t d = 0; d < G; d++) {
                            const size_t i = gg * G + d;
                            hi[gg * Gp + d] = krow[i];
                            if (sg[gg] == 0.0f) continue;
                            float e = (x[i] / sg[gg] - (float)krow[i]) * 254.0f;
                            float l = roundf(e);
                            lo[gg * Gp + d] = (int8_t)(l > 127.0f ? 127 : l < -127.0f ? -127 : l);
                        }
                    }
                }
            }
            attn_tile_start(ms, ls, acc, TQ * H, hs);
            for (size_t bs = 0; bs <= last; bs += B) {
                const size_t be = bs + B;
                size_t lo, hi;
                attn_tile_span(j, rt, re, bs, be, &lo, &hi);
                if (lo >= hi) continue;
                /* pack the block's keys and values (zero outside [lo, hi)) */
                memset(kp, 0, (B / 16) * ng * Gp * 16);
                memset(vp, 0, ndc * 16 * 64);
                memset(ks, 0, B * ng * sizeof(float));
                memset(vs, 0, B * ng * sizeof(float));
                for (size_t t = lo; t < hi; t++) {
                    const size_t n = t - bs;
                    attn_i8_row(j->kv, 0, t, g, hs, G, krow, kss, tmp);
                    attn_i8_row(j->kv, 1, t, g, hs, G, vrow, vss, tmp);
                    for (size_t gg = 0; gg < ng; gg++) {
                        ks[n * ng + gg] = kss[gg];
                        vs[n * ng + gg] = vss[gg];
                        int8_t *base = kp + ((n / 16) * ng + gg) * (Gp / 4) * 64;
                        for (size_t d = 0; d < G; d++)
                            base[(d / 4) * 64 + (n % 16) * 4 + d % 4] = krow[gg * G + d];
                    }
                    for (size_t i = 0; i < hs; i++)
                        vp[(i / nd) * 16 * 64 + (n / 4) * 64 + (i % nd) * 4 + n % 4] = vrow[i];
                }
                for (size_t h = ha; h < hb; h++) {
                    const int8_t *qh = qq + (h - h0) * 2 * TQ * ng * Gp, *ql = qh + TQ * ng * Gp;
                    /* scores: 16 rows x 16 keys per C tile, one TDPBSSD per group */
                    for (size_t c = 0; c < B / 16; c++) {
                        for (size_t gg = 0; gg < ng; gg++) {
                            ENGINE_QK(cbuf, cbuf2, qh + gg * Gp, ql + gg * Gp, ng * Gp,
                                      kp + (c * ng + gg) * (Gp / 4) * 64, Gp);
                            for (size_t r = 0; r < re - rt; r++) {
                                const float qsg = qs[((r * H) + (h - h0)) * ng + gg];
                                for (size_t n = 0; n < 16; n++) {
                                    float x = (float)cbuf[r * 16 + n] +
                                              (float)cbuf2[r * 16 + n] / 254.0f;
                                    x = (x * ks[(c * 16 + n) * ng + gg]) * qsg;
                                    sc[r * B + c * 16 + n] = gg ? sc[r * B + c * 16 + n] + x
                                                                : 0.0f + x;
                                }
                            }
                        }
                    }
                    /* online softmax per row; P' = P * vs quantized to u8 per V group */
                    for (size_t r = rt; r < re; r++) {
                        const size_t st = (r - rt) * H + (h - h0);
                        float *s = sc + (r - rt) * B;
                        alpha[r - rt] = -1.0f; /* no visible key: no update */
                        if (!attn_visible(j, j->pos0 + r, bs, be, iv)) continue;
                        float mb = -INFINITY;
                        for (int part = 0; part < 2; part++)
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                s[t - bs] = s[t - bs] / sq;
                                if (s[t - bs] > mb) mb = s[t - bs];
                            }
                        const float m = ms[st], mn = mb > m ? mb : m;
                        alpha[r - rt] = if_expf(m - mn);
                        float psum = 0.0f;
                        float *p = s; /* reuse: p_t for visible t, 0 elsewhere */
                        float pv[IF_ATTN_KEY_BLOCK];
                        for (size_t n = 0; n < B; n++) pv[n] = 0.0f;
                        for (int part = 0; part < 2; part++)
                            for (size_t t = iv[2 * part]; t < iv[2 * part + 1]; t++) {
                                pv[t - bs] = if_expf(s[t - bs] - mn);
                                psum += pv[t - bs];
                            }
                        memcpy(p, pv, sizeof pv);
                        ms[st] = mn;
                        ls[st] = ls[st] * alpha[r - rt] + psum;
                    }
                    /* P.V per V group: u8 P' rows (16 x 64 keys) x V (64 keys x nd dims) */
                    for (size_t gg = 0; gg < ng; gg++) {
                        memset(up, 0, 2 * TQ * B);
                        for (size_t r = 0; r < re - rt; r++) {
                            ps[r] = 0.0f;
                            if (alpha[r] < 0.0f) continue;
                            float mx = 0.0f, *p = sc + r * B;
                            for (size_t n = 0; n < B; n++) {
                                float x = p[n] * vs[n * ng + gg];
                                if (x > mx) mx = x;
                            }
                            ps[r] = mx / 255.0f;
                            if (mx == 0.0f) continue;
                            for (size_t n = 0; n < B; n++) {
                                float y = p[n] * vs[n * ng + gg] / ps[r];
                                if (y > 255.0f) y = 255.0f;
                                float hi = floorf(y), lo = roundf((y - hi) * 255.0f);
                                up[r * B + n] = (uint8_t)hi;
                                ulo[r * B + n] = (uint8_t)lo;
                            }
                        }
                        for (size_t dc = gg * G / nd; dc < (gg + 1) * G / nd; dc++) {
                            ENGINE_PV(cbuf, cbuf2, up, ulo, vp + dc * 16 * 64, nd);
                            for (size_t r = 0; r < re - rt; r++) {
                                if (alpha[r] < 0.0f) continue;
                                float *o = acc + ((r * H) + (h - h0)) * hs + dc * nd;
                                for (size_t n = 0; n < nd; n++) {
                                    o[n] = o[n] * alpha[r];
                                    float x = (float)cbuf[r * 16 + n] +
                                              (float)cbuf2[r * 16 + n] / 255.0f;
                                    o[n] = o[n] + x * ps[r];
                                }
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
    ENGINE_END();
}

#endif
