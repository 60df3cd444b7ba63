/* arena.c - the blocks a model runs in place (IF_KQ: the file's K-quant, legacy and IQ4
 * matrices), copied byte for byte into the model's weight arena a slice per decode step.
 *
 * Why copy: decode streams every weight byte per token, and a mapped file has 4 KiB pages
 * where the arena asks for 2 MiB ones (docs/performance.md, "Huge pages").
 * Why a slice per decode step: the arena's fresh pages are zeroed by the kernel (and, in a VM,
 * backed by the host) before the copy lands in them, which cost up to ~2 s per GB. Copied at
 * load, that made start-up slower than reading the file in place; copied by a thread of its
 * own, it competed with the prefill for the cores, and a prefill reading the file's pages
 * while the copy filled the arena held the weights twice. Prefill is compute-bound and gains
 * nothing; decode streams, so decode pays: each decode step first copies 1/32 of the blocks on
 * the pool, and a matrix moves to its copy as soon as it is whole. Nothing else runs then, and
 * each copied piece's file pages are dropped at once (a read-only mapping: they fault back in
 * from the file if read again), the whole matrix's again when it moves, so the file's pages
 * and the copy hold at most the matrix being copied twice.
 * The bytes are the same, so results do not depend on which matrices have moved; where both
 * tables have kernels on row groups (Q4_K, Q6_K in 8s on the AVX2 tiers, Q8_0 in 16s on
 * AVX-512), a matrix of that type is rearranged into them on the way (if_kq_pack_x8, if_q80_pack_x16),
 * whole groups per piece, and moves to those kernels, which give the file-layout kernels'
 * bits. */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise under -std=c11 */
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "model_internal.h"

typedef struct arena_item {
    if_matrix *w;       /* the model's own descriptor of the matrix */
    const uint8_t *src; /* the caller's blocks */
    uint8_t *dst;       /* their place in the arena */
    size_t bytes;
    size_t unit; /* bytes of a row group when rearranged (group_rows), else 0 */
    int group_rows;
} arena_item;

struct if_arena_copy {
    arena_item *items;
    size_t n, cap;
    size_t next, at;   /* the item being copied and its bytes copied so far */
    size_t total;      /* bytes of all items */
    int drop_src;      /* the sources are read-only file mappings: drop their pages once copied */
};

/* Bytes of a piece of the parallel copy (a huge page); a decode step copies 1/STEPS of all. */
#define PIECE ((size_t)2 << 20)
#define STEPS 32

/* The rows per group w is rearranged into (0: none): both tables have kernels for its type's
 * groups and its rows (and Q8_0's blocks, in pairs) fill whole groups. A tied token table goes
 * too: its lookup gathers a row's bytes back (if_group_row). */
static int group_rows_of(const if_model *m, const if_matrix *w) {
    const if_kernel_table *v = m->gemv_k, *p = m->gemm_k;
    if (w->ggml_type == IF_GGML_Q4_K && v->q4kx16_gemv && p->q4kx16_gemm && w->rows % 16 == 0)
        return 16;
    if (w->ggml_type == IF_GGML_Q4_K && v->q4kx8_gemv && p->q4kx8_gemm && w->rows % 8 == 0)
        return 8;
    if (w->ggml_type == IF_GGML_Q6_K && v->q6kx16_gemv && p->q6kx16_gemm && w->rows % 16 == 0)
        return 16;
    if (w->ggml_type == IF_GGML_Q6_K && v->q6kx8_gemv && p->q6kx8_gemm && w->rows % 8 == 0)
        return 8;
    if (w->ggml_type == IF_GGML_Q8_0 && v->q80x16_gemv && p->q80x16_gemm && w->rows % 16 == 0 &&
        w->cols % 64 == 0)
        return 16;
    if (w->ggml_type == IF_GGML_Q4_0 && v->q40x16_gemv && p->q40x16_gemm && w->rows % 16 == 0 &&
        w->cols % 64 == 0)
        return 16;
    return 0;
}

int if_arena_add(if_model *m, if_matrix *w, uint8_t *dst) {
    if_arena_copy *a = m->acopy;
    if (!a && !(a = m->acopy = calloc(1, sizeof *a))) return 0;
    if (a->n == a->cap) {
        const size_t cap = a->cap ? 2 * a->cap : 64;
        arena_item *it = realloc(a->items, cap * sizeof *it);
        if (!it) return 0;
        a->items = it, a->cap = cap;
    }
    const int g = group_rows_of(m, w);
    a->items[a->n++] =
        (arena_item){w, w->raw, dst, w->raw_bytes, g ? w->raw_bytes / (w->rows / g) : 0, g};
    a->total += w->raw_bytes;
    return 1;
}

