/* matmul.c - a forward call's matmuls through the dispatched kernels, and the steps that make
 * and quantize their inputs.
 *
 * A matmul is one parallel step over output tiles (csrc/threadpool.h). Prefill (M > 1) runs
 * the prefill tier's GEMM over tiles of activation rows x output rows, reading the packed copy
 * of the weights where the GEMM has a layout. A decode step (M = 1) runs one of the decode
 * strategies (if_decode_strategy, model_internal.h) over output rows, and reads its input row
 * in one of two ways: shared (one quantization of the row in if_model.xq, made by a step
 * before the matmul and waited for) or private (fw_priv: each thread makes and quantizes the
 * row itself, so no barrier sits between the step that makes the row and the matmul). Which
 * kernel runs, and where its input comes from, never changes a result bit. */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model_internal.h"

/* Activation rows per GEMM task (rounded up to the kernel's mr): the rows that share each
 * weight tile while it is in cache (128: each tile's expansion or load amortized over twice
 * the rows of 64, measured faster on the K-quant GEMMs, AMX and AVX-512 VNNI). */
#define GEMM_M_ROWS 128

/* ---- steps ---- */

static void priv_ensure(fw *f, const if_matrix *w);

/* if_fw_tasks; prep not NULL: private mode, each claiming thread first makes its own input
 * row for matrix prep (priv_ensure) at its first chunk. A step only thread 0 could claim would
 * leave the region's other threads, already awake, waiting behind it, so a small step is one
 * chunk any thread may claim. */
static void run_tasks_prep(fw *f, size_t n, size_t grain, if_task_fn fn, void *ctx, size_t work,
                           size_t rows, size_t per_thread, const if_matrix *prep) {
    const if_model *m = f->m;
    size_t nt = 0; /* the whole team */
    if (rows && m->gemv_rows_per_thread)
        nt = rows / m->gemv_rows_per_thread > 1 ? rows / m->gemv_rows_per_thread : 1;
    if (work < m->par_min_work) per_thread = 0; /* one chunk */
    if_step(f->w, n, grain, nt, per_thread);
    CHUNKS(f, t0, t1) {
        if (prep) { /* private mode: this thread's input row, at its first chunk */
            priv_ensure(f, prep);
            prep = NULL;
        }
        fn(ctx, t0, t1, f->w->tid);
    }
}
void if_fw_tasks(fw *f, size_t n, size_t grain, if_task_fn fn, void *ctx, size_t work,
                 size_t rows, size_t per_thread) {
    run_tasks_prep(f, n, grain, fn, ctx, work, rows, per_thread, NULL);
}
static void run_tasks(fw *f, size_t n, size_t grain, if_task_fn fn, void *ctx, size_t work,
                      size_t rows) {
    run_tasks_prep(f, n, grain, fn, ctx, work, rows, MM_CHUNKS, NULL);
}

/* Begin an elementwise step: M > 1 rows a few chunks per thread, or one row's n elements in
 * chunks of whole grains, one per thread (either: one chunk when the work is small). A chunk
 * [a, b) is then rows [a, b) (all their elements) or row 0's elements [a, b): span() gives
 * both. */
static void step_rows(fw *f, size_t M, size_t n, size_t grain) {
    if (M > 1)
        if_step(f->w, M, 1, 0, elem_chunks(f, M * n, ROW_CHUNKS));
    else
        if_step(f->w, n, grain, 0, elem_chunks(f, n, 1));
}
typedef struct span {
    size_t r0, r1, i0, i1;
} span;
static span span_of(size_t M, size_t n, size_t a, size_t b) {
    span s = {a, b, 0, n};
    if (M == 1) s = (span){0, 1, a, b};
    return s;
}

/* ---- row arithmetic shared by the shared and the private steps ---- */

/* 1 / sqrt(mean(x^2) + eps) over n values, in if_rmsnorm's order. */
static float rms_scale(const float *x, size_t n, float eps) {
    float ss = 0.0f;
    for (size_t j = 0; j < n; j++) ss += x[j] * x[j];
    ss /= (float)n;
    ss += eps;
    return 1.0f / sqrtf(ss);
}

/* o[i0, i1) of RMSNorm(x) (n values): if_rmsnorm's arithmetic for those elements. Every
 * thread computes the whole sum of squares, so x must not be written during the step. */
static void rmsnorm_part(float *o, const float *x, const float *w, size_t n, float eps,
                         size_t i0, size_t i1) {
    const float ss = rms_scale(x, n, eps);
    for (size_t j = i0; j < i1; j++) o[j] = w[j] * (ss * x[j]);
}

