/* model.c - a model's creation and validation, its weight packing and its accessors: the config
 * and weights checked against each other, the run state allocated once for chunks of ubatch
 * rows (nothing is allocated per token), every Q8 and 4-bit matrix packed once into the
 * prefill kernels' layout where they declare one. The forward pass is forward.c. */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise under -std=c11 (glibc and musl) */
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cpu/cpu.h"
#include "kernels/kernels.h"
#include "model_internal.h"
#include "threadpool.h"

/* Work (multiply-adds) below which a loop runs on the calling thread alone: waking the pool
 * costs microseconds, and on an oversubscribed machine a fork-join per tiny matmul costs a
 * scheduler time slice. Tiny models (stories260K) then run single-threaded. */
#define PAR_MIN_WORK ((size_t)1 << 17)

/* The SME2 hybrid split's non-streaming kernels: the SME2 Q8 kernels read the row-major int8
 * (no packed layout), so the fallback is the best usable tier whose Q8 GEMV and GEMM read it
 * too: dotprod (GEMV 1x4, GEMM 4x4), else neon. Not i8mm: its GEMM reads its own packed
 * layout, which an SME2 model never makes. k = 0, or no SME2 kernel in the model: no split. */
static void sme2_split(if_model *m, size_t k) {
    const uint32_t have = if_cpu_detect()->flags;
    const if_kernel_table *alt = NULL;
    if (!k || !((m->gemv_k->q8_gemv->requires | m->gemm_k->q8_gemm->requires) & IF_FEAT_SME))
        return;
    for (size_t i = 0; i < if_tier_count(); i++) {
        const if_kernel_table *t = if_tier_table(i);
        if ((strcmp(t->tier, "dotprod") == 0 || (!alt && strcmp(t->tier, "neon") == 0)) &&
            !t->q8_gemm->pack && !((t->q8_gemv->requires | t->q8_gemm->requires) & ~have))
            alt = t;
    }
    if (!alt) return;
    m->sme2_workers = k;
    m->q8_gemv_alt = alt->q8_gemv;
    m->q8_gemm_alt = alt->q8_gemm;
}

/* ---- weight packing ---- */

static const if_matrix *matrix_at(const if_model *m, size_t idx) {
    if (idx == m->c.n_layers * N_MATS) return &m->w.wcls;
    return if_layer_matrix(&m->layers[idx / N_MATS], idx % N_MATS);
}

/* Bytes of one matrix packed for GEMM kernel k (64-byte aligned allocations), 0 without a
 * layout. */
static size_t packed_size(const if_q8_gemm_kernel *k, size_t rows, size_t cols, size_t gs) {
    if (!k->pack || !k->pack_size || gs == 0) return 0;
    size_t bytes = (k->pack_size(rows, cols, gs) + 63) / 64 * 64;
    return bytes ? bytes : 64;
}

size_t if_packed_weight_bytes(const if_config *c, size_t gs, const if_kernel_table *t) {
    const size_t D = c->dim, H = c->hidden_dim, HS = if_config_head_size(c);
    const size_t KV = HS * c->n_kv_heads, Q = HS * c->n_heads;
    size_t layer = 0;
#define ADD_(name, rows, cols) layer += packed_size(t->q8_gemm, rows, cols, gs);
    IF_LAYER_MATRICES(ADD_)
#undef ADD_
    return c->n_layers * layer + packed_size(t->q8_gemm, c->vocab_size, D, gs);
}

/* Bytes of a 4-bit matrix packed for GEMM kernel k (0 without a layout). */
static size_t q4_packed_size(const if_q4_gemm_kernel *k, const if_matrix *w) {
    if (!k || !k->pack || !k->pack_size || !k->unpack || w->group_size == 0) return 0;
    size_t bytes = (k->pack_size(w->rows, w->kpad, w->group_size) + 63) / 64 * 64;
    return bytes ? bytes : 64;
}

/* Pack every Q8 and 4-bit matrix once into the prefill kernels' layouts, where they declare
 * one; a matrix given as a GGUF tensor's bytes (IF_GGML) becomes Q8 on the way (ggml_intake.c).
 * IF_OK, or the error in err. */
