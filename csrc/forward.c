/* forward.c - the Llama forward pass: decode step and prefill.
 *
 * Written in llama2.c run.c's order so fp32 models reproduce run.c bit for bit and Q8 models
 * reproduce runq.c (activations quantized per group before each matmul). Matmuls go through
 * the dispatched kernels, split over output rows by the thread pool; everything else is
 * shared plain C. No allocation happens per token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isaforge.h"
#include "ops.h"

struct if_model {
    if_config c;
    if_weights w;
    if_layer_weights *layers;
    if_pool *pool;
    size_t head_size, kv_dim, group_size; /* group_size 0 for fp32 models */
    /* activations of the current position */
    float *x;      /* (dim) residual stream */
    float *xb;     /* (dim) */
    float *xb2;    /* (dim) */
    float *hb;     /* (hidden_dim) */
    float *hb2;    /* (hidden_dim) */
    float *q;      /* (dim) */
    float *att;    /* (n_heads, seq_len) */
    int8_t *xq;    /* (max(dim, hidden_dim)) quantized activation */
    float *xs;     /* (max(dim, hidden_dim) / group_size) its scales */
    float *key_cache;   /* (layer, seq_len, kv_dim) */
    float *value_cache; /* (layer, seq_len, kv_dim) */
};

#define ERR(...)                                             \
    do {                                                     \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
    } while (0)

/* ---- matmul through the dispatched kernels, parallel over output rows ---- */

typedef struct mm_job {
    const if_kernel_table *k;
    const if_matrix *w;
    float *out;
    const float *x;
    const int8_t *xq;
    const float *xs;
} mm_job;

static void mm_task(void *ctx, size_t n0, size_t n1) {
    const mm_job *j = ctx;
    const if_matrix *w = j->w;
    if (w->dtype == IF_F32)
        j->k->f32_gemv(j->out, j->x, w->f32, n0, n1, w->cols);
    else
        j->k->q8_gemv(j->out, j->xq, j->xs, w->q, w->s, n0, n1, w->cols, w->group_size);
}

/* out = W x. For Q8, pass quantize = 1 to (re)quantize x into m->xq first, 0 to reuse the
 * quantization of the same x from the previous call. */
static void matmul(if_model *m, float *out, const float *x, const if_matrix *w, int quantize) {
    const if_kernel_table *k = if_dispatch_gemv();
    if (w->dtype == IF_Q8 && quantize) k->quantize(m->xq, m->xs, x, w->cols, w->group_size);
    mm_job j = {k, w, out, x, m->xq, m->xs};
    if_pool_parallel_for(m->pool, w->rows, 4, mm_task, &j);
}

/* ---- attention, parallel over heads ---- */

typedef struct att_job {
    if_model *m;
    size_t layer, pos;
} att_job;

static void att_task(void *ctx, size_t h0, size_t h1) {
    const att_job *j = ctx;
    if_model *m = j->m;
    const size_t hs = m->head_size, kv_dim = m->kv_dim, pos = j->pos;
    const size_t kv_mul = m->c.n_heads / m->c.n_kv_heads;
    const size_t loff = j->layer * m->c.seq_len * kv_dim;
    for (size_t h = h0; h < h1; h++) {
        const float *q = m->q + h * hs;
        float *att = m->att + h * m->c.seq_len;
        for (size_t t = 0; t <= pos; t++) {
            const float *k = m->key_cache + loff + t * kv_dim + (h / kv_mul) * hs;
            float score = 0.0f;
            for (size_t i = 0; i < hs; i++) score += q[i] * k[i];
            score /= sqrtf((float)hs);
            att[t] = score;
        }
        if_softmax(att, pos + 1);
        float *xb = m->xb + h * hs;
        memset(xb, 0, hs * sizeof(float));
        for (size_t t = 0; t <= pos; t++) {
            const float *v = m->value_cache + loff + t * kv_dim + (h / kv_mul) * hs;
            float a = att[t];
            for (size_t i = 0; i < hs; i++) xb[i] += a * v[i];
        }
    }
}

/* ---- validation and setup ---- */