/* One row's residual add and the next norm (IF_PREP_RESID): t = x + (post ? RMSNorm_post(y)
 * : y) over all n values (their sum of squares), then for j in [i0, i1): xn[j] = t (xn not
 * NULL) and o[j] = RMSNorm(t)[j] with weight nw (o not NULL). */
static void resid_row(float *o, float *xn, const float *xr, const float *yr, const float *post,
                      const float *nw, size_t n, float eps, size_t i0, size_t i1) {
    const float sy = post ? rms_scale(yr, n, eps) : 0.0f;
    float ss = 0.0f; /* rms_scale's sum over the new residual (only o needs it: a step that
                      * writes just xn skips this sequential chain of n adds) */
    if (o) {
        for (size_t j = 0; j < n; j++) {
            const float t = post ? xr[j] + post[j] * (sy * yr[j]) : xr[j] + yr[j];
            ss += t * t;
        }
        ss /= (float)n;
        ss += eps;
        ss = 1.0f / sqrtf(ss);
    }
    for (size_t j = i0; j < i1; j++) {
        const float t = post ? xr[j] + post[j] * (sy * yr[j]) : xr[j] + yr[j];
        if (xn) xn[j] = t;
        if (o) o[j] = nw[j] * (ss * t);
    }
}

/* ---- the kernels' tasks ---- */

typedef struct mm_job {
    const if_kernel_table *k;
    const if_matrix *w;
    const int8_t *wq; /* int8 weights as the kernel wants them (packed or row-major); 4-bit:
                       * the GEMM's packed nibbles, NULL for the row-major ones */
    float *out;
    size_t ldo, M, m_tile, n_tile, m_tiles;
    const float *x; /* fp32 input (M, cols) */
    const int8_t *xq;
    const float *xs;      /* Q8 / 4-bit group scales; K8 rows: the per-256 scales */
    const int16_t *xsum;  /* K8 rows' sums of 16 (in-place K-quant matrices), else NULL */
    /* the SME2 hybrid split (set by split_job): tid >= split runs gv2 / gm2; NULL: none */
    const if_q8_gemv_kernel *gv2;
    const if_q8_gemm_kernel *gm2;
    size_t split;
} mm_job;

/* Give a Q8 matmul's job the model's SME2 hybrid split (if any): it applies to the kernels
 * that read the row-major weights, the only ones the SME2 kernels and their non-streaming
 * partners share. */
static void split_job(const if_model *m, mm_job *j) {
    if (!m->sme2_workers || j->w->dtype != IF_Q8) return;
    j->split = m->sme2_workers;
    if (j->k->q8_gemv->requires & IF_FEAT_SME) j->gv2 = m->q8_gemv_alt;
    if ((j->k->q8_gemm->requires & IF_FEAT_SME) && !j->k->q8_gemm->pack) j->gm2 = m->q8_gemm_alt;
}

/* ---- in-place K-quant matrices (IF_KQ): the file's Q4_K / Q5_K / Q6_K blocks, never packed */

