/* forward.c - the Llama forward pass: decode step and chunked prefill.
 *
 * Written in llama2.c run.c's order (Q8 models: runq.c's, activations quantized per group
 * before each matmul). Matmuls go through the dispatched kernels (csrc/matmul.c): GEMV, or the
 * GEMM over its packed weights, for a decode step, the GEMM over a chunk of prompt rows for
 * prefill. Attention is one kernel for both: a chunk's K/V rows go into the cache first
 * (csrc/kv.c), then query tiles x key blocks with an online softmax (a decode step is a chunk
 * of one row). Every output element is computed with the same arithmetic either way, so
 * prefill logits equal token-by-token logits bit for bit, whatever the chunk size. Everything
 * else is shared plain C; nothing is allocated per token (csrc/model.c allocates the run
 * state).
 *
 * Threads: a forward call (decode step, prefill chunk, batched step) is one parallel region
 * (csrc/threadpool.h): every thread walks the layers, meeting at a barrier (if_step_wait)
 * between dependent steps. Matmuls and attention are steps of tasks claimed in chunks from an
 * atomic counter; norms, RoPE, KV stores, residual adds, SwiGLU, activation quantization and
 * the Hadamard rotation are steps split by rows in prefill and, for one row, by elements
 * (whole quantization groups; RoPE and the KV stores by query head, key row and value row).
 * Every output element is still computed start to finish by one thread in one fixed order, so
 * the results are the same bits at every thread count. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model_internal.h"
#include "ops.h"
#include "threadpool.h"

/* ---- attention: tasks over (query tile x kv group), or (row x head) when that is too few ---- */

typedef struct att_task_job {
    if_model *m;
    if_attn_job j;
    size_t M, tiles, per_group; /* per_group: tasks are (tile, kv group), else (row, head) */
    if_attn_fn attn;
    size_t l; /* the layer (a batched step's rows read their own slots' caches) */
} att_task_job;

static void att_task(void *ctx, size_t t0, size_t t1, size_t tid) {
    const att_task_job *a = ctx;
    if_model *m = a->m;
    float *scratch = m->att + tid * m->att_n;
    const size_t n_kv = m->c.n_kv_heads, kv_mul = m->c.n_heads / n_kv, TQ = IF_ATTN_Q_TILE;
    for (size_t t = t0; t < t1; t++) {
        if (m->bpos) { /* a batched decode step: (row, kv group), each row its own job */
            size_t r = t / n_kv, g = t % n_kv;
            if_attn_job j = a->j;
            j.q += r * j.ldq;
            j.out += r * j.ldo;
            j.pos0 = m->bpos[r];
            j.kv = kv_of(m, a->l, r);
            a->attn(&j, 0, 1, g * kv_mul, (g + 1) * kv_mul, scratch);
        } else if (a->per_group) {
            /* causal tiles grow in cost: tiles alternate from both ends (0, last, 1, last-1,
             * ...) so each thread's contiguous range of tasks gets a fair share */
            size_t i = t / n_kv, g = t % n_kv;
            size_t r0 = ((i & 1) ? a->tiles - 1 - i / 2 : i / 2) * TQ;
            size_t r1 = r0 + TQ < a->M ? r0 + TQ : a->M;
            a->attn(&a->j, r0, r1, g * kv_mul, (g + 1) * kv_mul, scratch);
        } else { /* (row, head): the chunk's consecutive heads of one row and kv group in
                  * one call (its keys transposed once for them) */
            const size_t nh = m->c.n_heads, r = t / nh, h = t % nh, g = h / kv_mul;
            size_t e = t + 1;
            while (e < t1 && e / nh == r && e % nh / kv_mul == g) e++;
            a->attn(&a->j, r, r + 1, h, h + (e - t), scratch);
            t = e - 1;
        }
    }
}

/* Multiply-adds an fp32 attention multiply-add is counted as, against par_min_work: one
 * (its scores, exponentials and P.V in fixed order) costs several times an int8 matmul's,
 * and below par_min_work the whole step runs on one thread while the others wait, so counted
 * at face value a short decode step's attention would run on thread 0 alone (the measurement:
 * docs/performance.md). */
#define ATT_WORK 8

