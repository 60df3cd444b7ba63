/* model_internal.h - the model's run state and what the forward pass's translation units share
 * (internal; callers use isaforge.h):
 *   model.c    model creation and validation, weight packing, accessors, free
 *   kv.c       the KV cache: its shape per layer, its allocation, its rows
 *   matmul.c   a forward call's parallel steps: the matmuls through the kernels (the decode
 *              strategies, private mode) and the steps that make and quantize their inputs
 *   forward.c  the layer loop and the forward / prefill / batch entry points */
#ifndef ISAFORGE_MODEL_INTERNAL_H
#define ISAFORGE_MODEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "embed.h"
#include "isaforge.h"
#include "threadpool.h"

#define N_MATS IF_N_LAYER_MATRICES /* IF_LAYER_MATRICES, in its order */

/* How a decode step (M = 1) multiplies by a matrix, one strategy per weight type for the whole
 * model, chosen when the weights are packed (model.c). Prefill (M > 1) always runs the prefill
 * tier's GEMM, over the packed copy where there is one. Either way each output is computed with
 * the GEMV's arithmetic, so the strategy never changes a logit. */
typedef enum if_decode_strategy {
    /* The row-major weights through the decode tier's GEMV (4-bit: its 4-bit GEMV, the scalar
     * one when it has none). Every tier reads this layout, so this is the strategy whenever
     * decode cannot read a packed copy: the prefill GEMM has no packed layout, or decode runs
     * another tier than prefill (a packed layout belongs to one tier's GEMM). */
    IF_DECODE_GEMV = 0,
    /* The prefill GEMM's packed copy through the same tier's GEMM at M = 1, in tasks of nr-row
     * tiles. One resident copy of the weights: the row-major matrix is never read after it is
     * packed, so the caller may free it then (if_model_opts.on_packed), and each tile is one
     * contiguous stream. Q8 when the tier's GEMM decodes its own layout
     * (if_table_decodes_packed), 4-bit when its q4_gemm declares decode_packed; only when decode
     * and prefill run the same tier. */
    IF_DECODE_PACKED_GEMM,
} if_decode_strategy;

/* The copy of the in-place blocks into the weight arena, a slice per decode step (arena.c). */
typedef struct if_arena_copy if_arena_copy;

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
    if_decode_strategy q8_decode; /* how a decode step multiplies by the Q8 matrices */
    if_decode_strategy q4_decode; /* ... and by the 4-bit ones */
    void **ggml_owned; /* IF_GGML matrices converted at creation: (int8, scales) per matrix
                        * index, the int8 NULL where only the packed copy holds it */
    if_arena_copy *acopy; /* IF_KQ matrices being copied into packed_arena, or NULL */
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
    float *xs;     /* (ub, max(dim, hidden_dim)) their scales (K/gs used per row; K8 rows of
                    * an in-place K-quant matrix: K/256 scales) */
    int16_t *xsum; /* (ub, act_w / 16) K8 rows' sums of 16 (if_k8_quantize_fn's bsum) */
    /* a decode step's own activation row per thread (fw_priv): (n_threads, act_w) each: the
     * float row, its rotated copy, its int8 values and their scales */
    float *pf, *pxr, *pxs;
    int8_t *pxq;
    int16_t *pxsum; /* (n_threads, act_w / 16) each thread's K8 sums */
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

/* arena.c: if_arena_add queues matrix w's blocks for the copy to dst (0: out of memory);
 * if_arena_start says whether the sources are read-only file mappings whose pages may be
 * dropped once copied; if_arena_step copies the next slice (a decode step's start, the pool
 * idle) and moves each matrix completed to its copy; if_arena_wait copies the rest;
 * if_arena_pending counts the matrices not yet moved; if_arena_free frees the queue. */
int if_arena_add(if_model *m, if_matrix *w, uint8_t *dst);
void if_arena_start(if_model *m, int drop_src);
void if_arena_step(if_model *m);
void if_arena_wait(if_model *m);
size_t if_arena_pending(const if_model *m);
void if_arena_free(if_model *m);

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

/* ggml_intake.c: matrix idx, given as a GGUF tensor's bytes (IF_GGML), becomes Q8 at group
 * if_ggml_intake_group() in the model's memory (m->ggml_owned) and its descriptor IF_Q8:
 * row-major (decode reads it), or straight into the packed copy dst of the prefill GEMM k, whose
 * layout must be tile-major (decode_packed). Errors name the matrix. */
size_t if_ggml_intake_group(void);
if_status if_ggml_intake_rowmajor(if_model *m, size_t idx, char *err, size_t errlen);
if_status if_ggml_intake_packed(if_model *m, size_t idx, const if_q8_gemm_kernel *k,
                                int8_t *dst, char *err, size_t errlen);

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

/* ---- matmul.c: a forward call's walk ---- */

/* What the shared quantized activations (if_model.xq, xs) hold, as every walker tracks it: Q8
 * groups of the rows the last Q8 matmul read (reused when the next call passes quantize = 0),
 * or a 4-bit matrix's zero-padded, rotated groups for (signs, kpad, gs), reused by the next
 * 4-bit matrix that pads and rotates alike. */
typedef struct fw_xq {
    int q4; /* 0: Q8 groups, 1: a 4-bit matrix's, FW_XQ_K8: K8 rows of kpad values (the
             * in-place K-quant matrices' activations, with m->xsum) */
    const float *signs;
    size_t kpad, gs;
} fw_xq;
#define FW_XQ_K8 2