/* Table k's GEMV for w's K-quant type (the scalar kernel where a test table has none). */
static const if_kq_gemv_kernel *kq_gemv_of(const if_kernel_table *k, const if_matrix *w) {
    /* grouped by the arena, which checked that both tables have the pair */
    if (w->group_rows)
        return w->ggml_type == IF_GGML_Q4_K
                   ? (w->group_rows == 16 ? k->q4kx16_gemv : k->q4kx8_gemv)
               : w->ggml_type == IF_GGML_Q6_K
                   ? (w->group_rows == 16 ? k->q6kx16_gemv : k->q6kx8_gemv)
               : w->ggml_type == IF_GGML_Q4_0 ? k->q40x16_gemv
                                              : k->q80x16_gemv;
    if (w->ggml_type == IF_GGML_Q4_K) return k->q4k_gemv ? k->q4k_gemv : &if_k_q4k_gemv_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q5_K) return k->q5k_gemv ? k->q5k_gemv : &if_k_q5k_gemv_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q4_0) return k->q40_gemv ? k->q40_gemv : &if_k_q40_gemv_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q4_1) return k->q41_gemv ? k->q41_gemv : &if_k_q41_gemv_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q5_0) return k->q50_gemv ? k->q50_gemv : &if_k_q50_gemv_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q5_1) return k->q51_gemv ? k->q51_gemv : &if_k_q51_gemv_1x1_scalar;
    if (w->ggml_type == IF_GGML_IQ4_NL)
        return k->iq4nl_gemv ? k->iq4nl_gemv : &if_k_iq4nl_gemv_1x1_scalar;
    if (w->ggml_type == IF_GGML_IQ4_XS)
        return k->iq4xs_gemv ? k->iq4xs_gemv : &if_k_iq4xs_gemv_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q8_0) return k->q80_gemv ? k->q80_gemv : &if_k_q80_gemv_1x1_scalar;
    return k->q6k_gemv ? k->q6k_gemv : &if_k_q6k_gemv_1x1_scalar;
}
/* ... its GEMM. */
static const if_kq_gemm_kernel *kq_gemm_of(const if_kernel_table *k, const if_matrix *w) {
    if (w->group_rows)
        return w->ggml_type == IF_GGML_Q4_K
                   ? (w->group_rows == 16 ? k->q4kx16_gemm : k->q4kx8_gemm)
               : w->ggml_type == IF_GGML_Q6_K
                   ? (w->group_rows == 16 ? k->q6kx16_gemm : k->q6kx8_gemm)
               : w->ggml_type == IF_GGML_Q4_0 ? k->q40x16_gemm
                                              : k->q80x16_gemm;
    if (w->ggml_type == IF_GGML_Q4_K) return k->q4k_gemm ? k->q4k_gemm : &if_k_q4k_gemm_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q5_K) return k->q5k_gemm ? k->q5k_gemm : &if_k_q5k_gemm_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q4_0) return k->q40_gemm ? k->q40_gemm : &if_k_q40_gemm_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q4_1) return k->q41_gemm ? k->q41_gemm : &if_k_q41_gemm_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q5_0) return k->q50_gemm ? k->q50_gemm : &if_k_q50_gemm_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q5_1) return k->q51_gemm ? k->q51_gemm : &if_k_q51_gemm_1x1_scalar;
    if (w->ggml_type == IF_GGML_IQ4_NL)
        return k->iq4nl_gemm ? k->iq4nl_gemm : &if_k_iq4nl_gemm_1x1_scalar;
    if (w->ggml_type == IF_GGML_IQ4_XS)
        return k->iq4xs_gemm ? k->iq4xs_gemm : &if_k_iq4xs_gemm_1x1_scalar;
    if (w->ggml_type == IF_GGML_Q8_0) return k->q80_gemm ? k->q80_gemm : &if_k_q80_gemm_1x1_scalar;
    return k->q6k_gemm ? k->q6k_gemm : &if_k_q6k_gemm_1x1_scalar;
}
const char *if_model_kq_kernel(const if_model *m, size_t idx, int prefill) {
    if (idx > n_cls_of(m)) return NULL;
    const if_matrix *w = idx == n_cls_of(m) ? &m->w.wcls
                                            : if_layer_matrix(&m->layers[idx / N_MATS], idx % N_MATS);
    if (w->dtype != IF_KQ) return NULL;
    return prefill ? kq_gemm_of(m->gemm_k, w)->name : kq_gemv_of(m->gemv_k, w)->name;
}

/* The values per activation scale of w's kernels: 32 for the legacy blocks (L8), 256 (K8). */
static size_t kq_qb(const if_matrix *w) {
    const int t = w->ggml_type;
    if (t == IF_GGML_IQ4_NL) return IF_QL; /* IQ4_NL: L8 too */
    return t == IF_GGML_Q4_0 || t == IF_GGML_Q4_1 || t == IF_GGML_Q5_0 || t == IF_GGML_Q5_1 ||
                   t == IF_GGML_Q8_0
               ? IF_QL
               : IF_QK;
}
/* ... and the K8 activation quantizer both read. */
static const if_k8_quantize_kernel *k8_of(const if_kernel_table *k) {
    return k->k8_quantize ? k->k8_quantize : &if_k_k8_quantize_1x1_scalar;
}

/* K8 (qb = 256) or L8 (qb = 32: table k's Q8 quantizer at gs = 32, then the sums of 16) of
 * values [i0, i1) (whole qb-value blocks) of row r of x (rows of K) into the shared row r of
 * xq / xs / xsum: per block the same bits whichever chunk quantizes it. */