/* The attention of M rows as one step (does not wait). */
static void attention(fw *f, size_t l, size_t pos0, size_t M, size_t window) {
    if_model *m = f->m;
    const if_config *c = &m->c;
    const size_t team = f->w->team;
    att_task_job a = {m,
                      {m->q, m->xb, m->q_dim, m->q_dim, pos0, c->n_heads, c->n_kv_heads,
                       m->head_size, window, window ? c->n_sinks : 0, kv_of(m, l, 0)},
                      M, 0, 0, m->attn[M > 1 && !m->bpos]->run, l};
    size_t tiles = (M + IF_ATTN_Q_TILE - 1) / IF_ATTN_Q_TILE;
    a.tiles = tiles;
    a.per_group = team == 1 || tiles * c->n_kv_heads >= 2 * team;
    size_t n = a.per_group ? tiles * c->n_kv_heads : M * c->n_heads;
    if (m->bpos) { /* a batched step: (row, kv group) tasks, each row at its own position */
        size_t most = 0;
        for (size_t r = 0; r < M; r++) most = m->bpos[r] > most ? m->bpos[r] : most;
        size_t keys = window && window + c->n_sinks < most + 1 ? window + c->n_sinks : most + 1;
        if_fw_tasks(f, M * c->n_kv_heads, 1, att_task, &a, ATT_WORK * M * 2 * keys * m->q_dim, 0,
                    MM_CHUNKS);
        return;
    }
    size_t keys = window && window + c->n_sinks < pos0 + M ? window + c->n_sinks : pos0 + M;
    /* (row, head) tasks: one chunk per thread, so a chunk's heads of one kv group share a call
     * (a SmolLM2 decode step at 2 threads, 9 heads in 3 groups: chunks of heads 0-4 and 5-8,
     * 2 calls each, rather than 8 chunks of 1-2 heads, each head its own call) */
    if_fw_tasks(f, n, 1, att_task, &a, ATT_WORK * M * 2 * keys * m->q_dim, 0,
                a.per_group ? MM_CHUNKS : 1);
}

/* ---- the forward pass over M rows at positions pos0.. (M <= ub) ---- */

/* row[i] += b[i] for n values (a projection's bias). */
static void add_bias(float *row, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) row[i] += b[i];
}

/* Per-head RMSNorm of n values (heads of hs, one weight w shared by the heads). */
static void head_norm(float *row, size_t n, size_t hs, const float *w, float eps) {
    for (size_t h = 0; h < n; h += hs) if_rmsnorm(row + h, row + h, w, hs, eps);
}

/* After the q, k, v projections, for rows [r0, r1) of a chunk (all of each row's heads):
 * biases, per-head norms, RoPE, the query scale, and the k and v rows into the cache. */
static void qkv_rows(if_model *m, const if_layer_weights *L, size_t l, size_t pos0,
                     const float *rope, float q_mul, size_t r0, size_t r1) {
    const if_config *c = &m->c;
    const size_t qd = m->q_dim, kv_dim = m->kv_dim, hs = m->head_size;
    for (size_t r = r0; r < r1; r++) {
        float *qr = m->q + r * qd, *kr = m->kb + r * kv_dim, *vr = m->vb + r * kv_dim;
        if (L->bq) add_bias(qr, L->bq, qd);
        if (L->bk) add_bias(kr, L->bk, kv_dim);
        if (L->bv) add_bias(vr, L->bv, kv_dim);
        if (L->q_norm) head_norm(qr, qd, hs, L->q_norm, c->norm_eps);
        if (L->k_norm) head_norm(kr, kv_dim, hs, L->k_norm, c->norm_eps);
        (c->rope_neox ? if_rope_apply_neox : if_rope_apply)(qr, qd, kr, kv_dim, hs,
                                                            rope + r * hs);
        if (q_mul != 0.0f)
            for (size_t i = 0; i < qd; i++) qr[i] *= q_mul;
        if_kv_store(kv_of(m, l, r), 0, pos_of(m, pos0, r), kr);
        if_kv_store(kv_of(m, l, r), 1, pos_of(m, pos0, r), vr);
    }
}

/* The same for one row, task t of n_heads + 2: query head t (its bias, norm, RoPE and
 * scale), then the key row (into the cache), then the value row. Every element goes through
 * the operations qkv_rows gives it, in the same order. */