static if_status pack_weights(if_model *m, const if_model_opts *o, char *err, size_t errlen) {
    const if_q8_gemm_kernel *k = m->gemm_k->q8_gemm;
    const if_q4_gemm_kernel *k4 = m->gemm_k->q4_gemm;
    const int q8 = k->pack && k->pack_size && m->group_size != 0;
    const int q4 = k4 && k4->pack && k4->pack_size && k4->unpack;
    /* no 4-bit layout: the row-major nibbles themselves go into the arena when the caller
     * lets go of its copy (the kernels then read them from 2 MiB pages, as the packed ones) */
    const int q4copy = !q4 && o->q4_arena;
    const int kqcopy = o->kq_arena;
    size_t n = m->c.n_layers * N_MATS + 1;
    /* decode shares the copy when it runs the same tier (the same kernel's layout); then each
     * row-major matrix may go as soon as it is packed */
    m->q8_decode = q8 && m->gemv_k == m->gemm_k && if_table_decodes_packed(m->gemm_k)
                       ? IF_DECODE_PACKED_GEMM
                       : IF_DECODE_GEMV;
    m->q4_decode = q4 && m->gemv_k == m->gemm_k && k4->decode_packed ? IF_DECODE_PACKED_GEMM
                                                                      : IF_DECODE_GEMV;
    /* decode reads row-major Q8: a GGUF tensor becomes that first (and is packed below) */
    const int direct = m->q8_decode == IF_DECODE_PACKED_GEMM;
    for (size_t i = 0; i < n && !direct; i++) {
        if (matrix_at(m, i)->dtype != IF_GGML) continue;
        const if_status st = if_ggml_intake_rowmajor(m, i, err, errlen);
        if (st != IF_OK) return st;
        if (o->on_packed) o->on_packed(o->on_packed_ctx, i); /* its bytes are not read again */
    }
    if (!q8 && !q4 && !q4copy && !kqcopy) return IF_OK;
    m->packed = calloc(n, sizeof(int8_t *));
    if (!m->packed) goto nomem;
    /* one arena, each matrix at a 64-byte boundary: decode streams all of it every token, so
     * from 2 MiB up it is 2 MiB-aligned and asks for transparent huge pages (Linux with THP in
     * `madvise` mode: 512x fewer TLB entries for the weights; see docs/performance.md) */
    const size_t ggs = if_ggml_intake_group();
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const if_matrix *w = matrix_at(m, i);
        if (w->dtype == IF_Q8 && q8)
            total += (packed_size(k, w->rows, w->cols, w->group_size) + 63) & ~(size_t)63;
        else if (w->dtype == IF_GGML && q8)
            total += (packed_size(k, w->rows, w->cols, ggs) + 63) & ~(size_t)63;
        else if (w->dtype == IF_Q4 && q4)
            total += q4_packed_size(k4, w);
        else if (w->dtype == IF_Q4 && q4copy)
            total += (w->rows * (w->kpad / 2) + 63) & ~(size_t)63;
        else if (w->dtype == IF_KQ && kqcopy)
            total += (w->raw_bytes + 63) & ~(size_t)63;
    }
    if (total == 0) return IF_OK;
    const size_t huge = (size_t)2 << 20;
    if (total >= huge) {
        total = (total + huge - 1) / huge * huge;
        m->packed_arena = aligned_alloc(huge, total);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (m->packed_arena) (void)madvise(m->packed_arena, total, MADV_HUGEPAGE); /* a hint */
#endif
    } else {
        m->packed_arena = aligned_alloc(64, total);
    }
    if (!m->packed_arena) goto nomem;
    int8_t *next = m->packed_arena;
    for (size_t i = 0; i < n; i++) {
        const if_matrix *w = matrix_at(m, i);
        int shared;
        if (w->dtype == IF_GGML && q8) { /* the file's blocks straight into the packed copy */
            size_t bytes = packed_size(k, w->rows, w->cols, ggs);
            m->packed[i] = next;
            next += (bytes + 63) & ~(size_t)63;
            const if_status st = if_ggml_intake_packed(m, i, k, m->packed[i], err, errlen);
            if (st != IF_OK) return st;
            m->packed_bytes += bytes;
            shared = 1;
        } else if (w->dtype == IF_Q8 && q8) {
            size_t bytes = packed_size(k, w->rows, w->cols, w->group_size);
            m->packed[i] = next;
            next += (bytes + 63) & ~(size_t)63;
            k->pack(m->packed[i], w->q, w->rows, w->cols, w->group_size);
            m->packed_bytes += bytes;
            shared = m->q8_decode == IF_DECODE_PACKED_GEMM;
        } else if (w->dtype == IF_Q4 && q4) { /* the nibbles rearranged; scales, codebook as is */
            size_t bytes = q4_packed_size(k4, w);
            m->packed[i] = next;
            next += bytes;
            k4->pack((uint8_t *)m->packed[i], w->q4, w->rows, w->kpad, w->group_size);
            m->packed_bytes += bytes;
            shared = m->q4_decode == IF_DECODE_PACKED_GEMM;
        } else if (w->dtype == IF_Q4 && q4copy) { /* row-major, as given */
            const size_t bytes = w->rows * (w->kpad / 2);
            const uint8_t *was = w->q4;
            m->packed[i] = next;
            next += (bytes + 63) & ~(size_t)63;
            memcpy(m->packed[i], was, bytes);
            /* the model's own copy of the matrix descriptors (m->layers, m->w.wcls) */
            if_matrix *mw = (if_matrix *)matrix_at(m, i);
            mw->q4 = (const uint8_t *)m->packed[i];
            if (m->emb.t.dtype == IF_Q4 && m->emb.t.q4 == was) m->emb.t.q4 = mw->q4; /* tied */
            m->q4_arena = 1;
            shared = 1;
        } else if (w->dtype == IF_KQ && kqcopy) { /* byte for byte, by decode steps */
            if (!if_arena_add(m, (if_matrix *)matrix_at(m, i), (uint8_t *)next)) goto nomem;
            next += (w->raw_bytes + 63) & ~(size_t)63;
            continue;
        } else {
            continue;
        }
        if (shared && o->on_packed) o->on_packed(o->on_packed_ctx, i);
    }
    if_arena_start(m, o->kq_arena == 2);
    return IF_OK;