static void k8_rows_part(const if_model *m, const if_kernel_table *k, const float *x, size_t K,
                         size_t qb, size_t r, size_t i0, size_t i1) {
    int8_t *q = m->xq + r * K + i0;
    float *d = m->xs + r * (K / qb) + i0 / qb;
    int16_t *bs = m->xsum + r * (K / 16) + i0 / 16;
    if (qb == IF_QL) {
        k->quantize->run(q, d, x + i0, i1 - i0, IF_QL);
        if_k8_sums(bs, q, i1 - i0);
    } else {
        k8_of(k)->run(q, d, bs, x + i0, i1 - i0);
    }
}

/* Quantize x (M rows of w->cols) to the shared K8 rows for an in-place K-quant matrix unless
 * they hold them already (quantize 0 after a K8 quantization of the same x). A step of its
 * own, waited for (as quantize_shared's). */
static void quantize_k8_shared(fw *f, const float *x, size_t M, const if_matrix *w,
                               int quantize) {
    const if_model *m = f->m;
    const size_t K = w->cols, qb = kq_qb(w);
    if (!quantize && f->xq.q4 == FW_XQ_K8 && f->xq.kpad == K && f->xq.gs == qb) return;
    const if_kernel_table *k = M > 1 ? m->gemm_k : m->gemv_k;
    if_step_wait(f->w);
    step_rows(f, M, K, qb);
    CHUNKS(f, a, b) {
        span s = span_of(M, K, a, b);
        for (size_t r = s.r0; r < s.r1; r++) k8_rows_part(m, k, x + r * K, K, qb, r, s.i0, s.i1);
    }
    if_step_wait(f->w);
    f->xq = (fw_xq){FW_XQ_K8, NULL, K, qb};
}

/* IF_DECODE_GEMV: output rows [n0, n1) of one row-major matrix. */
static void gemv_task(void *ctx, size_t n0, size_t n1, size_t tid) {
    const mm_job *j = ctx;
    const if_matrix *w = j->w;
    if (w->dtype == IF_KQ)
        kq_gemv_of(j->k, w)->run(j->out, j->xq, j->xs, j->xsum, w->raw, n0, n1, w->cols);
    else if (w->dtype == IF_Q4)
        (j->k->q4_gemv ? j->k->q4_gemv : &if_k_q4_gemv_1x1_scalar)
            ->run(j->out, j->xq, j->xs, w->q4, w->s, w->codebook, n0, n1, w->kpad, w->group_size);
    else if (w->dtype == IF_F32)
        j->k->f32_gemv->run(j->out, j->x, w->f32, n0, n1, w->cols);
    else
        (j->gv2 && tid >= j->split ? j->gv2 : j->k->q8_gemv)
            ->run(j->out, j->xq, j->xs, w->q, w->s, n0, n1, w->cols, w->group_size);
}

/* IF_DECODE_PACKED_GEMM: tasks [t0, t1) are nr-row tiles of the packed copy, each one
 * contiguous stream, through the GEMM at M = 1. */
static void packed_decode_task(void *ctx, size_t t0, size_t t1, size_t tid) {
    (void)tid;
    const mm_job *j = ctx;
    const if_matrix *w = j->w;
    const size_t gs = w->group_size;
    if (w->dtype == IF_Q4) {
        const if_q4_gemm_kernel *g = j->k->q4_gemm;
        const size_t n1 = t1 * g->nr < w->rows ? t1 * g->nr : w->rows;
        g->run(j->out, j->ldo, j->xq, j->xs, 1, (const uint8_t *)j->wq, w->s, w->codebook,
               t0 * g->nr, n1, w->kpad, gs);
        return;
    }
    const size_t nr = j->k->q8_gemm->nr;
    const size_t n1 = t1 * nr < w->rows ? t1 * nr : w->rows;
    j->k->q8_gemm->run(j->out, j->ldo, j->xq, j->xs, 1, j->wq, w->s, t0 * nr, n1, w->cols, gs);
}

/* Prefill: task t covers activation-row tile t % m_tiles and output-row tile t / m_tiles, so a
 * thread's contiguous range of tasks walks few weight tiles (each reused across the activation
 * tiles). */