/* What makes a private row (fw_priv.make). */
typedef enum fw_make {
    PRIV_SRC,   /* nothing: the shared row src is complete */
    PRIV_NORM,  /* RMSNorm(a) with weight nw */
    PRIV_GATE,  /* gate(a, b): the SwiGLU / GeGLU kernel */
    PRIV_RESID, /* RMSNorm(a + (post ? RMSNorm_post(b) : b)) with weight nw */
} fw_make;

/* Private mode: a decode step's Q8 / 4-bit matmul input row is each thread's own. Every thread
 * that claims a chunk of the matmul first makes the whole row itself (`make`, from the shared
 * rows, with the arithmetic of the shared step it replaces), then quantizes it for the matrix
 * into its own xq / xs, so the step that made the row needs no barrier after it: a decode step
 * is a chain of small steps, and each barrier costs every thread a wait for the slowest. The
 * row is made only at a thread's first claimed chunk: the shared rows it reads are complete
 * then and not yet overwritten (no thread passes the matmul's barrier while one of its chunks
 * is unclaimed), and a thread that claims nothing reads nothing. */
typedef struct fw_priv {
    int on;                 /* the decode matmuls read this thread's row */
    fw_make make;           /* what still has to make the row (PRIV_SRC: nothing) */
    const float *a, *b, *nw, *post; /* its inputs (x; y or the gate's other half; norm weight;
                                     * post norm) */
    size_t n;               /* the row's length */
    float eps;
    const float *src;       /* the float row (f, or a complete shared row) */
    int q_dtype;            /* what xq holds: 0 nothing, else IF_Q8 / IF_Q4 of (q_signs, q_kp,
                             * q_gs), or IF_KQ: K8 of q_kp values (xs the scales, xsum) */
    const float *q_signs;
    size_t q_kp, q_gs;
    float *f, *xr, *xs;     /* this thread's rows of if_model.pf, pxr, pxs (act_w each) */
    int8_t *xq;             /* ... and of if_model.pxq */
    int16_t *xsum;          /* ... and of if_model.pxsum */
} fw_priv;

/* One thread's walk through a forward call (csrc/threadpool.h): its walker and its own copy of
 * what the quantized activations hold (every walker takes the same decisions, in the same
 * order, from the call's shape alone). */
typedef struct fw {
    if_model *m;
    if_walker *w;
    fw_xq xq;
    fw_priv priv;
} fw;

/* Chunks per thread of a matmul or attention step (a slow thread holds only one); elementwise
 * steps over one row take one chunk per thread, over rows a few. */
#define MM_CHUNKS 4
#define ROW_CHUNKS 4

/* Multiply-adds an element of an elementwise step is counted as, against par_min_work: below
 * it a step is one chunk, run by the first thread to arrive (splitting a decode step's norm
 * across threads saves well under a microsecond, and on a busy machine a preempted thread
 * holding its share of one would hold every other thread at the next barrier). */
#define ELEM_WORK 4

/* Chunks per thread of an elementwise step over `elems` values: `per` when there is enough
 * work (ELEM_WORK), else 0 (one chunk for the step). */
static inline size_t elem_chunks(const fw *f, size_t elems, size_t per) {
    return elems * ELEM_WORK >= f->m->par_min_work ? per : 0;
}

/* Claim the current step's chunks [a, b) one after another (never leave the loop early). */
#define CHUNKS(f, a, b) for (size_t a, b; if_step_next((f)->w, &a, &b);)

/* A matmul or attention step over n tasks, per_thread chunks per thread (does not wait).
 * rows: a decode matmul's output rows, for its thread budget (one thread per
 * gemv_rows_per_thread rows, at least one); 0: the team. Work below par_min_work runs as one
 * chunk, which any thread of the team may claim. */
void if_fw_tasks(fw *f, size_t n, size_t grain, if_task_fn fn, void *ctx, size_t work,
                 size_t rows, size_t per_thread);

/* out (M, ldo) = x (M, cols) W^T, as a step that does not wait (packed: w's packed copy, or
 * NULL). quantize = 1 (re)quantizes x first, 0 reuses the quantization of the same x from the
 * previous call (or from the if_fw_prep step that made it). */
void if_fw_matmul(fw *f, float *out, size_t ldo, const float *x, size_t M, const if_matrix *w,
                  const int8_t *packed, int quantize);

/* The input steps of if_fw_prep. */
enum { IF_PREP_NORM, IF_PREP_GATE, IF_PREP_RESID };
/* IF_PREP_RESID's other inputs: the residual branch y, its post norm (or NULL) and where the
 * new residual goes (NULL: not kept; may equal the step's output). */
typedef struct if_resid_in {
    const float *y, *post;
    float *xn;
} if_resid_in;

/* A step that makes a matmul's input o (M rows of n) and quantizes it for that matmul at once
 * (the matmul then runs with quantize = 0):
 *   IF_PREP_NORM   o = RMSNorm(x) with weight nw;
 *   IF_PREP_GATE   o = gate(o, x) (the SwiGLU / GeGLU kernel);
 *   IF_PREP_RESID  the residual add and the next norm: xn = x + (post ? RMSNorm_post(y) : y),
 *                  then o = RMSNorm(xn) with weight nw;
 * then o's rows quantized for w as the matmul would (nothing for f32 or w NULL). A decode
 * step's row for a Q8 or 4-bit w is left to private mode instead. Waits. */
void if_fw_prep(fw *f, int op, float *o, const float *x, const float *nw, size_t M, size_t n,
                float eps, const if_matrix *w, const if_resid_in *ri);

#endif