nomem:
    if (err && errlen) snprintf(err, errlen, "out of memory packing the weights");
    return IF_ENOMEM;
}

/* ---- creation ---- */

/* The config's own checks: no zero dimension, heads that divide it into even head sizes, the
 * layer description's fields in range. 0 with the reason in err. */
static int check_config(const if_config *c, char *err, size_t errlen) {
    if (!c->dim || !c->hidden_dim || !c->n_layers || !c->n_heads || !c->n_kv_heads ||
        !c->vocab_size || !c->seq_len) {
        ERR("config has a zero dimension");
        return 0;
    }
    if ((!c->head_dim && c->dim % c->n_heads) || c->n_heads % c->n_kv_heads ||
        if_config_head_size(c) % 2) {
        ERR("config: n_heads=%zu must divide dim=%zu (or head_dim=%zu be given) into even head "
            "sizes and n_kv_heads=%zu must divide n_heads",
            c->n_heads, c->dim, c->head_dim, c->n_kv_heads);
        return 0;
    }
    if (c->act > 1 || c->rope_neox > 1) {
        ERR("config: act=%zu (0 SiLU, 1 GELU-tanh) and rope_neox=%zu (0 or 1) out of range",
            c->act, c->rope_neox);
        return 0;
    }
    if (c->swa_pattern && !c->sliding_window) {
        ERR("config: swa_pattern=%zu needs a sliding_window", c->swa_pattern);
        return 0;
    }
    if (!(c->rope_theta > 0.0f) || !(c->rope_theta_swa >= 0.0f) || !(c->embed_scale >= 0.0f) ||
        !(c->attn_scale >= 0.0f) || !(c->logit_softcap >= 0.0f) || isinf(c->rope_theta) ||
        isinf(c->rope_theta_swa) || isinf(c->embed_scale) || isinf(c->attn_scale) ||
        isinf(c->logit_softcap)) {
        ERR("config: rope_theta must be positive and rope_theta_swa, embed_scale, attn_scale, "
            "logit_softcap finite and >= 0");
        return 0;
    }
    if (c->n_sinks && !c->sliding_window) {
        ERR("config: n_sinks=%zu needs a sliding_window", c->n_sinks);
        return 0;
    }
    return 1;
}

/* The weights against a checked config: present, every layer's norms and matrices, the
 * classifier and the token table (*tok) of the config's shapes. *gs: the model's Q8 group
 * size, the first Q8 matrix's (4-bit matrices have their own); *kpad_max: the longest padded
 * row of a 4-bit matrix (the activation buffers' width covers it). 0 with the reason in err. */