static void gemm_task(void *ctx, size_t t0, size_t t1, size_t tid) {
    const mm_job *j = ctx;
    const if_matrix *w = j->w;
    const size_t K = w->cols, gs = w->group_size;
    for (size_t t = t0; t < t1; t++) {
        size_t m0 = (t % j->m_tiles) * j->m_tile, n0 = (t / j->m_tiles) * j->n_tile;
        size_t mm = j->M - m0 < j->m_tile ? j->M - m0 : j->m_tile;
        size_t n1 = n0 + j->n_tile < w->rows ? n0 + j->n_tile : w->rows;
        float *out = j->out + m0 * j->ldo;
        if (w->dtype == IF_KQ) {
            kq_gemm_of(j->k, w)->run(out, j->ldo, j->xq + m0 * K, j->xs + m0 * (K / kq_qb(w)),
                                     j->xsum + m0 * (K / 16), mm, w->raw, n0, n1, K);
        } else if (w->dtype == IF_Q4) {
            const size_t kp = w->kpad;
            (j->k->q4_gemm ? j->k->q4_gemm : &if_k_q4_gemm_1x1_scalar)
                ->run(out, j->ldo, j->xq + m0 * kp, j->xs + m0 * (kp / gs), mm,
                      j->wq ? (const uint8_t *)j->wq : w->q4, w->s, w->codebook, n0, n1, kp, gs);
        } else if (w->dtype == IF_F32) {
            for (size_t m = 0; m < mm; m++)
                j->k->f32_gemv->run(out + m * j->ldo, j->x + (m0 + m) * K, w->f32, n0, n1, K);
        } else {
            (j->gm2 && tid >= j->split ? j->gm2 : j->k->q8_gemm)
                ->run(out, j->ldo, j->xq + m0 * K, j->xs + m0 * (K / gs), mm, j->wq, w->s, n0,
                      n1, K, gs);
        }
    }
}

/* Output tiles of a GEMM step: GEMM_M_ROWS activation rows (a multiple of the kernel's mr) x a
 * multiple of its nr output rows (a packed layout's tiles start at multiples of nr); wide
 * output tiles keep a thread on contiguous weight rows, at least 4 tasks per thread. */
static void gemm_tiles(const fw *f, size_t M, size_t rows, size_t mr, size_t nr, size_t *mt,
                       size_t *nt, size_t *m_tiles, size_t *n_tiles) {
    *mt = (GEMM_M_ROWS + mr - 1) / mr * mr;
    *nt = nr;
    size_t tiles = (rows + nr - 1) / nr;
    size_t want = 4 * f->w->team, group = tiles / want > 1 ? tiles / want : 1;
    if (group > 8) group = 8;
    *nt *= group;
    *m_tiles = (M + *mt - 1) / *mt;
    *n_tiles = (rows + *nt - 1) / *nt;
}

/* ---- private mode (fw_priv) ---- */

/* Enter private mode: the next matmuls' input row is made by `make` from (a, b, nw, post), or
 * is the complete shared row src (PRIV_SRC). */
static void priv_set(fw *f, fw_make make, const float *src, const float *a, const float *b,
                     const float *nw, const float *post, size_t n, float eps) {
    fw_priv *p = &f->priv;
    p->on = 1;
    p->make = make;
    p->src = make == PRIV_SRC ? src : p->f;
    p->a = a;
    p->b = b;
    p->nw = nw;
    p->post = post;
    p->n = n;
    p->eps = eps;
    p->q_dtype = 0;
}

/* Make this walker's input row (if still to be made) and its quantization for w (unless xq
 * already holds it), with the arithmetic of the shared steps (whole rows: each quantization
 * group, and each rotation group, is computed the same way whatever the chunk). */
static void priv_ensure(fw *f, const if_matrix *w) {
    const if_model *m = f->m;
    const if_kernel_table *k = m->gemv_k;
    fw_priv *p = &f->priv;
    if (p->make != PRIV_SRC) {
        const size_t n = p->n;
        if (p->make == PRIV_NORM) {
            rmsnorm_part(p->f, p->a, p->nw, n, p->eps, 0, n);
        } else if (p->make == PRIV_GATE) {
            memcpy(p->f, p->a, n * sizeof(float));
            (m->c.act ? k->geglu->run : k->swiglu->run)(p->f, p->b, n);
        } else {
            resid_row(p->f, NULL, p->a, p->b, p->post, p->nw, n, p->eps, 0, n);
        }
        p->make = PRIV_SRC;
    }
    const size_t gs = w->dtype == IF_KQ ? kq_qb(w) : w->group_size;
    if (w->dtype == IF_Q8) {
        if (p->q_dtype == IF_Q8 && p->q_kp == w->cols && p->q_gs == gs) return;
        k->quantize->run(p->xq, p->xs, p->src, w->cols, gs);
        p->q_signs = NULL;
        p->q_kp = w->cols;
    } else if (w->dtype == IF_Q4) {
        if (p->q_dtype == IF_Q4 && p->q_signs == w->signs && p->q_kp == w->kpad && p->q_gs == gs)
            return;
        const if_hadamard_kernel *h = k->hadamard ? k->hadamard : &if_k_f32_hadamard_1x1_scalar;
        h->run(p->xr, p->src, w->signs, w->cols, w->kpad, gs);
        k->quantize->run(p->xq, p->xs, p->xr, w->kpad, gs);
        p->q_signs = w->signs;
        p->q_kp = w->kpad;
    } else if (w->dtype == IF_KQ) {
        if (p->q_dtype == IF_KQ && p->q_kp == w->cols && p->q_gs == gs) return;
        if (gs == IF_QL) {
            k->quantize->run(p->xq, p->xs, p->src, w->cols, IF_QL);
            if_k8_sums(p->xsum, p->xq, w->cols);
        } else {
            k8_of(k)->run(p->xq, p->xs, p->xsum, p->src, w->cols);
        }
        p->q_signs = NULL;
        p->q_kp = w->cols;
    } else {
        return;
    }
    p->q_dtype = (int)w->dtype;
    p->q_gs = gs;
}