static void qkv_task(if_model *m, const if_layer_weights *L, size_t l, size_t pos0,
                     const float *rope, float q_mul, size_t t) {
    const if_config *c = &m->c;
    const size_t kv_dim = m->kv_dim, hs = m->head_size;
    void (*apply)(float *, size_t, float *, size_t, size_t, const float *) =
        c->rope_neox ? if_rope_apply_neox : if_rope_apply;
    if (t < c->n_heads) {
        float *qh = m->q + t * hs;
        if (L->bq) add_bias(qh, L->bq + t * hs, hs);
        if (L->q_norm) if_rmsnorm(qh, qh, L->q_norm, hs, c->norm_eps);
        apply(qh, hs, NULL, 0, hs, rope);
        if (q_mul != 0.0f)
            for (size_t i = 0; i < hs; i++) qh[i] *= q_mul;
    } else if (t == c->n_heads) {
        float *kr = m->kb;
        if (L->bk) add_bias(kr, L->bk, kv_dim);
        if (L->k_norm) head_norm(kr, kv_dim, hs, L->k_norm, c->norm_eps);
        apply(kr, kv_dim, NULL, 0, hs, rope);
        if_kv_store(kv_of(m, l, 0), 0, pos_of(m, pos0, 0), kr);
    } else {
        float *vr = m->vb;
        if (L->bv) add_bias(vr, L->bv, kv_dim);
        if_kv_store(kv_of(m, l, 0), 1, pos_of(m, pos0, 0), vr);
    }
}

/* Runs the layers for rows already embedded in m->x and leaves the final-normed rows in
 * m->x, on every thread of the region (f's walker), steps split as the file's header says.
 * Caller checked tokens and positions. A layer is the Llama layer plus what the config and its
 * optional vectors describe (all absent: the Llama operations exactly). */
