/* forward.c - the Llama forward pass: decode step and chunked prefill.
 *
 * Written in llama2.c run.c's order (Q8 models: runq.c's, activations quantized per group
 * before each matmul). Matmuls go through the dispatched kernels: GEMV for a decode step,
 * GEMM over a chunk of prompt rows for prefill. Attention is one kernel for both: a chunk's
 * K/V rows go into the cache first, then query tiles x key blocks with an online softmax
 * (a decode step is a chunk of one row). Every output element is computed with the same
 * arithmetic either way, so prefill logits equal token-by-token logits bit for bit, whatever
 * the chunk size. Everything else is shared plain C; nothing is allocated per token.
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

/* Activation rows per GEMM task (rounded up to the kernel's mr): the rows that share each
 * weight tile while it is in cache. */
#define GEMM_M_ROWS 64

/* Chunks per thread of a matmul or attention step (a slow thread holds only one); elementwise
 * steps over one row take one chunk per thread, over rows a few. */
#define MM_CHUNKS 4
#define ROW_CHUNKS 4

/* One thread's walk through a forward call (csrc/threadpool.h): its walker and its own copy
 * of what the quantized activations hold (every walker takes the same decisions, in the same
 * order, from the call's shape alone). */
typedef struct fw {
    if_model *m;
    if_walker *w;
    /* what xq holds: 0 Q8 groups of x, 1 a 4-bit matrix's (q4_signs, q4_kpad, q4_gs) */
    int xq_q4;
    const float *q4_signs;
    size_t q4_kpad, q4_gs;
    /* Private mode (a decode step's Q8 / 4-bit matmul inputs, see priv_begin): the matmul's
     * input row is this walker's own. Every thread that claims a chunk of the matmul first
     * makes the whole row itself (pend: from the shared rows, the same arithmetic as the
     * shared step it replaces), then quantizes it for the matrix into its own pxq / pxs, so
     * the step that made the row needs no barrier after it. Made only at a thread's first
     * claimed chunk: the shared rows it reads are complete then and not yet overwritten (no
     * thread passes the matmul's barrier while one of its chunks is unclaimed), and a thread
     * that claims nothing reads nothing. */
    int priv;
    int pend;              /* P_NONE, or what makes pf: P_NORM, P_GATE, P_RESID */
    const float *pa, *pb, *pw, *ppost; /* its inputs (x, y or gate, norm weight, post norm) */
    size_t pn;             /* the row's length */
    float peps;
    const float *psrc;     /* the float row (pf, or a complete shared row) */
    int pq_dtype;          /* what pxq holds: 0 nothing, else IF_Q8 / IF_Q4 of (signs, kp, gs) */
    const float *pq_signs;
    size_t pq_kp, pq_gs;
    float *pf, *pxr, *pxs;
    int8_t *pxq;
} fw;

enum { P_NONE, P_NORM, P_GATE, P_RESID };

/* Claim the current step's chunks [a, b) one after another (never leave the loop early). */
#define CHUNKS(f, a, b) for (size_t a, b; if_step_next((f)->w, &a, &b);)

/* A matmul or attention step over n tasks. rows: a decode matmul's output rows, for its
 * thread budget (one thread per gemv_rows_per_thread rows, at least one); 0: the team.
 * Work below par_min_work runs as one chunk, which any thread of the team may claim: the
 * region's threads are awake, and a step only thread 0 could claim left the others waiting
 * behind it (SmolLM2's k and v projections, 192 x 576 each, ran on thread 0 alone while
 * thread 1 finished wq and waited: 13 us per layer, 0.4 ms of a 2-thread decode step).
 * Does not wait. */
static void priv_ensure(fw *f, const if_matrix *w);

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
static void run_tasks_per(fw *f, size_t n, size_t grain, if_task_fn fn, void *ctx, size_t work,
                          size_t rows, size_t per_thread) {
    run_tasks_prep(f, n, grain, fn, ctx, work, rows, per_thread, NULL);
}
static void run_tasks(fw *f, size_t n, size_t grain, if_task_fn fn, void *ctx, size_t work,
                      size_t rows) {
    run_tasks_per(f, n, grain, fn, ctx, work, rows, MM_CHUNKS);
}