/* ---- matmuls ---- */

/* The decode strategy for matrix w with packed copy `packed` (or NULL). */
static if_decode_strategy decode_strategy(const if_model *m, const if_matrix *w,
                                          const int8_t *packed) {
    if (!packed) return IF_DECODE_GEMV;
    if (w->dtype == IF_Q8) return m->q8_decode;
    if (w->dtype == IF_Q4) return m->q4_decode;
    return IF_DECODE_GEMV;
}

/* A decode matmul (does not wait): out (1, ldo) = x W^T by w's decode strategy, reading the
 * input row x and its quantization (xq, xs) for w. prep: in private mode, the matrix each
 * claiming thread first makes its own (x, xq, xs) for; NULL: the shared rows, complete. */
static void decode_matmul(fw *f, float *out, size_t ldo, const if_matrix *w,
                          const int8_t *packed, const float *x, const int8_t *xq,
                          const float *xs, const int16_t *xsum, const if_matrix *prep) {
    if_model *m = f->m;
    const if_kernel_table *k = m->gemv_k;
    const size_t rows = w->rows;
    const size_t work = w->dtype == IF_Q4 ? rows * w->kpad / 2 : rows * w->cols;
    mm_job j = {.k = k, .w = w, .out = out, .ldo = ldo, .M = 1, .m_tile = 1, .n_tile = 1,
                .m_tiles = 1, .x = x, .xq = xq, .xs = xs, .xsum = xsum};
    if (w->dtype == IF_KQ) { /* in place: output rows in the kernel's tiles */
        run_tasks_prep(f, rows, kq_gemv_of(k, w)->nr, gemv_task, &j, work / 2, rows, MM_CHUNKS,
                       prep);
        return;
    }
    if (decode_strategy(m, w, packed) == IF_DECODE_PACKED_GEMM) {
        const size_t nr = w->dtype == IF_Q4 ? k->q4_gemm->nr : k->q8_gemm->nr;
        j.wq = packed;
        j.n_tile = nr;
        run_tasks_prep(f, (rows + nr - 1) / nr, 1, packed_decode_task, &j, work, rows,
                       MM_CHUNKS, prep);
        return;
    }
    j.wq = w->dtype == IF_Q4 ? NULL : w->q;
    split_job(m, &j);
    run_tasks_prep(f, rows, w->dtype == IF_Q4 ? 8 : 4, gemv_task, &j, work, rows, MM_CHUNKS,
                   prep);
}

/* A prefill matmul (does not wait): out (M, ldo) = x W^T through the prefill tier's GEMM over
 * the shared quantized rows (fp32: its fp32 GEMV row by row, in the GEMM's tiles). */