static int check_matrix(const if_matrix *w, size_t rows, size_t cols, size_t gs,
                        const char *name, char *err, size_t errlen) {
    if (w->rows != rows || w->cols != cols) {
        ERR("%s has shape (%zu, %zu), expected (%zu, %zu)", name, w->rows, w->cols, rows, cols);
        return 0;
    }
    if (w->dtype == IF_F32) {
        if (gs != 0 || !w->f32) {
            ERR("%s: fp32 matrix %s", name, gs ? "in a Q8 model" : "without data");
            return 0;
        }
    } else if (w->dtype == IF_Q8) {
        if (w->group_size == 0 || w->group_size != gs || cols % gs != 0 || !w->q || !w->s) {
            ERR("%s: Q8 group size %zu invalid for %zu columns (model group size %zu)", name,
                w->group_size, cols, gs);
            return 0;
        }
    } else {
        ERR("%s: unknown dtype %d", name, (int)w->dtype);
        return 0;
    }
    return 1;
}

static int mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

if_status if_model_create(const if_config *cfg, const if_weights *w, size_t n_threads,
                          if_model **out, char *err, size_t errlen) {
    *out = NULL;
    if_status st = if_dispatch_select(NULL, err, errlen);
    if (st != IF_OK) return st;
    const if_config c = *cfg;
    if (!c.dim || !c.hidden_dim || !c.n_layers || !c.n_heads || !c.n_kv_heads ||
        !c.vocab_size || !c.seq_len) {
        ERR("config has a zero dimension");
        return IF_EINVAL;
    }
    if (c.dim % c.n_heads || c.n_heads % c.n_kv_heads || (c.dim / c.n_heads) % 2) {
        ERR("config: n_heads=%zu must divide dim=%zu into even head sizes and n_kv_heads=%zu "
            "must divide n_heads",
            c.n_heads, c.dim, c.n_kv_heads);
        return IF_EINVAL;
    }
    if (!w->tok_embeddings || !w->rms_final || !w->layers) {
        ERR("weights missing");
        return IF_EINVAL;
    }
    const size_t hs = c.dim / c.n_heads, kv_dim = hs * c.n_kv_heads;
    const size_t gs = w->layers[0].wq.dtype == IF_Q8 ? w->layers[0].wq.group_size : 0;
    char name[32];
    for (size_t l = 0; l < c.n_layers; l++) {
        const if_layer_weights *L = &w->layers[l];
        if (!L->rms_att || !L->rms_ffn) {
            ERR("layer %zu: norm weights missing", l);
            return IF_EINVAL;
        }
#define CHECK(field, r, cc)                                                    \
    snprintf(name, sizeof name, "layer %zu " #field, l);                       \
    if (!check_matrix(&L->field, r, cc, gs, name, err, errlen)) return IF_EINVAL;
        CHECK(wq, c.dim, c.dim)
        CHECK(wk, kv_dim, c.dim)
        CHECK(wv, kv_dim, c.dim)
        CHECK(wo, c.dim, c.dim)
        CHECK(w1, c.hidden_dim, c.dim)
        CHECK(w2, c.dim, c.hidden_dim)
        CHECK(w3, c.hidden_dim, c.dim)
#undef CHECK
    }
    if (!check_matrix(&w->wcls, c.vocab_size, c.dim, gs, "classifier", err, errlen))
        return IF_EINVAL;

    size_t cache_n, att_n, t;
    if (!mul_ok(c.n_layers, c.seq_len, &t) || !mul_ok(t, kv_dim, &cache_n) ||
        !mul_ok(c.n_heads, c.seq_len, &att_n) || cache_n > SIZE_MAX / sizeof(float) / 2) {
        ERR("KV cache size overflows");
        return IF_ENOMEM;
    }
    if_model *m = calloc(1, sizeof *m);
    if (!m) return IF_ENOMEM;
    m->c = c;
    m->w = *w;
    m->head_size = hs;
    m->kv_dim = kv_dim;
    m->group_size = gs;
    m->layers = malloc(c.n_layers * sizeof *m->layers);
    if (m->layers) memcpy(m->layers, w->layers, c.n_layers * sizeof *m->layers);
    m->w.layers = m->layers;
    size_t big = c.dim > c.hidden_dim ? c.dim : c.hidden_dim;
    m->x = calloc(c.dim, sizeof(float));
    m->xb = calloc(c.dim, sizeof(float));
    m->xb2 = calloc(c.dim, sizeof(float));
    m->hb = calloc(c.hidden_dim, sizeof(float));
    m->hb2 = calloc(c.hidden_dim, sizeof(float));
    m->q = calloc(c.dim, sizeof(float));
    m->att = calloc(att_n, sizeof(float));
    m->xq = calloc(big, 1);
    m->xs = calloc(big, sizeof(float));
    m->key_cache = calloc(cache_n, sizeof(float));
    m->value_cache = calloc(cache_n, sizeof(float));
    m->pool = if_pool_create(n_threads);
    if (!m->layers || !m->x || !m->xb || !m->xb2 || !m->hb || !m->hb2 || !m->q || !m->att ||
        !m->xq || !m->xs || !m->key_cache || !m->value_cache || !m->pool) {
        if_model_free(m);
        ERR("out of memory allocating the run state (KV cache %zu bytes)",
            2 * cache_n * sizeof(float));
        return IF_ENOMEM;
    }
    *out = m;
    return IF_OK;
}

void if_model_free(if_model *m) {
    if (!m) return;
    if_pool_free(m->pool);
    free(m->layers);
    free(m->x);
    free(m->xb);
    free(m->xb2);
    free(m->hb);
    free(m->hb2);
    free(m->q);
    free(m->att);
    free(m->xq);
    free(m->xs);
    free(m->key_cache);
    free(m->value_cache);
    free(m);
}

size_t if_model_threads(const if_model *m) { return if_pool_threads(m->pool); }

/* ---- the forward pass ---- */

if_status if_model_forward(if_model *m, int32_t token, size_t pos, float *logits, char *err,
                           size_t errlen) {
    const if_config *c = &m->c;
    if (token < 0 || (size_t)token >= c->vocab_size) {
        ERR("token %d out of range [0, %zu)", (int)token, c->vocab_size);
        return IF_EINVAL;
    }
    if (pos >= c->seq_len) {
        ERR("position %zu beyond the context length %zu", pos, c->seq_len);
        return IF_EINVAL;
    }
    const size_t dim = c->dim, kv_dim = m->kv_dim, hidden = c->hidden_dim;
    float *x = m->x;
    memcpy(x, m->w.tok_embeddings + (size_t)token * dim, dim * sizeof(float));

    for (size_t l = 0; l < c->n_layers; l++) {
        const if_layer_weights *L = &m->layers[l];
        if_rmsnorm(m->xb, x, L->rms_att, dim, c->norm_eps);

        /* q, k, v; k and v are written straight into this position's cache row */
        size_t loff = l * c->seq_len * kv_dim;
        float *k = m->key_cache + loff + pos * kv_dim;
        float *v = m->value_cache + loff + pos * kv_dim;
        matmul(m, m->q, m->xb, &L->wq, 1);
        matmul(m, k, m->xb, &L->wk, 0);
        matmul(m, v, m->xb, &L->wv, 0);
        if_rope(m->q, dim, k, kv_dim, m->head_size, pos, c->rope_theta);

        att_job aj = {m, l, pos};
        if_pool_parallel_for(m->pool, c->n_heads, 1, att_task, &aj);

        matmul(m, m->xb2, m->xb, &L->wo, 1);
        for (size_t i = 0; i < dim; i++) x[i] += m->xb2[i];

        if_rmsnorm(m->xb, x, L->rms_ffn, dim, c->norm_eps);
        matmul(m, m->hb, m->xb, &L->w1, 1);
        matmul(m, m->hb2, m->xb, &L->w3, 0);
        if_swiglu(m->hb, m->hb2, hidden);
        matmul(m, m->xb, m->hb, &L->w2, 1);
        for (size_t i = 0; i < dim; i++) x[i] += m->xb[i];
    }
    if_rmsnorm(x, x, m->w.rms_final, dim, c->norm_eps);
    matmul(m, logits, x, &m->w.wcls, 1);
    return IF_OK;
}

if_status if_model_prefill(if_model *m, const int32_t *tokens, size_t n, size_t pos0,
                           float *logits, float *all_logits, char *err, size_t errlen) {
    if (n == 0) {
        ERR("prefill of zero tokens");
        return IF_EINVAL;
    }
    if (pos0 >= m->c.seq_len || n > m->c.seq_len - pos0) {
        ERR("prefill of %zu tokens at position %zu exceeds the context length %zu", n, pos0,
            m->c.seq_len);
        return IF_EINVAL;
    }
    const size_t vocab = m->c.vocab_size;
    if (!all_logits && !logits) {
        ERR("prefill needs somewhere to write logits");
        return IF_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        float *dst = all_logits ? all_logits + i * vocab : logits;
        if_status st = if_model_forward(m, tokens[i], pos0 + i, dst, err, errlen);
        if (st != IF_OK) return st;
    }
    if (all_logits && logits) memcpy(logits, all_logits + (n - 1) * vocab, vocab * sizeof(float));
    return IF_OK;
}