static void run_layers(fw *f, size_t pos0, size_t M) {
    if_model *m = f->m;
    if_walker *w = f->w;
    const if_config *c = &m->c;
    const size_t dim = c->dim, kv_dim = m->kv_dim, hidden = c->hidden_dim, hs = m->head_size;
    const size_t qd = m->q_dim;
    /* the angles depend on the position only: once per chunk, not per layer and head (not
     * waited for: the first norm's wait covers them) */
    if_step(w, M, 1, 0, elem_chunks(f, M * hs * 4, ROW_CHUNKS)); /* ~4x: the sines */
    CHUNKS(f, a, b)
    for (size_t r = a; r < b; r++) {
        if_rope_angles(m->rope + r * hs, hs, pos_of(m, pos0, r), c->rope_theta, m->w.rope_freqs);
        if (m->rope_swa)
            if_rope_angles(m->rope_swa + r * hs, hs, pos_of(m, pos0, r), c->rope_theta_swa,
                           m->w.rope_freqs);
    }
    /* q *= attn_scale * sqrt(hs) before the kernels divide by sqrt(hs); not at the default */
    const float q_mul = c->attn_scale != 0.0f && c->attn_scale != 1.0f / sqrtf((float)hs)
                            ? c->attn_scale * sqrtf((float)hs)
                            : 0.0f;
    /* the residual stream alternates between m->x and m->x2 (a residual add writes the other
     * buffer, so the threads summing the old one for the next norm read it undisturbed) */
    float *x = m->x, *xn = m->x2, *tmp;
    if_fw_prep(f, IF_PREP_NORM, m->xb, x, m->layers[0].rms_att, M, dim, c->norm_eps,
               &m->layers[0].wq, NULL);
    for (size_t l = 0; l < c->n_layers; l++) {
        const if_layer_weights *L = &m->layers[l];
        size_t pk = l * N_MATS;
        /* the cache lines the step after q, k, v stores into, fetched while the projections
         * stream, so that step's stores do not miss (it shortens the other threads' wait
         * after it; docs/performance.md) */
        if (M == 1 && w->tid == 0) if_kv_prefetch_row(kv_of(m, l, 0), pos_of(m, pos0, 0));
        const size_t window = layer_window(c, l);
        const float *rope = window && m->rope_swa ? m->rope_swa : m->rope;

        /* q, k, v (one wait for the three; xb normed and quantized for wq by the previous
         * step); the chunk's k and v rows go into the cache (converted to its type) before
         * attention, which then reads every key through it */
        if_fw_matmul(f, m->q, qd, m->xb, M, &L->wq, packed_of(m, pk + IF_MAT_wq), 0);
        if_fw_matmul(f, m->kb, kv_dim, m->xb, M, &L->wk, packed_of(m, pk + IF_MAT_wk), 0);
        if_fw_matmul(f, m->vb, kv_dim, m->xb, M, &L->wv, packed_of(m, pk + IF_MAT_wv), 0);
        if_step_wait(w);
        if (M > 1) {
            if_step(w, M, 1, 0, elem_chunks(f, M * (qd + 2 * kv_dim), ROW_CHUNKS));
            CHUNKS(f, a, b) qkv_rows(m, L, l, pos0, rope, q_mul, a, b);
        } else {
            /* one chunk per thread even below par_min_work: the team is awake, and one
             * thread alone here held the others for its whole step (docs/performance.md) */
            if_step(w, c->n_heads + 2, 1, 0, 1);
            CHUNKS(f, a, b)
            for (size_t t = a; t < b; t++) qkv_task(m, L, l, pos0, rope, q_mul, t);
        }
        if_step_wait(w);

        attention(f, l, pos0, M, window);
        if_step_wait(w);

        if_fw_matmul(f, m->xb2, dim, m->xb, M, &L->wo, packed_of(m, pk + IF_MAT_wo), 1);
        if_step_wait(w);
        if_resid_in ra = {m->xb2, L->rms_post_att, xn};
        if_fw_prep(f, IF_PREP_RESID, m->xb, x, L->rms_ffn, M, dim, c->norm_eps, &L->w1, &ra);
        tmp = x, x = xn, xn = tmp;

        if_fw_matmul(f, m->hb, hidden, m->xb, M, &L->w1, packed_of(m, pk + IF_MAT_w1), 0);
        if_fw_matmul(f, m->hb2, hidden, m->xb, M, &L->w3, packed_of(m, pk + IF_MAT_w3), 0);
        if_step_wait(w);
        if_fw_prep(f, IF_PREP_GATE, m->hb, m->hb2, NULL, M, hidden, c->norm_eps, &L->w2, NULL);
        if_fw_matmul(f, m->xb2, dim, m->hb, M, &L->w2, packed_of(m, pk + IF_MAT_w2), 0);
        if_step_wait(w);
        if_resid_in rf = {m->xb2, L->rms_post_ffn, xn};
        if (l + 1 < c->n_layers) { /* with the next layer's attention norm, for its wq */
            const if_layer_weights *N = &m->layers[l + 1];
            if_fw_prep(f, IF_PREP_RESID, m->xb, x, N->rms_att, M, dim, c->norm_eps, &N->wq, &rf);
            tmp = x, x = xn, xn = tmp;
        } else { /* with the final norm, into m->x (x is m->x2 here) */
            rf.xn = NULL;
            if_fw_prep(f, IF_PREP_RESID, m->x, x, m->w.rms_final, M, dim, c->norm_eps, NULL, &rf);
        }
    }
}

/* Token rows into m->x (times embed_scale when the config has one). */
static void embed(if_model *m, const int32_t *tokens, size_t M) {
    if_embed_rows(&m->emb, m->x, tokens, M);
}

/* Final logit soft-capping over n values, when the config has it. */
static void softcap(const if_model *m, float *logits, size_t n) {
    if (m->c.logit_softcap != 0.0f)
        for (size_t i = 0; i < n; i++) logits[i] = if_softcap(logits[i], m->c.logit_softcap);
}

static int check_tokens(const if_model *m, const int32_t *tokens, size_t n, size_t pos0,
                        char *err, size_t errlen) {
    if (n == 0) {
        ERR("no tokens to run");
        return 0;
    }
    if (pos0 >= m->c.seq_len || n > m->c.seq_len - pos0) {
        ERR("position %zu beyond the context length %zu", pos0 + n - 1, m->c.seq_len);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (size_t)tokens[i] >= m->c.vocab_size) {
            ERR("token %d out of range [0, %zu)", (int)tokens[i], m->c.vocab_size);
            return 0;
        }
    }
    return 1;
}

/* ---- one parallel region per forward call ---- */

/* A forward call's region: run_layers over M rows at pos0, then (rows wanting logits first
 * packed to the front of x, for a batched step) the classifier over cls_rows rows of x from
 * cls_x into cls_out (0 rows: none) and the soft-capping. */
typedef struct call {
    if_model *m;
    size_t pos0, M;
    float *cls_out;
    const float *cls_x;
    size_t cls_rows;
    const uint8_t *want; /* (M) or NULL */
} call;