static void gemm_matmul(fw *f, float *out, size_t ldo, const float *x, size_t M,
                        const if_matrix *w, const int8_t *packed) {
    if_model *m = f->m;
    const if_kernel_table *k = m->gemm_k;
    size_t mt, nt, m_tiles, n_tiles;
    mm_job j = {.k = k, .w = w, .out = out, .ldo = ldo, .M = M, .x = x, .xq = m->xq,
                .xs = m->xs, .xsum = m->xsum};
    size_t work;
    if (w->dtype == IF_KQ) {
        const if_kq_gemm_kernel *g = kq_gemm_of(k, w);
        gemm_tiles(f, M, w->rows, g->mr, g->nr, &mt, &nt, &m_tiles, &n_tiles);
        work = M * w->rows * w->cols;
    } else if (w->dtype == IF_Q4) {
        const size_t mr = k->q4_gemm ? k->q4_gemm->mr : 1, nr = k->q4_gemm ? k->q4_gemm->nr : 1;
        gemm_tiles(f, M, w->rows, mr, nr, &mt, &nt, &m_tiles, &n_tiles);
        j.wq = packed;
        work = M * w->rows * w->kpad;
    } else {
        gemm_tiles(f, M, w->rows, k->q8_gemm->mr, k->q8_gemm->nr, &mt, &nt, &m_tiles, &n_tiles);
        j.wq = packed ? packed : w->q;
        if (!packed) split_job(m, &j);
        work = M * w->rows * w->cols;
    }
    j.m_tile = mt;
    j.n_tile = nt;
    j.m_tiles = m_tiles;
    run_tasks(f, n_tiles * m_tiles, 1, gemm_task, &j, work, 0);
}

/* Quantize x (M rows) into the shared m->xq for w unless it already holds them: Q8 groups when
 * quantize is 1 or xq holds a 4-bit matrix's rows; for a 4-bit matrix, rows zero-padded to
 * kpad and rotated (when the matrix has signs) by the tier's Hadamard kernel, then quantized
 * per group, unless xq holds the same x padded and rotated alike (quantize 0). One row is
 * rotated and quantized by whole groups (each group by one thread), rows by rows. A step of
 * its own, after waiting for the steps that may still read xq, and waited for. */
static void quantize_shared(fw *f, const float *x, size_t M, const if_matrix *w, int quantize) {
    if_model *m = f->m;
    const if_kernel_table *k = M > 1 ? m->gemm_k : m->gemv_k;
    const size_t K = w->cols, gs = w->group_size;
    if (w->dtype == IF_KQ) {
        quantize_k8_shared(f, x, M, w, quantize);
        return;
    }
    if (w->dtype == IF_Q4) {
        const size_t kp = w->kpad;
        if (!quantize && f->xq.q4 == 1 && f->xq.signs == w->signs && f->xq.kpad == kp &&
            f->xq.gs == gs)
            return;
        const if_hadamard_kernel *h = k->hadamard ? k->hadamard : &if_k_f32_hadamard_1x1_scalar;
        if_step_wait(f->w);
        step_rows(f, M, kp, gs);
        CHUNKS(f, a, b) {
            span s = span_of(M, kp, a, b);
            for (size_t r = s.r0; r < s.r1; r++) {
                const size_t i0 = s.i0, i1 = s.i1;
                const size_t kin = i0 >= K ? 0 : (i1 < K ? i1 : K) - i0; /* real columns */
                float *xr = m->xr + r * kp + i0;
                h->run(xr, kin ? x + r * K + i0 : xr, w->signs ? w->signs + i0 : NULL, kin,
                       i1 - i0, gs);
                k->quantize->run(m->xq + r * kp + i0, m->xs + r * (kp / gs) + i0 / gs, xr,
                                 i1 - i0, gs);
            }
        }
        if_step_wait(f->w);
        f->xq = (fw_xq){1, w->signs, kp, gs};
        return;
    }
    if (w->dtype != IF_Q8) return;
    if (f->xq.q4) { /* xq holds a 4-bit matrix's or K8 rows: quantize again */
        quantize = 1;
        f->xq.q4 = 0;
    }
    if (!quantize) return;
    if_step_wait(f->w); /* by rows, or one row by whole groups */
    step_rows(f, M, K, gs);
    CHUNKS(f, a, b) {
        span s = span_of(M, K, a, b);
        for (size_t r = s.r0; r < s.r1; r++)
            k->quantize->run(m->xq + r * K + s.i0, m->xs + r * (K / gs) + s.i0 / gs,
                             x + r * K + s.i0, s.i1 - s.i0, gs);
    }
    if_step_wait(f->w);
}

void if_fw_matmul(fw *f, float *out, size_t ldo, const float *x, size_t M, const if_matrix *w,
                  const int8_t *packed, int quantize) {
    if (M == 1 && quantize) { /* a decode step's new row: private mode, no barrier after */
        if_step_wait(f->w);   /* x complete */
        if (w->dtype == IF_F32)
            f->priv.on = 0;
        else
            priv_set(f, PRIV_SRC, x, NULL, NULL, NULL, NULL, w->cols, 0.0f);
    }
    if (M == 1 && f->priv.on) {
        decode_matmul(f, out, ldo, w, packed, f->priv.src, f->priv.xq, f->priv.xs,
                      f->priv.xsum, w);
        return;
    }
    quantize_shared(f, x, M, w, quantize);
    if (M == 1)
        decode_matmul(f, out, ldo, w, packed, x, f->m->xq, f->m->xs, f->m->xsum, NULL);
    else
        gemm_matmul(f, out, ldo, x, M, w, packed);
}