static int check_weights(const if_config *c, const if_weights *w, size_t *gs_out,
                         size_t *kpad_out, if_matrix *tok, char *err, size_t errlen) {
    if (!w->rms_final || !w->layers) {
        ERR("weights missing");
        return 0;
    }
    const size_t hs = if_config_head_size(c), kv_dim = hs * c->n_kv_heads, q_dim = hs * c->n_heads;
    size_t gs = 0, kpad_max = 0;
    for (size_t i = 0; i <= c->n_layers * N_MATS; i++) {
        const if_matrix *mi = i == c->n_layers * N_MATS
                                  ? &w->wcls
                                  : if_layer_matrix(&w->layers[i / N_MATS], i % N_MATS);
        if (mi->dtype == IF_Q8 && !gs) gs = mi->group_size;
        if (mi->dtype == IF_GGML && !gs) gs = if_ggml_intake_group();
        if (mi->dtype == IF_Q4 && mi->kpad > kpad_max && mi->kpad - mi->cols < mi->group_size)
            kpad_max = mi->kpad;
    }
    char name[32];
    for (size_t l = 0; l < c->n_layers; l++) {
        const if_layer_weights *L = &w->layers[l];
        if (!L->rms_att || !L->rms_ffn) {
            ERR("layer %zu: norm weights missing", l);
            return 0;
        }
        const size_t D = c->dim, KV = kv_dim, H = c->hidden_dim, Q = q_dim; /* the shapes */
#define CHECK(field, r, cc)                                          \
    snprintf(name, sizeof name, "layer %zu " #field, l);             \
    if (!if_matrix_check(&L->field, r, cc, gs, name, err, errlen)) return 0;
        IF_LAYER_MATRICES(CHECK)
#undef CHECK
    }
    if (!if_matrix_check(&w->wcls, c->vocab_size, c->dim, gs, "classifier", err, errlen))
        return 0;
    *tok = if_embed_table(w, c->vocab_size, c->dim);
    /* a tied table given as the file's bytes is the classifier's Q8 once converted */
    const int tied_ggml = tok->dtype == IF_GGML && w->wcls.dtype == IF_GGML &&
                          tok->raw == w->wcls.raw && tok->ggml_type == w->wcls.ggml_type;
    if (!tied_ggml && !if_matrix_check(tok, c->vocab_size, c->dim, IF_ANY_GROUP,
                                       "token embedding table", err, errlen))
        return 0;
    *gs_out = gs;
    *kpad_out = kpad_max;
    return 1;
}

/* The K8 activation sums of in-place K-quant matrices (if_k8_quantize_fn's bsum): one per 16
 * values of every shared and every thread's private row, allocated once like the int8 rows. */
static int alloc_k8_rows(if_model *m, size_t big, size_t act_big) {
    m->xsum = calloc(act_big / 16 + 1, sizeof(int16_t));
    m->pxsum = calloc(m->n_threads * (big / 16 + 1), sizeof(int16_t));
    return m->xsum && m->pxsum;
}

/* Allocate m's run state for chunks of m->ub rows (m's sizes and kernels set): the layers'
 * copy, the thread pool, the activation rows (`wide`: an x row's or the attention's width;
 * `big`: the widest quantized row, act_big = ub * big), the attention scratch, the batch rows'
 * slots and positions, and each thread's private decode row. 0 if anything is missing
 * (if_model_free frees the rest). */
static int alloc_run_state(if_model *m, const if_weights *w, size_t n_threads, size_t wide,
                           size_t big, size_t act_big) {
    const if_config *c = &m->c;
    const size_t ub = m->ub;
    m->layers = malloc(c->n_layers * sizeof *m->layers);
    if (m->layers) memcpy(m->layers, w->layers, c->n_layers * sizeof *m->layers);
    m->w.layers = m->layers;
    m->pool = if_pool_create(n_threads);
    m->n_threads = if_pool_threads(m->pool);
    m->x = calloc(ub * c->dim, sizeof(float));
    m->x2 = calloc(ub * c->dim, sizeof(float));
    m->xb = calloc(ub * wide, sizeof(float));
    m->xb2 = calloc(ub * c->dim, sizeof(float));
    m->hb = calloc(ub * c->hidden_dim, sizeof(float));
    m->hb2 = calloc(ub * c->hidden_dim, sizeof(float));
    m->q = calloc(ub * m->q_dim, sizeof(float));
    m->att = aligned_alloc(64, (m->n_threads * m->att_n * sizeof(float) + 63) / 64 * 64);
    m->kb = calloc(ub * m->kv_dim, sizeof(float));
    m->vb = calloc(ub * m->kv_dim, sizeof(float));
    m->rope = calloc(ub * m->head_size, sizeof(float));
    const int two_bases = c->swa_pattern && c->rope_theta_swa != 0.0f;
    if (two_bases) m->rope_swa = calloc(ub * m->head_size, sizeof(float));
    m->kv = calloc(m->n_seqs * c->n_layers, sizeof *m->kv);
    m->bseq_buf = calloc(ub, sizeof(size_t));
    m->bpos_buf = calloc(ub, sizeof(size_t));
    m->xq = calloc(act_big, 1);
    m->xs = calloc(act_big, sizeof(float));
    m->xr = calloc(act_big, sizeof(float));
    m->act_w = big;
    m->pf = calloc(m->n_threads * big, sizeof(float));
    m->pxr = calloc(m->n_threads * big, sizeof(float));
    m->pxs = calloc(m->n_threads * big, sizeof(float));
    m->pxq = calloc(m->n_threads * big, 1);
    if (!alloc_k8_rows(m, big, act_big)) return 0;
    return m->layers && m->x && m->x2 && m->xb && m->xb2 && m->hb && m->hb2 && m->q && m->att &&
           m->kb && m->vb && m->rope && (!two_bases || m->rope_swa) && m->kv && m->xq &&
           m->pf && m->pxr && m->pxs && m->pxq && m->xs && m->xr && m->pool && m->bseq_buf &&
           m->bpos_buf;
}

if_status if_model_create(const if_config *cfg, const if_weights *w, size_t n_threads,
                          size_t ubatch, if_model **out, char *err, size_t errlen) {
    if_model_opts o = {.n_threads = n_threads, .ubatch = ubatch, .kv_type = IF_KV_F32};
    return if_model_create_opts(cfg, w, &o, out, err, errlen);
}

if_status if_model_create_opts(const if_config *cfg, const if_weights *w,
                               const if_model_opts *opts, if_model **out, char *err,
                               size_t errlen) {
    *out = NULL;
    size_t n_threads = opts->n_threads, ubatch = opts->ubatch;
    if (opts->kv_type != IF_KV_F32 && opts->kv_type != IF_KV_F16 && opts->kv_type != IF_KV_I8) {
        ERR("unknown KV cache type %d", (int)opts->kv_type);
        return IF_EINVAL;
    }
    if_kernel_set ks = opts->kernels;
    if (!ks.gemv || !ks.gemm) {
        if_status st = if_kernels_choose(NULL, 0, &ks, err, errlen);
        if (st != IF_OK) return st;
    }
    const if_config c = *cfg;
    if (!check_config(&c, err, errlen)) return IF_EINVAL;
    size_t gs, kpad_max;
    if_matrix tok;
    if (!check_weights(&c, w, &gs, &kpad_max, &tok, err, errlen)) return IF_EINVAL;

    /* the run state's sizes, checked for overflow before anything is allocated */
    const size_t hs = if_config_head_size(&c), kv_dim = hs * c.n_kv_heads, q_dim = hs * c.n_heads;
    size_t ub = ubatch ? ubatch : IF_DEFAULT_UBATCH;
    if (ub > c.seq_len) ub = c.seq_len;
    if (n_threads < 1) n_threads = 1;
    const size_t wide = c.dim > q_dim ? c.dim : q_dim; /* x rows, or the attention's */
    size_t cache_n, t, big = wide > c.hidden_dim ? wide : c.hidden_dim, act_big, att_n;
    if (kpad_max > big) big = kpad_max;
    size_t cap, kv_group, kv_el;
    if_kv_geometry(&c, ub, opts->kv_type, &cap, &kv_group, &kv_el);
    const size_t att_each = if_attn_scratch_floats(hs, c.n_heads, c.n_heads / c.n_kv_heads, cap);
    size_t seqs = opts->n_seqs ? opts->n_seqs : 1;
    if (!mul_ok(c.n_layers, c.seq_len, &t) || !mul_ok(t, kv_dim, &cache_n) ||
        !mul_ok(cache_n, seqs, &cache_n) || !mul_ok(ub, big, &act_big) || !att_each ||
        !mul_ok(n_threads, att_each, &att_n) ||
        cache_n > SIZE_MAX / sizeof(float) / 2) {
        ERR("run state size overflows");
        return IF_ENOMEM;
    }

    /* a tied table of file bytes: looked up as Q8 at the intake's group, its data set below
     * once the classifier is converted */
    const if_matrix tok_q8 = {.dtype = IF_Q8, .rows = tok.rows, .cols = tok.cols,
                              .group_size = if_ggml_intake_group()};
    if_model *m = calloc(1, sizeof *m);
    if (!m) return IF_ENOMEM;
    m->c = c;
    m->w = *w;
    m->head_size = hs;
    m->kv_dim = kv_dim;
    m->q_dim = q_dim;
    m->group_size = gs;
    m->ub = ub;
    m->gemv_k = ks.gemv;
    m->gemm_k = ks.gemm;
    /* each phase's attention for the cache type (if_kernels_choose gives both phases one
     * tier, so a row's bits do not depend on the chunking) */
    const int i8 = opts->kv_type == IF_KV_I8;
    m->attn[0] = i8 ? m->gemv_k->attn_i8 : m->gemv_k->attn;
    m->attn[1] = i8 ? m->gemm_k->attn_i8 : m->gemm_k->attn;
    m->att_n = att_each;
    m->n_seqs = seqs;
    m->gemv_rows_per_thread = opts->gemv_rows_per_thread;
    m->par_min_work = opts->par_min_work ? opts->par_min_work : PAR_MIN_WORK;
    sme2_split(m, opts->sme2_workers);
    for (size_t i = 0; i <= N_MATS; i++) { /* every layer has layer 0's shapes */
        const if_matrix *mi = i == N_MATS ? &w->wcls : if_layer_matrix(&w->layers[0], i);
        if (mi->rows * mi->cols > m->max_mat_work) m->max_mat_work = mi->rows * mi->cols;
    }
    if (!alloc_run_state(m, w, n_threads, wide, big, act_big) ||
        !if_kv_alloc(m, opts->kv_type) ||
        !if_embed_init(&m->emb, tok.dtype == IF_GGML ? &tok_q8 : &tok, c.embed_scale, ub,
                       ks.gemm->q8_gemm->nr)) {
        if_model_free(m);
        ERR("out of memory allocating the run state (KV cache %zu bytes)",
            2 * cache_n * sizeof(float));
        return IF_ENOMEM;
    }
    const if_status packed = pack_weights(m, opts, err, errlen);
    if (packed != IF_OK) {
        if_model_free(m);
        return packed;
    }
    if (tok.dtype == IF_GGML) { /* tied, converted with the classifier */
        m->emb.t.q = m->w.wcls.q;
        m->emb.t.s = m->w.wcls.s;
        if (m->q8_decode == IF_DECODE_PACKED_GEMM && packed_of(m, n_cls_of(m)))
            if_embed_use_packed(&m->emb, m->gemm_k->q8_gemm, packed_of(m, n_cls_of(m)));
    }
    /* a tied Q8 table whose row-major copy went with the classifier's: rows from the packed */
    if (m->q8_decode == IF_DECODE_PACKED_GEMM && tok.dtype == IF_Q8 && tok.q == w->wcls.q &&
        packed_of(m, n_cls_of(m)))
        if_embed_use_packed(&m->emb, m->gemm_k->q8_gemm, packed_of(m, n_cls_of(m)));
    /* likewise a tied 4-bit table: its rows from the classifier's packed nibbles */
    if (m->q4_decode == IF_DECODE_PACKED_GEMM && tok.dtype == IF_Q4 && tok.q4 == w->wcls.q4 &&
        packed_of(m, n_cls_of(m)) &&
        !if_embed_use_packed_q4(&m->emb, m->gemm_k->q4_gemm,
                                (const uint8_t *)packed_of(m, n_cls_of(m)))) {
        if_model_free(m);
        ERR("out of memory allocating the token table's tile");
        return IF_ENOMEM;
    }
    *out = m;
    return IF_OK;
}

void if_model_free(if_model *m) {
    if (!m) return;
    if_pool_free(m->pool);
    if_arena_free(m);
    if_embed_free(&m->emb);
    if (m->packed) {
        free(m->packed_arena); /* m->packed[i] point into it */
        free(m->packed);
    }
    for (size_t i = 0; m->ggml_owned && i < 2 * (m->c.n_layers * N_MATS + 1); i++)
        free(m->ggml_owned[i]);
    free(m->ggml_owned);
    free(m->layers);
    free(m->x);
    free(m->x2);
    free(m->xb);
    free(m->xb2);
    free(m->hb);
    free(m->hb2);
    free(m->q);
    free(m->att);
    free(m->xq);
    free(m->xs);
    free(m->xr);
    free(m->pf);
    free(m->pxr);
    free(m->pxs);
    free(m->pxq);
    free(m->xsum);
    free(m->pxsum);
    free(m->kb);
    free(m->vb);
    free(m->rope);
    free(m->rope_swa);
    free(m->kv);
    free(m->bseq_buf);
    free(m->bpos_buf);
    free(m->kc);
    free(m->vc);
    free(m->ksc);
    free(m->vsc);
    free(m);
}

/* ---- accessors ---- */

size_t if_model_n_seqs(const if_model *m) { return m->n_seqs; }
size_t if_model_threads(const if_model *m) { return m->n_threads; }
const if_kernel_table *if_model_gemv(const if_model *m) { return m->gemv_k; }
const if_kernel_table *if_model_gemm(const if_model *m) { return m->gemm_k; }
size_t if_model_kv_bytes(const if_model *m) { return m->kv_bytes; }
size_t if_model_packed_bytes(const if_model *m) { return m->packed_bytes; }
void if_model_arena_wait(if_model *m) { if_arena_wait(m); }
size_t if_model_arena_pending(const if_model *m) { return if_arena_pending(m); }
int if_model_reads_rowmajor(const if_model *m) {
    return m->group_size != 0 && m->q8_decode != IF_DECODE_PACKED_GEMM;
}

int if_model_q4_decode_packed(const if_model *m) { return m->q4_decode == IF_DECODE_PACKED_GEMM; }

if_status if_model_unpack(const if_model *m, size_t idx, int8_t *dst, size_t bytes) {
    const if_q8_gemm_kernel *k = m->gemm_k->q8_gemm;
    const if_q4_gemm_kernel *k4 = m->gemm_k->q4_gemm;
    if (!m->packed || (!k->unpack && !(k4 && k4->unpack) && !m->q4_arena)) return IF_ENOTSUP;
    if (idx > m->c.n_layers * N_MATS) return IF_EINVAL;
    const if_matrix *w = matrix_at(m, idx);
    if (w->dtype == IF_Q4 && m->q4_arena) { /* the nibbles as given, in the arena */
        if (!dst || bytes != w->rows * (w->kpad / 2)) return IF_EINVAL;
        memcpy(dst, w->q4, bytes);
        return IF_OK;
    }
    if (w->dtype == IF_Q4) {
        if (!k4 || !k4->unpack || !m->packed[idx]) return IF_ENOTSUP;
        if (!dst || bytes != w->rows * (w->kpad / 2)) return IF_EINVAL;
        k4->unpack((uint8_t *)dst, (const uint8_t *)m->packed[idx], w->rows, w->kpad,
                   w->group_size);
        return IF_OK;
    }
    if (!k->unpack) return IF_ENOTSUP;
    if (!dst || bytes != w->rows * w->cols || !m->packed[idx]) return IF_EINVAL;
    k->unpack(dst, m->packed[idx], w->rows, w->cols, w->group_size);
    return IF_OK;
}
const char *if_model_attn_name(const if_model *m) { return m->attn[1]->name; }
if_status if_model_embed_rows(if_model *m, const int32_t *tokens, size_t n, float *out,
                              char *err, size_t errlen) {
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (size_t)tokens[i] >= m->c.vocab_size) {
            ERR("token %d out of range [0, %zu)", (int)tokens[i], m->c.vocab_size);
            return IF_EINVAL;
        }
    for (size_t r = 0; r < n; r += m->ub)
        if_embed_rows(&m->emb, out + r * m->c.dim, tokens + r, n - r < m->ub ? n - r : m->ub);
    return IF_OK;
}

if_dtype if_model_embed_info(const if_model *m, int *tied, int *packed) {
    const if_matrix *t = &m->emb.t, *c = &m->w.wcls;
    if (tied)
        *tied = t->dtype == c->dtype && (t->dtype == IF_F32  ? t->f32 == c->f32
                                         : t->dtype == IF_Q8 ? t->q == c->q && t->s == c->s
                                         : t->dtype == IF_KQ ? t->raw == c->raw
                                                             : t->q4 == c->q4);
    if (packed) *packed = m->emb.packed != NULL || m->emb.packed4 != NULL;
    return t->dtype;
}
