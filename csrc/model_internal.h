/* model_internal.h - the model's run state and what the forward pass's translation units share
 * (internal; callers use isaforge.h):
 *   model.c    model creation and validation, weight packing, accessors, free
 *   kv.c       the KV cache: its shape per layer, its allocation, its rows
 *   forward.c  the layer loop and the forward / prefill / batch entry points */
#ifndef ISAFORGE_MODEL_INTERNAL_H
#define ISAFORGE_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "embed.h"
#include "isaforge.h"

#define N_MATS IF_N_LAYER_MATRICES /* IF_LAYER_MATRICES, in its order */

struct if_model {
    if_config c;
    if_weights w;
    if_layer_weights *layers;
    if_embed emb;      /* the token-table lookup (csrc/embed.c) */
    if_pool *pool;
    const if_kernel_table *gemv_k; /* decode kernels */
    const if_kernel_table *gemm_k; /* prefill kernels */
    int8_t **packed;   /* (n_layers * N_MATS + 1) GEMM-packed int8 weights, or NULL */
    void *packed_arena; /* one allocation holding them all (2 MiB pages where offered) */
    size_t packed_bytes; /* their total */
    int decode_packed; /* 1: decode reads the packed copy too (the row-major int8 is never read) */
    int q4_decode_packed; /* likewise for the 4-bit matrices (if_q4_gemm_kernel.decode_packed) */
    int q4_arena; /* 1: the 4-bit row-major nibbles were copied into packed_arena, as they are
                   * (tiers whose 4-bit GEMM has no layout; if_model_opts.q4_arena) */
    size_t head_size, kv_dim, group_size; /* group_size 0 for fp32 models */
    size_t q_dim;      /* n_heads * head_size (dim for Llama) */
    size_t ub;         /* prefill chunk rows */
    size_t n_threads;
    size_t gemv_rows_per_thread; /* decode matmuls' thread budget (if_model_opts), 0: off */
    size_t par_min_work;         /* work below which an op runs on the caller (if_model_opts) */
    /* SME2 hybrid split (if_model_opts.sme2_workers): in a Q8 matmul, workers tid < sme2_workers
     * run the SME2 kernel, the others these non-streaming kernels over the same row-major
     * weights (bit-identical results); NULL: no split */
    size_t sme2_workers;
    const if_q8_gemv_kernel *q8_gemv_alt;
    const if_q8_gemm_kernel *q8_gemm_alt;
    size_t max_mat_work;         /* rows * cols of the largest matrix (one row's matmul work) */
    /* activations, (ub, width) row-major; a decode step uses row 0 */
    float *x;      /* (ub, dim) residual stream; the final-normed rows after the layers */
    float *x2;     /* (ub, dim) the residual stream's other buffer (run_layers) */
    float *xb;     /* (ub, max(dim, q_dim)): normed rows, then the attention's (ub, q_dim) */
    float *xb2;    /* (ub, dim) */
    float *hb;     /* (ub, hidden_dim) */
    float *hb2;    /* (ub, hidden_dim) */
    float *q;      /* (ub, q_dim) */
    float *kb;     /* (ub, kv_dim) keys of the chunk before they go into the cache */
    float *vb;     /* (ub, kv_dim) values, likewise */
    float *rope;   /* (ub, head_size) RoPE cos/sin of the chunk's positions, for every layer */
    float *rope_swa; /* (ub, head_size) likewise at rope_theta_swa (swa_pattern), else NULL */
    float *att;    /* (n_threads, att_n) attention kernel scratch */
    size_t att_n;  /* scratch floats per thread */
    int8_t *xq;    /* (ub, act_w) quantized activations */
    float *xr;     /* (ub, act_w) 4-bit matrices' activations, zero-padded and rotated */
    size_t act_w;  /* max(dim, hidden_dim, every 4-bit matrix's kpad) */
    float *xs;     /* (ub, max(dim, hidden_dim)) their scales (K/gs used per row) */
    /* a decode step's own activation row per thread (fw's private mode): (n_threads, act_w)
     * each: the float row, its rotated copy, its int8 values and their scales */
    float *pf, *pxr, *pxs;
    int8_t *pxq;
    const if_attn_kernel *attn[2];     /* [0] decode (M = 1), [1] prefill: for the cache type */
    if_kv_layer *kv;    /* (n_layers) views into the cache buffers below */
    void *kc, *vc;      /* (layer, cap, kv_dim) cache elements */
    float *ksc, *vsc;   /* (layer, cap, kv_dim / group) int8 scales, or NULL */
    size_t kv_bytes;
    /* sequence slots: n_seqs KV caches, kv[seq * n_layers + l]; a prefill runs in slot `seq`;
     * a batched decode step (if_model_decode_batch) gives each row its slot and position */
    size_t n_seqs, seq;
    const size_t *bseq, *bpos; /* (M) the batch rows' slots and positions, or NULL */
    size_t *bseq_buf, *bpos_buf; /* (ub) their storage */
};

/* Write a reason into (err, errlen), the callers' error buffer, when there is one. */
#define ERR(...)                                               \
    do {                                                       \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
    } while (0)

/* *out = a * b, or 0 when that overflows. */
static inline int mul_ok(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

/* Layer l's cache of the slot row r runs in. */
static inline const if_kv_layer *kv_of(const if_model *m, size_t l, size_t r) {
    return &m->kv[(m->bseq ? m->bseq[r] : m->seq) * m->c.n_layers + l];
}
/* Position of row r of a chunk starting at pos0 (a batched step: the row's own). */
static inline size_t pos_of(const if_model *m, size_t pos0, size_t r) {
    return m->bpos ? m->bpos[r] : pos0 + r;
}

/* Layer l's sliding window: 0 for global attention (if_config's swa_pattern). */
static inline size_t layer_window(const if_config *c, size_t l) {
    if (c->swa_pattern && (l + 1) % c->swa_pattern == 0) return 0;
    return c->sliding_window;
}

/* Matrix idx's packed copy (layer l's matrix i at l * N_MATS + i, the classifier last), or
 * NULL. */
static inline const int8_t *packed_of(const if_model *m, size_t idx) {
    return m->packed ? m->packed[idx] : NULL;
}
/* The classifier's index in that numbering. */
static inline size_t n_cls_of(const if_model *m) { return m->c.n_layers * N_MATS; }

/* ---- kv.c ---- */

/* The KV cache's shape for a config, prefill chunk ub and type: *cap the largest layer's slots
 * (each layer's: a plain array over the context, or a ring for a sliding window), *group the
 * int8 scale group (0 for float caches) and *el the bytes per element. */
void if_kv_geometry(const if_config *c, size_t ub, if_kv_type type, size_t *cap, size_t *group,
                    size_t *el);
/* Allocate m's KV caches of type `type` (m->n_seqs slots, the shape of if_kv_geometry) and
 * point m->kv's layer views into them; 0: out of memory (m->kv must be allocated; the
 * buffers already allocated are freed by if_model_free). */
int if_kv_alloc(if_model *m, if_kv_type type);

#endif