/* Multiply-adds an element of an elementwise step is counted as, against par_min_work: below
 * it a step is one chunk, run by the first thread to arrive (a decode step's 576-value norm
 * split across threads saves well under a microsecond, and on a busy machine a preempted
 * thread holding its share of one would hold every other thread at the next barrier). */
#define ELEM_WORK 4

/* Chunks per thread of an elementwise step over `elems` values: `per` when there is enough
 * work (ELEM_WORK), else 0 (one chunk for the step). */
static size_t elem_chunks(const fw *f, size_t elems, size_t per) {
    return elems * ELEM_WORK >= f->m->par_min_work ? per : 0;
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

/* ---- matmuls through the kernels, parallel over output tiles ---- */

typedef struct mm_job {
    const if_kernel_table *k;
    const if_matrix *w;
    const int8_t *wq; /* int8 weights as the kernel wants them (packed or row-major); 4-bit:
                       * the GEMM's packed nibbles, NULL for the row-major ones */
    float *out;
    size_t ldo, M, m_tile, n_tile, m_tiles;
    const float *x; /* fp32 input (M, cols) */
    const int8_t *xq;
    const float *xs;
    /* the SME2 hybrid split (set by split_job): tid >= split runs gv2 / gm2; NULL: none */
    const if_q8_gemv_kernel *gv2;
    const if_q8_gemm_kernel *gm2;
    size_t split;
} mm_job;

/* Give a Q8 matmul's job the model's SME2 hybrid split (if any). */
static void split_job(const if_model *m, mm_job *j) {
    if (!m->sme2_workers || j->w->dtype != IF_Q8) return;
    j->split = m->sme2_workers;
    if (j->k->q8_gemv->requires & IF_FEAT_SME) j->gv2 = m->q8_gemv_alt;
    if ((j->k->q8_gemm->requires & IF_FEAT_SME) && !j->k->q8_gemm->pack) j->gm2 = m->q8_gemm_alt;
}

static void gemv_task(void *ctx, size_t n0, size_t n1, size_t tid) {
    const mm_job *j = ctx;
    const if_matrix *w = j->w;
    if (w->dtype == IF_Q4)
        (j->k->q4_gemv ? j->k->q4_gemv : &if_k_q4_gemv_1x1_scalar)
            ->run(j->out, j->xq, j->xs, w->q4, w->s, w->codebook, n0, n1, w->kpad, w->group_size);
    else if (w->dtype == IF_F32)
        j->k->f32_gemv->run(j->out, j->x, w->f32, n0, n1, w->cols);
    else
        (j->gv2 && tid >= j->split ? j->gv2 : j->k->q8_gemv)
            ->run(j->out, j->xq, j->xs, w->q, w->s, n0, n1, w->cols, w->group_size);
}

/* Task t covers activation-row tile t % m_tiles and output-row tile t / m_tiles, so a thread's
 * contiguous range of tasks walks few weight tiles (each reused across the activation tiles). */
static void gemm_task(void *ctx, size_t t0, size_t t1, size_t tid) {
    const mm_job *j = ctx;
    const if_matrix *w = j->w;
    const size_t K = w->cols, gs = w->group_size;
    if (w->dtype == IF_Q4 && j->M == 1 && j->wq) { /* 4-bit decode, packed copy: nr-row tiles */
        const if_q4_gemm_kernel *g = j->k->q4_gemm;
        const size_t n1 = t1 * g->nr < w->rows ? t1 * g->nr : w->rows;
        g->run(j->out, j->ldo, j->xq, j->xs, 1, (const uint8_t *)j->wq, w->s, w->codebook,
               t0 * g->nr, n1, w->kpad, gs);
        return;
    }
    if (j->M == 1 && j->wq != w->q) { /* decode over the packed layout: tasks are nr-row tiles */
        const size_t nr = j->k->q8_gemm->nr;
        const size_t n1 = t1 * nr < w->rows ? t1 * nr : w->rows;
        j->k->q8_gemm->run(j->out, j->ldo, j->xq, j->xs, 1, j->wq, w->s, t0 * nr, n1, K, gs);
        return;
    }
    for (size_t t = t0; t < t1; t++) {
        size_t m0 = (t % j->m_tiles) * j->m_tile, n0 = (t / j->m_tiles) * j->n_tile;
        size_t mm = j->M - m0 < j->m_tile ? j->M - m0 : j->m_tile;
        size_t n1 = n0 + j->n_tile < w->rows ? n0 + j->n_tile : w->rows;
        float *out = j->out + m0 * j->ldo;
        if (w->dtype == IF_Q4) {
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

/* One row's residual add and the next norm (prep_step's RESID): t = x + (post ? RMSNorm_post(y)
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

/* Enter private mode (fw): the next matmuls' input row is made by pend from (a, b, nw, post),
 * or is the complete shared row src (pend P_NONE). */
static void priv_set(fw *f, int pend, const float *src, const float *a, const float *b,
                     const float *nw, const float *post, size_t n, float eps) {
    f->priv = 1;
    f->pend = pend;
    f->psrc = pend == P_NONE ? src : f->pf;
    f->pa = a;
    f->pb = b;
    f->pw = nw;
    f->ppost = post;
    f->pn = n;
    f->peps = eps;
    f->pq_dtype = 0;
}

/* Private mode: make this walker's input row (if pending) and its quantization for w (unless
 * pxq already holds it), with the arithmetic of the shared steps (whole rows: each
 * quantization group, and each rotation group, is computed the same way whatever the chunk). */
static void priv_ensure(fw *f, const if_matrix *w) {
    const if_model *m = f->m;
    const if_kernel_table *k = m->gemv_k;
    if (f->pend != P_NONE) {
        const size_t n = f->pn;
        if (f->pend == P_NORM) {
            rmsnorm_part(f->pf, f->pa, f->pw, n, f->peps, 0, n);
        } else if (f->pend == P_GATE) {
            memcpy(f->pf, f->pa, n * sizeof(float));
            (m->c.act ? k->geglu->run : k->swiglu->run)(f->pf, f->pb, n);
        } else {
            resid_row(f->pf, NULL, f->pa, f->pb, f->ppost, f->pw, n, f->peps, 0, n);
        }
        f->pend = P_NONE;
    }
    const size_t gs = w->group_size;
    if (w->dtype == IF_Q8) {
        if (f->pq_dtype == IF_Q8 && f->pq_kp == w->cols && f->pq_gs == gs) return;
        k->quantize->run(f->pxq, f->pxs, f->psrc, w->cols, gs);
        f->pq_signs = NULL;
        f->pq_kp = w->cols;
    } else if (w->dtype == IF_Q4) {
        if (f->pq_dtype == IF_Q4 && f->pq_signs == w->signs && f->pq_kp == w->kpad &&
            f->pq_gs == gs)
            return;
        const if_hadamard_kernel *h = k->hadamard ? k->hadamard : &if_k_f32_hadamard_1x1_scalar;
        h->run(f->pxr, f->psrc, w->signs, w->cols, w->kpad, gs);
        k->quantize->run(f->pxq, f->pxs, f->pxr, w->kpad, gs);
        f->pq_signs = w->signs;
        f->pq_kp = w->kpad;
    } else {
        return;
    }
    f->pq_dtype = (int)w->dtype;
    f->pq_gs = gs;
}

/* A decode matmul in private mode (does not wait): the kernels of matmul's M = 1 paths, each
 * claiming thread reading its own input row. */
static void matmul_priv(fw *f, float *out, size_t ldo, const if_matrix *w,
                        const int8_t *packed) {
    if_model *m = f->m;
    const if_kernel_table *k = m->gemv_k;
    const size_t rows = w->rows;
    mm_job j = {k, w, w->q, out, ldo, 1, 1, 1, 1, f->psrc, f->pxq, f->pxs};
    if (w->dtype == IF_Q4 && packed && m->q4_decode_packed) { /* see matmul_q4 */
        const size_t nr = k->q4_gemm->nr;
        j.wq = packed;
        j.n_tile = nr;
        run_tasks_prep(f, (rows + nr - 1) / nr, 1, gemm_task, &j, rows * w->kpad / 2, rows,
                       MM_CHUNKS, w);
        return;
    }
    if (w->dtype == IF_Q4) {
        j.wq = NULL;
        run_tasks_prep(f, rows, 8, gemv_task, &j, rows * w->kpad / 2, rows, MM_CHUNKS, w);
        return;
    }
    if (w->dtype == IF_Q8 && packed && m->decode_packed) { /* see matmul */
        const size_t nr = k->q8_gemm->nr;
        j.wq = packed;
        j.n_tile = nr;
        run_tasks_prep(f, (rows + nr - 1) / nr, 1, gemm_task, &j, rows * w->cols, rows,
                       MM_CHUNKS, w);
        return;
    }
    split_job(m, &j);
    run_tasks_prep(f, rows, 4, gemv_task, &j, rows * w->cols, rows, MM_CHUNKS, w);
}

/* out (M, ldo) = x (M, cols) W^T, as a step that does not wait. quantize = 1 (re)quantizes x
 * into m->xq first (its own step, after waiting for the steps that may still read xq, and
 * waited for), 0 reuses the quantization of the same x from the previous call.
 * A 4-bit matrix: x rows zero-padded to kpad and rotated (when the matrix has signs) by the
 * tier's Hadamard kernel, quantized per group, then the 4-bit GEMV (M = 1) or GEMM. The
 * quantized rows are reused by the next call when it asks (quantize = 0) and rotates alike.
 * One row is rotated and quantized by whole groups (each group by one thread), rows by rows. */
static void matmul_q4(fw *f, float *out, size_t ldo, const float *x, size_t M,
                      const if_matrix *w, const int8_t *packed, int quantize) {
    if_model *m = f->m;
    const if_kernel_table *k = M > 1 ? m->gemm_k : m->gemv_k;
    const size_t K = w->cols, kp = w->kpad, gs = w->group_size;
    if (quantize || !f->xq_q4 || f->q4_signs != w->signs || f->q4_kpad != kp || f->q4_gs != gs) {
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
        f->xq_q4 = 1;
        f->q4_signs = w->signs;
        f->q4_kpad = kp;
        f->q4_gs = gs;
    }
    if (M == 1 && packed && m->q4_decode_packed) {
        /* one resident copy: decode reads the GEMM's packed nibbles through the same tier's
         * GEMM at M = 1 (each nr-row tile one contiguous stream), the GEMV's arithmetic */
        const size_t nr = k->q4_gemm->nr;
        mm_job j = {k, w, packed, out, ldo, 1, 1, nr, 1, x, m->xq, m->xs};
        run_tasks(f, (w->rows + nr - 1) / nr, 1, gemm_task, &j, w->rows * kp / 2, w->rows);
        return;
    }
    if (M == 1) {
        mm_job j = {k, w, NULL, out, ldo, 1, 1, 1, 1, x, m->xq, m->xs};
        run_tasks(f, w->rows, 8, gemv_task, &j, w->rows * kp / 2, w->rows);
        return;
    }
    const size_t mr = k->q4_gemm ? k->q4_gemm->mr : 1, nr = k->q4_gemm ? k->q4_gemm->nr : 1;
    size_t mt, nt, m_tiles, n_tiles;
    gemm_tiles(f, M, w->rows, mr, nr, &mt, &nt, &m_tiles, &n_tiles);
    mm_job j = {k, w, packed, out, ldo, M, mt, nt, m_tiles, x, m->xq, m->xs};
    run_tasks(f, n_tiles * m_tiles, 1, gemm_task, &j, M * w->rows * kp, 0);
}

static void matmul(fw *f, float *out, size_t ldo, const float *x, size_t M, const if_matrix *w,
                   const int8_t *packed, int quantize) {
    if_model *m = f->m;
    const size_t K = w->cols;
    if (M == 1 && quantize) { /* a decode step's new row: private mode (fw), no barrier after */
        if_step_wait(f->w); /* x complete */
        if (w->dtype == IF_F32)
            f->priv = 0;
        else
            priv_set(f, P_NONE, x, NULL, NULL, NULL, NULL, K, 0.0f);
    }
    if (M == 1 && f->priv) {
        matmul_priv(f, out, ldo, w, packed);
        return;
    }
    if (w->dtype == IF_Q4) {
        matmul_q4(f, out, ldo, x, M, w, packed, quantize);
        return;
    }
    if (w->dtype == IF_Q8 && f->xq_q4) { /* xq holds a 4-bit matrix's rows: quantize again */
        quantize = 1;
        f->xq_q4 = 0;
    }
    const if_kernel_table *k = M > 1 ? m->gemm_k : m->gemv_k;
    if (w->dtype == IF_Q8 && quantize) { /* by rows, or one row by whole groups */
        const size_t gs = w->group_size;
        if_step_wait(f->w);
        step_rows(f, M, K, gs);
        CHUNKS(f, a, b) {
            span s = span_of(M, K, a, b);
            for (size_t r = s.r0; r < s.r1; r++)
                k->quantize->run(m->xq + r * K + s.i0, m->xs + r * (K / gs) + s.i0 / gs,
                                 x + r * K + s.i0, s.i1 - s.i0, gs);
        }
        if_step_wait(f->w);
    }
    if (M == 1) {
        if (w->dtype == IF_Q8 && packed && m->decode_packed) {
            /* one resident copy: decode reads the GEMM's packed layout through the same tier's
             * GEMM at M = 1 (each nr-row tile one contiguous stream), the same per-output
             * arithmetic as the GEMV, so the logits do not change */
            const size_t nr = k->q8_gemm->nr;
            mm_job j = {k, w, packed, out, ldo, 1, 1, nr, 1, x, m->xq, m->xs};
            run_tasks(f, (w->rows + nr - 1) / nr, 1, gemm_task, &j, w->rows * K, w->rows);
            return;
        }
        mm_job j = {k, w, w->q, out, ldo, 1, 1, 1, 1, x, m->xq, m->xs};
        split_job(m, &j);
        run_tasks(f, w->rows, 4, gemv_task, &j, w->rows * K, w->rows);
        return;
    }
    const if_q8_gemm_kernel *g = k->q8_gemm;
    size_t mt, nt, m_tiles, n_tiles;
    gemm_tiles(f, M, w->rows, g->mr, g->nr, &mt, &nt, &m_tiles, &n_tiles);
    mm_job j = {k,  w,  packed ? packed : w->q, out, ldo, M, mt, nt, m_tiles, x,
                m->xq, m->xs};
    if (!packed) split_job(m, &j);
    run_tasks(f, n_tiles * m_tiles, 1, gemm_task, &j, M * w->rows * K, 0);
}

/* A step that makes a matmul's input and quantizes it for that matmul at once (each
 * quantization group, or row, by the thread that computed it; the matmul then runs with
 * quantize = 0), for M rows of n:
 *   NORM   o = RMSNorm(x) with weight nw;
 *   GATE   o = gate(o, x) (the SwiGLU / GeGLU kernel);
 *   RESID  the residual add and the next norm: xn = x + (post ? RMSNorm_post(y) : y), then
 *          o = RMSNorm(xn) with weight nw. Every thread computes all of a row's new residual
 *          (same floats, same order) for the sum of squares and writes only its elements of
 *          xn and o, so x and y are only read; xn may be NULL (not kept) or equal o;
 * then o's rows quantized for w as matmul would (Q8 groups, or a 4-bit matrix's padded,
 * rotated groups; nothing for f32 or w NULL). Waits. */
enum { NORM, GATE, RESID };
typedef struct resid_in {
    const float *y, *post;
    float *xn;
} resid_in;

static void prep_step(fw *f, int op, float *o, const float *x, const float *nw, size_t M,
                      size_t n, float eps, const if_matrix *w, const resid_in *ri) {
    if_model *m = f->m;
    const if_kernel_table *k = M > 1 ? m->gemm_k : m->gemv_k;
    const if_swiglu_fn glu = m->c.act ? k->geglu->run : k->swiglu->run;
    const int q4 = w && w->dtype == IF_Q4, q8 = w && w->dtype == IF_Q8;
    const size_t gs = w ? w->group_size : 0, kp = q4 ? w->kpad : n; /* quantized row length */
    const if_hadamard_kernel *h = k->hadamard ? k->hadamard : &if_k_f32_hadamard_1x1_scalar;
    if_step_wait(f->w); /* xq may still be read by a matmul step */
    if (M == 1 && (q4 || q8)) { /* a decode step: private mode (fw), no barrier after */
        if (op == RESID && ri->xn) { /* the new residual, shared (read after later barriers) */
            step_rows(f, 1, n, 16);
            CHUNKS(f, a, b) resid_row(NULL, ri->xn, x, ri->y, ri->post, nw, n, eps, a, b);
        }
        if (op == GATE)
            priv_set(f, P_GATE, NULL, o, x, NULL, NULL, n, eps);
        else
            priv_set(f, op == NORM ? P_NORM : P_RESID, NULL, x, ri ? ri->y : NULL, nw,
                     ri ? ri->post : NULL, n, eps);
        return;
    }
    step_rows(f, M, kp, q4 || q8 ? gs : 16);
    CHUNKS(f, a, b) {
        span s = span_of(M, kp, a, b);
        const size_t e1 = s.i1 < n ? s.i1 : n; /* real elements of the chunk */
        for (size_t r = s.r0; r < s.r1; r++) {
            float *orow = o + r * n;
            const float *xr = x + r * n;
            if (s.i0 < e1 && op == NORM) {
                rmsnorm_part(orow, xr, nw, n, eps, s.i0, e1);
            } else if (s.i0 < e1 && op == GATE) {
                glu(orow + s.i0, xr + s.i0, e1 - s.i0);
            } else if (s.i0 < e1) {
                resid_row(orow, ri->xn ? ri->xn + r * n : NULL, xr, ri->y + r * n, ri->post, nw,
                          n, eps, s.i0, e1);
            }
            if (q8) {
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
    f->priv = 0;
    if (!w) return;
    f->xq_q4 = q4;
    if (q4) {
        f->q4_signs = w->signs;
        f->q4_kpad = kp;
        f->q4_gs = gs;
    }
}

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
 * and below par_min_work the whole step runs on one thread while the others wait (a decode
 * step at 64 keys was one chunk, 9 % of the step on thread 0 alone; perf, 2-core AVX2). */
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
        run_tasks(f, M * c->n_kv_heads, 1, att_task, &a, ATT_WORK * M * 2 * keys * m->q_dim, 0);
        return;
    }
    size_t keys = window && window + c->n_sinks < pos0 + M ? window + c->n_sinks : pos0 + M;
    /* (row, head) tasks: one chunk per thread, so a chunk's heads of one kv group share a call
     * (a SmolLM2 decode step at 2 threads, 9 heads in 3 groups: chunks of heads 0-4 and 5-8,
     * 2 calls each, rather than 8 chunks of 1-2 heads, each head its own call) */
    run_tasks_per(f, n, 1, att_task, &a, ATT_WORK * M * 2 * keys * m->q_dim, 0,
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
    prep_step(f, NORM, m->xb, x, m->layers[0].rms_att, M, dim, c->norm_eps, &m->layers[0].wq,
              NULL);
    for (size_t l = 0; l < c->n_layers; l++) {
        const if_layer_weights *L = &m->layers[l];
        size_t pk = l * N_MATS;
        /* the cache lines the step after q, k, v stores into, fetched while the projections
         * stream (SmolLM2, 2 threads, 2-core Zen 3: the waits after that step 167-190 ->
         * 124-132 Mcycles per 1024 steps, 6 alternating runs) */
        if (M == 1 && w->tid == 0) if_kv_prefetch_row(kv_of(m, l, 0), pos_of(m, pos0, 0));
        const size_t window = layer_window(c, l);
        const float *rope = window && m->rope_swa ? m->rope_swa : m->rope;

        /* q, k, v (one wait for the three; xb normed and quantized for wq by the previous
         * step); the chunk's k and v rows go into the cache (converted to its type) before
         * attention, which then reads every key through it */
        matmul(f, m->q, qd, m->xb, M, &L->wq, packed_of(m, pk + IF_MAT_wq), 0);
        matmul(f, m->kb, kv_dim, m->xb, M, &L->wk, packed_of(m, pk + IF_MAT_wk), 0);
        matmul(f, m->vb, kv_dim, m->xb, M, &L->wv, packed_of(m, pk + IF_MAT_wv), 0);
        if_step_wait(w);
        if (M > 1) {
            if_step(w, M, 1, 0, elem_chunks(f, M * (qd + 2 * kv_dim), ROW_CHUNKS));
            CHUNKS(f, a, b) qkv_rows(m, L, l, pos0, rope, q_mul, a, b);
        } else {
            /* one chunk per thread even below par_min_work: the team is awake, and one
             * thread alone here held the others for its whole step (2-core Zen 3, SmolLM2,
             * 2 threads: their waits after it 126-128 -> 65-75 Mcycles per 1024 steps) */
            if_step(w, c->n_heads + 2, 1, 0, 1);
            CHUNKS(f, a, b)
            for (size_t t = a; t < b; t++) qkv_task(m, L, l, pos0, rope, q_mul, t);
        }
        if_step_wait(w);

        attention(f, l, pos0, M, window);
        if_step_wait(w);

        matmul(f, m->xb2, dim, m->xb, M, &L->wo, packed_of(m, pk + IF_MAT_wo), 1);
        if_step_wait(w);
        resid_in ra = {m->xb2, L->rms_post_att, xn};
        prep_step(f, RESID, m->xb, x, L->rms_ffn, M, dim, c->norm_eps, &L->w1, &ra);
        tmp = x, x = xn, xn = tmp;

        matmul(f, m->hb, hidden, m->xb, M, &L->w1, packed_of(m, pk + IF_MAT_w1), 0);
        matmul(f, m->hb2, hidden, m->xb, M, &L->w3, packed_of(m, pk + IF_MAT_w3), 0);
        if_step_wait(w);
        prep_step(f, GATE, m->hb, m->hb2, NULL, M, hidden, c->norm_eps, &L->w2, NULL);
        matmul(f, m->xb2, dim, m->hb, M, &L->w2, packed_of(m, pk + IF_MAT_w2), 0);
        if_step_wait(w);
        resid_in rf = {m->xb2, L->rms_post_ffn, xn};
        if (l + 1 < c->n_layers) { /* with the next layer's attention norm, for its wq */
            const if_layer_weights *N = &m->layers[l + 1];
            prep_step(f, RESID, m->xb, x, N->rms_att, M, dim, c->norm_eps, &N->wq, &rf);
            tmp = x, x = xn, xn = tmp;
        } else { /* with the final norm, into m->x (x is m->x2 here) */
            rf.xn = NULL;
            prep_step(f, RESID, m->x, x, m->w.rms_final, M, dim, c->norm_eps, NULL, &rf);
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
    fw f = {.m = m, .w = w, .pf = m->pf + pw, .pxr = m->pxr + pw, .pxs = m->pxs + pw,
            .pxq = m->pxq + pw};
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
    matmul(&f, k->cls_out, vocab, k->cls_x, k->cls_rows, &m->w.wcls, packed_of(m, n_cls_of(m)),
           1);
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

