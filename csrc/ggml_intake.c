/* ggml_intake.c - model creation's intake of IF_GGML matrices: the file's bytes of a GGUF
 * tensor of any type become Q8 at group 32 (if_ggml_to_q8's bits) in the model's own memory,
 * one matrix at a time on the pool, so no whole-model temporary exists.
 *
 * When decode reads the prefill GEMM's packed copy (IF_DECODE_PACKED_GEMM), a matrix goes from
 * the file's blocks straight into that copy, one tile of nr rows at a time through a tile-sized
 * buffer per thread: no row-major Q8 of it is ever made, and the file is read once. Otherwise
 * decode reads row-major Q8, so that is made (and packed afterwards as any Q8 matrix). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
#include "threadpool.h"

#define GGML_GS 32 /* the group of every converted matrix: one scale per 32, as Q8_0 */

/* The model's copy of matrix idx's descriptor (layer l's matrix i at l * N_MATS + i, then the
 * classifier), which intake rewrites from IF_GGML to IF_Q8. */
static if_matrix *model_matrix(if_model *m, size_t idx) {
    if (idx == m->c.n_layers * N_MATS) return &m->w.wcls;
    return (if_matrix *)if_layer_matrix(&m->layers[idx / N_MATS], idx % N_MATS);
}

/* A name for errors, as check_weights names matrices. */
static void matrix_name(const if_model *m, size_t idx, char *out, size_t n) {
    static const char *const names[] = {
#define IF_NAME_(name, r, c) #name,
        IF_LAYER_MATRICES(IF_NAME_)
#undef IF_NAME_
    };
    if (idx == m->c.n_layers * N_MATS)
        snprintf(out, n, "classifier");
    else
        snprintf(out, n, "layer %zu %s", idx / N_MATS, names[idx % N_MATS]);
}

size_t if_ggml_intake_group(void) { return GGML_GS; }

/* Room for matrix idx's converted Q8: its scales always, its row-major int8 when `rowmajor`;
 * kept in m->ggml_owned (freed with the model). 0 if out of memory. */
static int own_buffers(if_model *m, size_t idx, const if_matrix *w, int rowmajor, int8_t **q,
                       float **s) {
    if (!m->ggml_owned) {
        m->ggml_owned = calloc(2 * (m->c.n_layers * N_MATS + 1), sizeof(void *));
        if (!m->ggml_owned) return 0;
    }
    *s = malloc(w->rows * (w->cols / GGML_GS) * sizeof(float));
    m->ggml_owned[2 * idx + 1] = *s;
    *q = NULL;
    if (rowmajor) {
        *q = malloc(w->rows * w->cols);
        m->ggml_owned[2 * idx] = *q;
    }
    return *s && (!rowmajor || *q);
}

/* The descriptor after intake: a Q8 matrix at group 32 (q NULL when only the packed copy
 * holds the int8). */
static void becomes_q8(if_matrix *w, const int8_t *q, const float *s) {
    const if_matrix was = *w;
    memset(w, 0, sizeof *w);
    w->dtype = IF_Q8;
    w->rows = was.rows;
    w->cols = was.cols;
    w->group_size = GGML_GS;
    w->q = q;
    w->s = s;
}

static if_status fail_named(const if_model *m, size_t idx, const char *why, char *err,
                            size_t errlen) {
    char name[48];
    matrix_name(m, idx, name, sizeof name);
    if (err && errlen) snprintf(err, errlen, "%s: %s", name, why);
    return IF_EINVAL;
}

if_status if_ggml_intake_rowmajor(if_model *m, size_t idx, char *err, size_t errlen) {
    if_matrix *w = model_matrix(m, idx);
    int8_t *q;
    float *s;
    if (!own_buffers(m, idx, w, 1, &q, &s)) {
        if (err && errlen) snprintf(err, errlen, "out of memory converting a matrix to Q8");
        return IF_ENOMEM;
    }
    char why[256] = "";
    const if_status st =
        if_ggml_to_q8(w->ggml_type, w->raw, w->raw_bytes, w->rows, w->cols, 0, w->rows, GGML_GS,
                      IF_GGML_KEEP_Q8_0, q, s, m->pool, NULL, why, sizeof why);
    if (st != IF_OK) return fail_named(m, idx, why, err, errlen);
    becomes_q8(w, q, s);
    return IF_OK;
}

typedef struct tile_job {
    const if_matrix *w;
    const if_q8_gemm_kernel *k;
    int8_t *dst;
    float *s;
    int8_t *tiles; /* n_threads tiles of nr rows */
    size_t row_bytes, tile_bytes;
    unsigned flags;
    atomic_int not_kept, failed;
    char why[256]; /* the first failure's reason (written by the thread that set failed) */
} tile_job;

static void tile_rows(void *ctx, size_t t0, size_t t1, size_t tid) {
    tile_job *j = ctx;
    const if_matrix *w = j->w;
    const size_t nr = j->k->nr, cols = w->cols;
    int8_t *tile = j->tiles + tid * nr * cols;
    for (size_t t = t0; t < t1 && !atomic_load(&j->failed); t++) {
        const size_t r0 = t * nr, n = w->rows - r0 < nr ? w->rows - r0 : nr;
        int kept = 0;
        char why[256];
        const if_status st = if_ggml_to_q8(
            w->ggml_type, (const uint8_t *)w->raw + r0 * j->row_bytes, n * j->row_bytes, n, cols,
            0, n, GGML_GS, j->flags, tile, j->s + r0 * (cols / GGML_GS), NULL, &kept, why,
            sizeof why);
        if (st != IF_OK) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&j->failed, &expect, 1))
                memcpy(j->why, why, sizeof why);
            return;
        }
        if ((j->flags & IF_GGML_KEEP_Q8_0) && !kept) atomic_store(&j->not_kept, 1);
        j->k->pack(j->dst + t * j->tile_bytes, tile, n, cols, GGML_GS);
    }
}

if_status if_ggml_intake_packed(if_model *m, size_t idx, const if_q8_gemm_kernel *k,
                                int8_t *dst, char *err, size_t errlen) {
    if_matrix *w = model_matrix(m, idx);
    int8_t *q;
    float *s;
    tile_job j = {.w = w, .k = k, .dst = dst, .row_bytes = w->raw_bytes / w->rows,
                  .tile_bytes = k->pack_size(k->nr, w->cols, GGML_GS),
                  .flags = w->ggml_type == IF_GGML_Q8_0 ? IF_GGML_KEEP_Q8_0 : 0u};
    if (!own_buffers(m, idx, w, 0, &q, &s) ||
        !(j.tiles = malloc(m->n_threads * k->nr * w->cols))) {
        if (err && errlen) snprintf(err, errlen, "out of memory converting a matrix to Q8");
        return IF_ENOMEM;
    }
    j.s = s;
    const size_t n_tiles = (w->rows + k->nr - 1) / k->nr;
    for (;;) {
        atomic_init(&j.not_kept, 0);
        atomic_init(&j.failed, 0);
        if_pool_parallel_for(m->pool, n_tiles, 1, tile_rows, &j);
        /* a Q8_0 matrix is kept as stored only whole, as if_ggml_to_q8 decides for the
         * matrix: one -128 anywhere and every row is requantized */
        if (atomic_load(&j.failed) || !atomic_load(&j.not_kept) || !j.flags) break;
        j.flags = 0;
    }
    free(j.tiles);
    if (atomic_load(&j.failed)) return fail_named(m, idx, j.why, err, errlen);
    becomes_q8(w, NULL, s);
    return IF_OK;
}