/* ---- the steps that make a matmul's input ---- */

void if_fw_prep(fw *f, int op, float *o, const float *x, const float *nw, size_t M, size_t n,
                float eps, const if_matrix *w, const if_resid_in *ri) {
    if_model *m = f->m;
    const if_kernel_table *k = M > 1 ? m->gemm_k : m->gemv_k;
    const if_swiglu_fn glu = m->c.act ? k->geglu->run : k->swiglu->run;
    const int q4 = w && w->dtype == IF_Q4, q8 = w && w->dtype == IF_Q8;
    const int kq = w && w->dtype == IF_KQ; /* K8 rows, per 256, or L8, per 32 */
    const size_t gs = !w ? 0 : kq ? kq_qb(w) : w->group_size;
    const size_t kp = q4 ? w->kpad : n; /* quantized row length */
    const if_hadamard_kernel *h = k->hadamard ? k->hadamard : &if_k_f32_hadamard_1x1_scalar;
    if_step_wait(f->w); /* xq may still be read by a matmul step */
    if (M == 1 && (q4 || q8 || kq)) { /* a decode step: private mode, no barrier after */
        if (op == IF_PREP_RESID && ri->xn) { /* the new residual, shared (read after later
                                              * barriers) */
            step_rows(f, 1, n, 16);
            CHUNKS(f, a, b) resid_row(NULL, ri->xn, x, ri->y, ri->post, nw, n, eps, a, b);
        }
        if (op == IF_PREP_GATE)
            priv_set(f, PRIV_GATE, NULL, o, x, NULL, NULL, n, eps);
        else
            priv_set(f, op == IF_PREP_NORM ? PRIV_NORM : PRIV_RESID, NULL, x, ri ? ri->y : NULL,
                     nw, ri ? ri->post : NULL, n, eps);
        return;
    }
    step_rows(f, M, kp, q4 || q8 || kq ? gs : 16);
    CHUNKS(f, a, b) {
        span s = span_of(M, kp, a, b);
        const size_t e1 = s.i1 < n ? s.i1 : n; /* real elements of the chunk */
        for (size_t r = s.r0; r < s.r1; r++) {
            float *orow = o + r * n;
            const float *xr = x + r * n;
            if (s.i0 < e1 && op == IF_PREP_NORM) {
                rmsnorm_part(orow, xr, nw, n, eps, s.i0, e1);
            } else if (s.i0 < e1 && op == IF_PREP_GATE) {
                glu(orow + s.i0, xr + s.i0, e1 - s.i0);
            } else if (s.i0 < e1) {
                resid_row(orow, ri->xn ? ri->xn + r * n : NULL, xr, ri->y + r * n, ri->post, nw,
                          n, eps, s.i0, e1);
            }
            if (kq) {
                k8_rows_part(m, k, orow, n, gs, r, s.i0, s.i1);
            } else if (q8) {
                k->quantize->run(m->xq + r * n + s.i0, m->xs + r * (n / gs) + s.i0 / gs,
                                 orow + s.i0, s.i1 - s.i0, gs);
            } else if (q4) {
                const size_t kin = s.i0 < e1 ? e1 - s.i0 : 0;
                float *xr4 = m->xr + r * kp + s.i0;
                h->run(xr4, kin ? orow + s.i0 : xr4, w->signs ? w->signs + s.i0 : NULL, kin,
                       s.i1 - s.i0, gs);
                k->quantize->run(m->xq + r * kp + s.i0, m->xs + r * (kp / gs) + s.i0 / gs, xr4,
                                 s.i1 - s.i0, gs);
            }
        }
    }
    if_step_wait(f->w);
    f->priv.on = 0;
    if (!w) return;
    f->xq.q4 = kq ? FW_XQ_K8 : q4;
    if (kq) {
        f->xq.kpad = n;
        f->xq.gs = gs;
    }
    if (q4) {
        f->xq.signs = w->signs;
        f->xq.kpad = kp;
        f->xq.gs = gs;
    }
}