void if_arena_start(if_model *m, int drop_src) {
    if (m->acopy) m->acopy->drop_src = drop_src;
}

/* Whole pages inside [p, p + n) leave the process's resident set. */
static void drop_pages(const uint8_t *p, size_t n) {
#if defined(__linux__) && defined(MADV_DONTNEED)
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) / page * page;
    const uintptr_t hi = ((uintptr_t)p + n) / page * page;
    if (page && hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
#else
    (void)p, (void)n;
#endif
}

typedef struct piece_job {
    const arena_item *it;
    size_t at, end; /* the byte range of the item this call copies */
    size_t piece;   /* bytes per task */
    int drop_src;
} piece_job;

/* Bytes of an item's pieces: PIECE, or the whole row groups in it (at least one). */
static size_t piece_of(const arena_item *it) {
    return !it->unit ? PIECE : PIECE < it->unit ? it->unit : PIECE / it->unit * it->unit;
}

static void copy_pieces(void *ctx, size_t t0, size_t t1, size_t tid) {
    const piece_job *j = ctx;
    const arena_item *it = j->it;
    (void)tid;
    for (size_t t = t0; t < t1; t++) {
        const size_t at = j->at + t * j->piece;
        const size_t n = j->end - at < j->piece ? j->end - at : j->piece;
        if (it->group_rows == 8)
            if_kq_pack_x8(it->dst + at, it->src + at, n / it->unit, it->w->cols,
                          it->w->ggml_type == IF_GGML_Q4_K ? IF_Q4K_BLOCK_BYTES
                                                           : IF_Q6K_BLOCK_BYTES);
        else if (it->group_rows == 16 && it->w->ggml_type == IF_GGML_Q4_0)
            if_q40_pack_x16(it->dst + at, it->src + at, n / it->unit, it->w->cols);
        else if (it->group_rows == 16 && it->w->ggml_type != IF_GGML_Q8_0)
            if_kq_pack_x16(it->dst + at, it->src + at, n / it->unit, it->w->cols,
                           it->w->ggml_type == IF_GGML_Q4_K ? IF_Q4K_BLOCK_BYTES
                                                            : IF_Q6K_BLOCK_BYTES);
        else if (it->group_rows == 16)
            if_q80_pack_x16(it->dst + at, it->src + at, n / it->unit, it->w->cols);
        else
            memcpy(it->dst + at, it->src + at, n);
        if (j->drop_src) drop_pages(it->src + at, n);
    }
}

/* Copy up to `budget` bytes (whole pieces) on the pool; each matrix completed moves to its
 * copy (the tied token table with it). The pool is idle: called between forward calls. */
static void copy_some(if_model *m, size_t budget) {
    if_arena_copy *a = m->acopy;
    while (a->next < a->n && budget) {
        arena_item *it = &a->items[a->next];
        const size_t piece = piece_of(it);
        const size_t left = it->bytes - a->at;
        size_t want = left < budget ? left : budget;
        if (it->unit) want = (want + it->unit - 1) / it->unit * it->unit; /* whole groups */
        piece_job j = {it, a->at, a->at + want, piece, a->drop_src};
        if_pool_parallel_for(m->pool, (want + piece - 1) / piece, 1, copy_pieces, &j);
        a->at += want;
        budget -= want < budget ? want : budget;
        if (a->at == it->bytes) { /* whole: it moves; the pages of it decode read from the file
                                   * since its first piece was copied go too */
            if (a->drop_src) drop_pages(it->src, it->bytes);
            it->w->raw = it->dst;
            it->w->group_rows = it->group_rows;
            if (m->emb.t.dtype == IF_KQ && m->emb.t.raw == it->src) {
                m->emb.t.raw = it->dst;
                m->emb.t.group_rows = it->group_rows;
            }
            a->next++, a->at = 0;
        }
    }
}

void if_arena_step(if_model *m) {
    if_arena_copy *a = m->acopy;
    if (!a || a->next == a->n) return;
    copy_some(m, (a->total + STEPS - 1) / STEPS);
}

void if_arena_wait(if_model *m) {
    if (m->acopy) copy_some(m, SIZE_MAX);
}

size_t if_arena_pending(const if_model *m) {
    const if_arena_copy *a = m->acopy;
    return a ? a->n - a->next : 0;
}

void if_arena_free(if_model *m) {
    if (!m->acopy) return;
    free(m->acopy->items);
    free(m->acopy);
    m->acopy = NULL;
}