static void call_walk(void *ctx, if_walker *w) {
    const call *k = ctx;
    if_model *m = k->m;
    const size_t pw = w->tid * m->act_w; /* this walker's private rows */
    fw f = {.m = m,
            .w = w,
            .priv = {.f = m->pf + pw, .xr = m->pxr + pw, .xs = m->pxs + pw, .xq = m->pxq + pw,
                     .xsum = m->pxsum + w->tid * (m->act_w / 16 + 1)}};
    run_layers(&f, k->pos0, k->M);
    if (k->want) { /* the rows that want logits, packed to the front of x: one chunk */
        const size_t dim = m->c.dim;
        if_step(w, 1, 1, 1, 1);
        CHUNKS(&f, a, b) {
            (void)a;
            (void)b;
            size_t n = 0;
            for (size_t r = 0; r < k->M; r++)
                if (k->want[r]) {
                    if (n != r) memmove(m->x + n * dim, m->x + r * dim, dim * sizeof(float));
                    n++;
                }
        }
        if_step_wait(w);
    }
    if (!k->cls_rows) return;
    const size_t vocab = m->c.vocab_size;
    if_fw_matmul(&f, k->cls_out, vocab, k->cls_x, k->cls_rows, &m->w.wcls,
                 packed_of(m, n_cls_of(m)), 1);
    if (m->c.logit_softcap != 0.0f) {
        if_step_wait(w);
        if_step(w, k->cls_rows * vocab, 64, 0,
                elem_chunks(&f, k->cls_rows * vocab, k->cls_rows > 1 ? ROW_CHUNKS : 1));
        CHUNKS(&f, a, b) softcap(m, k->cls_out + a, b - a);
    }
}

/* Run a call in one region: the whole pool when its largest matmul reaches par_min_work, else
 * the calling thread alone (tiny models: no thread is woken and no barrier is crossed). */
static void run_call(if_model *m, call *k) {
    const size_t team = k->M * m->max_mat_work >= m->par_min_work ? 0 : 1;
    if_region(m->pool, team, call_walk, k);
}

if_status if_model_forward(if_model *m, int32_t token, size_t pos, float *logits, char *err,
                           size_t errlen) {
    if (!check_tokens(m, &token, 1, pos, err, errlen)) return IF_EINVAL;
    if_arena_step(m); /* decode streams the weights: the next slice of their copy (arena.c) */
    embed(m, &token, 1);
    call k = {m, pos, 1, logits, m->x, 1, NULL};
    run_call(m, &k);
    return IF_OK;
}

if_status if_model_prefill(if_model *m, const int32_t *tokens, size_t n, size_t pos0,
                           float *logits, float *all_logits, char *err, size_t errlen) {
    if (!check_tokens(m, tokens, n, pos0, err, errlen)) return IF_EINVAL;
    if (!all_logits && !logits) {
        ERR("prefill needs somewhere to write logits");
        return IF_EINVAL;
    }
    const size_t dim = m->c.dim, vocab = m->c.vocab_size;
    for (size_t start = 0; start < n; start += m->ub) {
        size_t M = n - start < m->ub ? n - start : m->ub;
        embed(m, tokens + start, M);
        call k = {m, pos0 + start, M, NULL, NULL, 0, NULL};
        if (all_logits) { /* classifier rows of the whole chunk as one GEMM */
            k.cls_out = all_logits + start * vocab;
            k.cls_x = m->x;
            k.cls_rows = M;
        } else if (start + M == n) { /* only the last position's logits are needed */
            k.cls_out = logits;
            k.cls_x = m->x + (M - 1) * dim;
            k.cls_rows = 1;
        }
        run_call(m, &k);
    }
    if (all_logits && logits) memcpy(logits, all_logits + (n - 1) * vocab, vocab * sizeof(float));
    return IF_OK;
}

/* ---- final hidden states (embeddings): the rows the classifier would read ---- */

if_status if_model_hidden_seq(if_model *m, size_t seq, const int32_t *tokens, size_t n,
                              size_t pos0, int last_only, float *out, size_t out_len, char *err,
                              size_t errlen) {
    if (seq >= m->n_seqs) {
        ERR("sequence slot %zu out of range [0, %zu)", seq, m->n_seqs);
        return IF_EINVAL;
    }
    if (!check_tokens(m, tokens, n, pos0, err, errlen)) return IF_EINVAL;
    const size_t dim = m->c.dim, rows = last_only ? 1 : n;
    /* divided, not multiplied: rows * dim cannot overflow the check */
    if (!out || out_len / dim < rows) {
        ERR("hidden states need %zu rows of %zu floats, the buffer holds %zu floats", rows, dim,
            out ? out_len : 0);
        return IF_EINVAL;
    }
    m->seq = seq;
    for (size_t start = 0; start < n; start += m->ub) {
        size_t M = n - start < m->ub ? n - start : m->ub;
        embed(m, tokens + start, M);
        call k = {m, pos0 + start, M, NULL, NULL, 0, NULL}; /* no classifier rows */
        run_call(m, &k);
        /* run_layers left the chunk's final-normed rows in m->x */
        if (!last_only)
            memcpy(out + start * dim, m->x, M * dim * sizeof(float));
        else if (start + M == n)
            memcpy(out, m->x + (M - 1) * dim, dim * sizeof(float));
    }
    m->seq = 0;
    return IF_OK;
}

/* ---- sequence slots: prefill into one, decode many together ---- */

if_status if_model_prefill_seq(if_model *m, size_t seq, const int32_t *tokens, size_t n,
                               size_t pos0, float *logits, float *all_logits, char *err,
                               size_t errlen) {
    if (seq >= m->n_seqs) {
        ERR("sequence slot %zu out of range [0, %zu)", seq, m->n_seqs);
        return IF_EINVAL;
    }
    m->seq = seq;
    if_status st = if_model_prefill(m, tokens, n, pos0, logits, all_logits, err, errlen);
    m->seq = 0;
    return st;
}

if_status if_model_batch(if_model *m, size_t n, const int32_t *tokens, const size_t *seqs,
                         const size_t *pos, const uint8_t *want, float *logits, char *err,
                         size_t errlen) {
    if (n == 0 || !tokens || !seqs || !pos || !logits) {
        ERR("a batched step needs n >= 1 rows and their tokens, slots, positions and logits");
        return IF_EINVAL;
    }
    for (size_t r = 0; r < n; r++) {
        if (seqs[r] >= m->n_seqs) {
            ERR("row %zu: sequence slot %zu out of range [0, %zu)", r, seqs[r], m->n_seqs);
            return IF_EINVAL;
        }
        if (!check_tokens(m, tokens + r, 1, pos[r], err, errlen)) return IF_EINVAL;
        for (size_t q = 0; q < r; q++)
            if (seqs[q] == seqs[r] && pos[q] >= pos[r]) {
                ERR("rows %zu and %zu of slot %zu: positions %zu, %zu must rise", q, r, seqs[r],
                    pos[q], pos[r]);
                return IF_EINVAL;
            }
    }
    const size_t vocab = m->c.vocab_size;
    float *out = logits;
    if_arena_step(m); /* a batched step decodes too (if_model_forward) */
    for (size_t start = 0; start < n; start += m->ub) {
        size_t M = n - start < m->ub ? n - start : m->ub;
        memcpy(m->bseq_buf, seqs + start, M * sizeof(size_t));
        memcpy(m->bpos_buf, pos + start, M * sizeof(size_t));
        m->bseq = m->bseq_buf;
        m->bpos = m->bpos_buf;
        embed(m, tokens + start, M);
        size_t k = M;
        if (want) { /* the rows that want logits (packed to the front of x in the region) */
            k = 0;
            for (size_t r = 0; r < M; r++) k += want[start + r] != 0;
        }
        call c = {m, 0, M, out, m->x, k, want ? want + start : NULL};
        run_call(m, &c);
        m->bseq = m->bpos = NULL;
        out += k * vocab;
    }
    return IF_OK;
}

if_status if_model_decode_batch(if_model *m, size_t n, const int32_t *tokens,
                                const size_t *seqs, const size_t *pos, float *logits, char *err,
                                size_t errlen) {
    for (size_t r = 0; r < n; r++)
        for (size_t q = 0; q < r; q++)
            if (seqs[q] == seqs[r]) {
                ERR("rows %zu and %zu both decode slot %zu", q, r, seqs[r]);
                return IF_EINVAL;
            }
    return if_model_batch(m, n, tokens, seqs, pos, NULL, logits, err, errlen);
}

