/* bench_kernels.c - timing cases over the kernel tables, the correctness gate, and the
 * test-only tables: "broken" and "broken_pack", which the gate must refuse, and
 * "amx_emulated" (csrc/testing/). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "isaforge_bench.h"
#include "../kernels/kernels.h"
#include "../testing/testing.h"

struct ifb_case {
    ifb_op op;
    size_t M, N, K, gs, copies;
    int8_t *xq;     /* (M, K) activations, int8 */
    float *xs;      /* (M, K/gs) activation scales */
    float *x;       /* (M, K) floats for quantize */
    int8_t **w;     /* copies x (N, K); 4-bit ops: copies x (N, K/2) nibbles */
    int8_t cb[16];  /* 4-bit ops: the codebook */
    int16_t *xsum;  /* K-quant ops: (M, K/16) sums of 16 activations */
    float **ws;     /* copies x (N, K/gs) */
    int8_t **packed; /* copies x packed GEMM weights (for the table in packed_for) */
    const if_kernel_table *packed_for;
    float *out, *ref;     /* (M, N) */
    int8_t *q, *qref;     /* quantize outputs (M, K) */
    float *s, *sref;      /* (M, K/gs) */
    size_t next;          /* next weight copy to use */
};

double ifb_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *alloc64(size_t bytes) {
    size_t n = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, n ? n : 64);
}

static uint64_t rng_next(uint64_t *st) {
    *st ^= *st >> 12;
    *st ^= *st << 25;
    *st ^= *st >> 27;
    return *st * 0x2545F4914F6CDD1DULL;
}

static void fill_i8(int8_t *p, size_t n, uint64_t *st) {
    for (size_t i = 0; i < n; i++) p[i] = (int8_t)((int)(rng_next(st) % 255u) - 127);
}

/* Positive scales in [lo, lo + span). */
static void fill_f32(float *p, size_t n, uint64_t *st, float lo, float span) {
    for (size_t i = 0; i < n; i++) p[i] = lo + span * (float)(rng_next(st) >> 40) / 16777216.0f;
}

void ifb_case_free(ifb_case *c) {
    if (!c) return;
    for (size_t i = 0; c->w && i < c->copies; i++) free(c->w[i]);
    for (size_t i = 0; c->ws && i < c->copies; i++) free(c->ws[i]);
    for (size_t i = 0; c->packed && i < c->copies; i++) free(c->packed[i]);
    free(c->w);
    free(c->ws);
    free(c->packed);
    free(c->xq);
    free(c->xs);
    free(c->xsum);
    free(c->x);
    free(c->out);
    free(c->ref);
    free(c->q);
    free(c->qref);
    free(c->s);
    free(c->sref);
    free(c);
}

static int is_q4(ifb_op op) { return op == IFB_Q4_GEMV || op == IFB_Q4_GEMM; }
static int is_kq_gemm(ifb_op op) {
    return op == IFB_Q4K_GEMM || op == IFB_Q5K_GEMM || op == IFB_Q6K_GEMM ||
           (op >= IFB_Q40_GEMM && op <= IFB_Q51_GEMM) || op == IFB_Q80_GEMM;
}
static int is_legacy(ifb_op op) {
    return (op >= IFB_Q40_GEMV && op <= IFB_Q51_GEMV) ||
           (op >= IFB_Q40_GEMM && op <= IFB_Q51_GEMM) || op == IFB_Q80_GEMV || op == IFB_Q80_GEMM;
}
static int is_iq4(ifb_op op) { return op == IFB_IQ4NL_GEMV || op == IFB_IQ4XS_GEMV; }
static int is_kq(ifb_op op) {
    return op == IFB_Q4K_GEMV || op == IFB_Q5K_GEMV || op == IFB_Q6K_GEMV || is_kq_gemm(op) ||
           is_legacy(op) || is_iq4(op);
}
/* Bytes of one block of op's type, and its values. */
static size_t kq_block(ifb_op op) {
    switch (op) {
    case IFB_Q4K_GEMV: case IFB_Q4K_GEMM: return IF_Q4K_BLOCK_BYTES;
    case IFB_Q5K_GEMV: case IFB_Q5K_GEMM: return IF_Q5K_BLOCK_BYTES;
    case IFB_Q40_GEMV: case IFB_Q40_GEMM: return IF_Q40_BLOCK_BYTES;
    case IFB_Q41_GEMV: case IFB_Q41_GEMM: return IF_Q41_BLOCK_BYTES;
    case IFB_Q50_GEMV: case IFB_Q50_GEMM: return IF_Q50_BLOCK_BYTES;
    case IFB_Q51_GEMV: case IFB_Q51_GEMM: return IF_Q51_BLOCK_BYTES;
    case IFB_IQ4NL_GEMV: return IF_IQ4NL_BLOCK_BYTES;
    case IFB_IQ4XS_GEMV: return IF_IQ4XS_BLOCK_BYTES;
    case IFB_Q80_GEMV: case IFB_Q80_GEMM: return IF_Q80_BLOCK_BYTES;
    default: return IF_Q6K_BLOCK_BYTES;
    }
}
static size_t kq_qb(ifb_op op) {
    return is_legacy(op) || op == IFB_IQ4NL_GEMV ? IF_QL : IF_QK;
}
/* Bytes of one (N, K) K-quant matrix in the file's blocks. */
static size_t kq_bytes(ifb_op op, size_t N, size_t K) { return N * (K / kq_qb(op)) * kq_block(op); }

if_status ifb_case_create(ifb_op op, size_t M, size_t N, size_t K, size_t gs, size_t copies,
                          const int8_t *cb, ifb_case **out, char *err, size_t errlen) {
    *out = NULL;
    if (op != IFB_Q8_GEMV && op != IFB_Q8_GEMM && op != IFB_QUANTIZE && !is_q4(op) &&
        !is_kq(op)) {
        snprintf(err, errlen, "unknown op %d", (int)op);
        return IF_EINVAL;
    }
    if (is_q4(op) && (!cb || gs % 32)) {
        snprintf(err, errlen, "a 4-bit case needs a 16-entry codebook and gs a multiple of 32 "
                 "(gs=%zu)", gs);
        return IF_EINVAL;
    }
    if (is_kq(op) && gs != kq_qb(op)) {
        snprintf(err, errlen, "a K-quant or legacy-block case needs gs = %zu (gs=%zu)", kq_qb(op),
                 gs);
        return IF_EINVAL;
    }
    if (op == IFB_Q8_GEMV || op == IFB_Q4_GEMV || (is_kq(op) && !is_kq_gemm(op))) M = 1;
    if (op == IFB_QUANTIZE) N = 0, copies = 1;
    if (M == 0 || K == 0 || gs == 0 || K % gs != 0 || copies == 0 ||
        (op != IFB_QUANTIZE && N == 0)) {
        snprintf(err, errlen, "bad shape: M=%zu N=%zu K=%zu gs=%zu copies=%zu (K must be a "
                 "positive multiple of gs)", M, N, K, gs, copies);
        return IF_EINVAL;
    }
    if (M > ((size_t)1 << 20) || N > ((size_t)1 << 24) || K > ((size_t)1 << 20) ||
        copies > 4096 || (N && copies * N > SIZE_MAX / K / 2)) {
        snprintf(err, errlen, "shape too large: M=%zu N=%zu K=%zu copies=%zu", M, N, K, copies);
        return IF_EINVAL;
    }
    ifb_case *c = calloc(1, sizeof *c);
    if (!c) goto oom;
    c->op = op, c->M = M, c->N = N, c->K = K, c->gs = gs, c->copies = copies;
    if (is_q4(op)) memcpy(c->cb, cb, 16);
    uint64_t st = 0x9E3779B97F4A7C15ULL ^ (M * 131 + N * 7 + K);
    size_t G = K / gs;
    if (op == IFB_QUANTIZE) {
        c->x = alloc64(M * K * sizeof(float));
        c->q = alloc64(M * K), c->qref = alloc64(M * K);
        c->s = alloc64(M * G * sizeof(float)), c->sref = alloc64(M * G * sizeof(float));
        if (!c->x || !c->q || !c->qref || !c->s || !c->sref) goto oom;
        for (size_t i = 0; i < M * K; i++)
            c->x[i] = ((float)(rng_next(&st) >> 40) / 8388608.0f - 1.0f) * 3.0f;
        *out = c;
        return IF_OK;
    }
    c->xq = alloc64(M * K), c->xs = alloc64(M * G * sizeof(float));
    c->out = alloc64(M * N * sizeof(float)), c->ref = alloc64(M * N * sizeof(float));
    c->w = calloc(copies, sizeof *c->w), c->ws = calloc(copies, sizeof *c->ws);
    c->packed = calloc(copies, sizeof *c->packed);
    if (!c->xq || !c->xs || !c->out || !c->ref || !c->w || !c->ws || !c->packed) goto oom;
    fill_i8(c->xq, M * K, &st);
    fill_f32(c->xs, M * G, &st, 0.01f, 0.02f);
    if (is_kq(op)) {
        c->xsum = alloc64(M * K / 16 * sizeof(int16_t));
        if (!c->xsum) goto oom;
        if_k8_sums(c->xsum, c->xq, M * K);
    }
    for (size_t i = 0; i < copies; i++) {
        /* 4-bit: random nibble pairs; K-quants: random blocks with finite f16 scales */
        const size_t wb = is_q4(op) ? N * K / 2 : is_kq(op) ? kq_bytes(op, N, K) : N * K;
        c->w[i] = alloc64(wb), c->ws[i] = alloc64(N * G * sizeof(float));
        if (!c->w[i] || !c->ws[i]) goto oom;
        fill_i8(c->w[i], wb, &st);
        const int mins = op == IFB_Q4K_GEMV || op == IFB_Q5K_GEMV || op == IFB_Q4K_GEMM ||
                         op == IFB_Q5K_GEMM || op == IFB_Q41_GEMV || op == IFB_Q51_GEMV ||
                         op == IFB_Q41_GEMM || op == IFB_Q51_GEMM; /* d, dmin (or m): 0-3 */
        for (size_t o = mins || is_legacy(op) || is_iq4(op) ? 0 : 208; is_kq(op) && o < wb; o += kq_block(op)) {
            c->w[i][o] = 0x00, c->w[i][o + 1] = 0x1C; /* f16 1/256 */
            if (mins) c->w[i][o + 2] = 0x00, c->w[i][o + 3] = 0x18; /* 1/512 */
        }
        fill_f32(c->ws[i], N * G, &st, 0.0005f, 0.001f);
    }
    *out = c;
    return IF_OK;
oom:
    ifb_case_free(c);
    snprintf(err, errlen, "out of memory for a case M=%zu N=%zu K=%zu copies=%zu", M, N, K,
             copies);
    return IF_ENOMEM;
}

size_t ifb_case_weight_bytes(const ifb_case *c) {
    if (c->op == IFB_QUANTIZE) return 0;
    if (is_kq(c->op)) return kq_bytes(c->op, c->N, c->K);
    return (is_q4(c->op) ? c->N * c->K / 2 : c->N * c->K) + c->N * (c->K / c->gs) * sizeof(float);
}

/* The 4-bit GEMM table t runs (the scalar one when t has none). */
static const if_q4_gemm_kernel *q4_gemm_of(const if_kernel_table *t) {
    return t->q4_gemm ? t->q4_gemm : if_tier_table(0)->q4_gemm;
}

/* The rows per group table t runs c's matrix on, as a model does once its weight arena holds
 * it: 8 (Q4_K, Q6_K: if_kq_pack_x8), 16 (Q4_K: if_kq_pack_x16; Q8_0: if_q80_pack_x16), or 0
 * (the file's rows). */
static int group_rows(const ifb_case *c, const if_kernel_table *t) {
    if ((c->op == IFB_Q4K_GEMV || c->op == IFB_Q4K_GEMM) && t->q4kx16_gemv && t->q4kx16_gemm &&
        c->N % 16 == 0)
        return 16;
    if ((c->op == IFB_Q4K_GEMV || c->op == IFB_Q4K_GEMM) && t->q4kx8_gemv && t->q4kx8_gemm &&
        c->N % 8 == 0)
        return 8;
    if ((c->op == IFB_Q6K_GEMV || c->op == IFB_Q6K_GEMM) && t->q6kx16_gemv && t->q6kx16_gemm &&
        c->N % 16 == 0)
        return 16;
    if ((c->op == IFB_Q6K_GEMV || c->op == IFB_Q6K_GEMM) && t->q6kx8_gemv && t->q6kx8_gemm &&
        c->N % 8 == 0)
        return 8;
    if ((c->op == IFB_Q80_GEMV || c->op == IFB_Q80_GEMM) && t->q80x16_gemv && t->q80x16_gemm &&
        c->N % 16 == 0 && c->K % 64 == 0)
        return 16;
    if ((c->op == IFB_Q40_GEMV || c->op == IFB_Q40_GEMM) && t->q40x16_gemv && t->q40x16_gemm &&
        c->N % 16 == 0 && c->K % 64 == 0)
        return 16;
    return 0;
}

/* Pack every weight copy for table t if its GEMM wants a packed layout (as at model load), or
 * into the row groups t runs them on (as the weight arena does). */
static if_status ensure_packed(ifb_case *c, const if_kernel_table *t, char *err, size_t errlen) {
    const if_q8_gemm_kernel *g = t->q8_gemm;
    const if_q4_gemm_kernel *g4 = q4_gemm_of(t);
    const int q8 = c->op == IFB_Q8_GEMM && g->pack, q4 = c->op == IFB_Q4_GEMM && g4->pack;
    const int x8 = group_rows(c, t); /* rows per group, or 0 */
    if (!(q8 || q4 || x8) || c->packed_for == t) return IF_OK;
    size_t bytes = x8   ? kq_bytes(c->op, c->N, c->K)
                   : q8 ? g->pack_size(c->N, c->K, c->gs)
                        : g4->pack_size(c->N, c->K, c->gs);
    for (size_t i = 0; i < c->copies; i++) {
        free(c->packed[i]);
        c->packed[i] = alloc64(bytes);
        if (!c->packed[i]) {
            c->packed_for = NULL;
            snprintf(err, errlen, "out of memory packing weights for %s", q8 ? g->name : g4->name);
            return IF_ENOMEM;
        }
        if (x8 == 8)
            if_kq_pack_x8((uint8_t *)c->packed[i], (const uint8_t *)c->w[i], c->N / 8, c->K,
                          kq_block(c->op));
        else if (x8 == 16 && kq_block(c->op) == IF_Q40_BLOCK_BYTES)
            if_q40_pack_x16((uint8_t *)c->packed[i], (const uint8_t *)c->w[i], c->N / 16, c->K);
        else if (x8 == 16 && kq_block(c->op) != IF_Q80_BLOCK_BYTES)
            if_kq_pack_x16((uint8_t *)c->packed[i], (const uint8_t *)c->w[i], c->N / 16, c->K,
                           kq_block(c->op));
        else if (x8 == 16)
            if_q80_pack_x16((uint8_t *)c->packed[i], (const uint8_t *)c->w[i], c->N / 16, c->K);
        else if (q8)
            g->pack(c->packed[i], c->w[i], c->N, c->K, c->gs);
        else
            g4->pack((uint8_t *)c->packed[i], (const uint8_t *)c->w[i], c->N, c->K, c->gs);
    }
    c->packed_for = t;
    return IF_OK;
}

/* The K-quant GEMV table t runs for c's type (the scalar one when t has none). */
static const if_kq_gemv_kernel *kq_gemv_of(const ifb_case *c, const if_kernel_table *t) {
    const if_kernel_table *s = if_tier_table(0);
    if (group_rows(c, t))
        return c->op == IFB_Q4K_GEMV   ? (group_rows(c, t) == 16 ? t->q4kx16_gemv : t->q4kx8_gemv)
               : c->op == IFB_Q6K_GEMV ? (group_rows(c, t) == 16 ? t->q6kx16_gemv : t->q6kx8_gemv)
               : c->op == IFB_Q40_GEMV ? t->q40x16_gemv
                                       : t->q80x16_gemv;
    if (c->op == IFB_Q4K_GEMV) return t->q4k_gemv ? t->q4k_gemv : s->q4k_gemv;
    if (c->op == IFB_Q5K_GEMV) return t->q5k_gemv ? t->q5k_gemv : s->q5k_gemv;
    if (c->op == IFB_Q40_GEMV) return t->q40_gemv ? t->q40_gemv : s->q40_gemv;
    if (c->op == IFB_Q41_GEMV) return t->q41_gemv ? t->q41_gemv : s->q41_gemv;
    if (c->op == IFB_Q50_GEMV) return t->q50_gemv ? t->q50_gemv : s->q50_gemv;
    if (c->op == IFB_Q51_GEMV) return t->q51_gemv ? t->q51_gemv : s->q51_gemv;
    if (c->op == IFB_IQ4NL_GEMV) return t->iq4nl_gemv ? t->iq4nl_gemv : s->iq4nl_gemv;
    if (c->op == IFB_IQ4XS_GEMV) return t->iq4xs_gemv ? t->iq4xs_gemv : s->iq4xs_gemv;
    if (c->op == IFB_Q80_GEMV) return t->q80_gemv ? t->q80_gemv : s->q80_gemv;
    return t->q6k_gemv ? t->q6k_gemv : s->q6k_gemv;
}
/* ... and its GEMM. */
static const if_kq_gemm_kernel *kq_gemm_of(const ifb_case *c, const if_kernel_table *t) {
    const if_kernel_table *s = if_tier_table(0);
    if (group_rows(c, t))
        return c->op == IFB_Q4K_GEMM   ? (group_rows(c, t) == 16 ? t->q4kx16_gemm : t->q4kx8_gemm)
               : c->op == IFB_Q6K_GEMM ? (group_rows(c, t) == 16 ? t->q6kx16_gemm : t->q6kx8_gemm)
               : c->op == IFB_Q40_GEMM ? t->q40x16_gemm
                                       : t->q80x16_gemm;
    if (c->op == IFB_Q4K_GEMM) return t->q4k_gemm ? t->q4k_gemm : s->q4k_gemm;
    if (c->op == IFB_Q5K_GEMM) return t->q5k_gemm ? t->q5k_gemm : s->q5k_gemm;
    if (c->op == IFB_Q40_GEMM) return t->q40_gemm ? t->q40_gemm : s->q40_gemm;
    if (c->op == IFB_Q41_GEMM) return t->q41_gemm ? t->q41_gemm : s->q41_gemm;
    if (c->op == IFB_Q50_GEMM) return t->q50_gemm ? t->q50_gemm : s->q50_gemm;
    if (c->op == IFB_Q51_GEMM) return t->q51_gemm ? t->q51_gemm : s->q51_gemm;
    if (c->op == IFB_Q80_GEMM) return t->q80_gemm ? t->q80_gemm : s->q80_gemm;
    return t->q6k_gemm ? t->q6k_gemm : s->q6k_gemm;
}

/* One call of t's op on weight copy i, writing to (out or q/s). */
static void call_once(ifb_case *c, const if_kernel_table *t, size_t i, float *out, int8_t *q,
                      float *s) {
    size_t G = c->K / c->gs;
    switch (c->op) {
    case IFB_Q8_GEMV:
        t->q8_gemv->run(out, c->xq, c->xs, c->w[i], c->ws[i], 0, c->N, c->K, c->gs);
        break;
    case IFB_Q8_GEMM: {
        const int8_t *w = t->q8_gemm->pack ? c->packed[i] : c->w[i];
        t->q8_gemm->run(out, c->N, c->xq, c->xs, c->M, w, c->ws[i], 0, c->N, c->K, c->gs);
        break;
    }
    case IFB_Q4_GEMV: {
        const if_q4_gemv_kernel *k = t->q4_gemv ? t->q4_gemv : if_tier_table(0)->q4_gemv;
        k->run(out, c->xq, c->xs, (const uint8_t *)c->w[i], c->ws[i], c->cb, 0, c->N, c->K,
               c->gs);
        break;
    }
    case IFB_Q4_GEMM: {
        const if_q4_gemm_kernel *k = q4_gemm_of(t);
        const uint8_t *w = (const uint8_t *)(k->pack ? c->packed[i] : c->w[i]);
        k->run(out, c->N, c->xq, c->xs, c->M, w, c->ws[i], c->cb, 0, c->N, c->K, c->gs);
        break;
    }
    case IFB_Q4K_GEMV:
    case IFB_Q5K_GEMV:
    case IFB_Q40_GEMV:
    case IFB_Q41_GEMV:
    case IFB_Q50_GEMV:
    case IFB_Q51_GEMV:
    case IFB_IQ4NL_GEMV:
    case IFB_IQ4XS_GEMV:
    case IFB_Q80_GEMV:
    case IFB_Q6K_GEMV: {
        const if_kq_gemv_kernel *k = kq_gemv_of(c, t);
        k->run(out, c->xq, c->xs, c->xsum,
               (const uint8_t *)(group_rows(c, t) ? c->packed[i] : c->w[i]), 0, c->N, c->K);
        break;
    }
    case IFB_Q4K_GEMM:
    case IFB_Q5K_GEMM:
    case IFB_Q40_GEMM:
    case IFB_Q41_GEMM:
    case IFB_Q50_GEMM:
    case IFB_Q51_GEMM:
    case IFB_Q6K_GEMM:
    case IFB_Q80_GEMM:
        kq_gemm_of(c, t)->run(out, c->N, c->xq, c->xs, c->xsum, c->M,
                              (const uint8_t *)(group_rows(c, t) ? c->packed[i] : c->w[i]), 0,
                              c->N, c->K);
        break;
    case IFB_QUANTIZE:
        for (size_t m = 0; m < c->M; m++)
            t->quantize->run(q + m * c->K, s + m * G, c->x + m * c->K, c->K, c->gs);
        break;
    }
}

/* The name of the kernel t runs for c's op. */
static const char *kernel_name(const ifb_case *c, const if_kernel_table *t) {
    const if_kernel_table *s = if_tier_table(0);
    switch (c->op) {
    case IFB_Q8_GEMV: return t->q8_gemv->name;
    case IFB_Q8_GEMM: return t->q8_gemm->name;
    case IFB_Q4_GEMV: return (t->q4_gemv ? t->q4_gemv : s->q4_gemv)->name;
    case IFB_Q4_GEMM: return (t->q4_gemm ? t->q4_gemm : s->q4_gemm)->name;
    case IFB_Q4K_GEMV:
    case IFB_Q5K_GEMV:
    case IFB_Q40_GEMV:
    case IFB_Q41_GEMV:
    case IFB_Q50_GEMV:
    case IFB_Q51_GEMV:
    case IFB_IQ4NL_GEMV:
    case IFB_IQ4XS_GEMV:
    case IFB_Q80_GEMV:
    case IFB_Q6K_GEMV: return kq_gemv_of(c, t)->name;
    case IFB_Q4K_GEMM:
    case IFB_Q5K_GEMM:
    case IFB_Q40_GEMM:
    case IFB_Q41_GEMM:
    case IFB_Q50_GEMM:
    case IFB_Q51_GEMM:
    case IFB_Q6K_GEMM:
    case IFB_Q80_GEMM: return kq_gemm_of(c, t)->name;
    default: return t->quantize->name;
    }
}

if_status ifb_check(ifb_case *c, const if_kernel_table *t, char *err, size_t errlen) {
    const if_kernel_table *ref = if_tier_table(0);
    if (!t || !ref) {
        snprintf(err, errlen, "no kernel table");
        return IF_EINVAL;
    }
    if_status st = ensure_packed(c, ref, err, errlen);
    if (st == IF_OK) st = ensure_packed(c, t, err, errlen);
    if (st != IF_OK) return st;
    size_t G = c->K / c->gs;
    if (c->op == IFB_QUANTIZE) {
        memset(c->q, 0x55, c->M * c->K);
        memset(c->s, 0x55, c->M * G * sizeof(float));
        call_once(c, ref, 0, NULL, c->qref, c->sref);
        call_once(c, t, 0, NULL, c->q, c->s);
        for (size_t i = 0; i < c->M * c->K; i++)
            if (c->q[i] != c->qref[i]) {
                snprintf(err, errlen, "%s: quantize q[%zu] = %d, scalar %d", t->quantize->name, i,
                         c->q[i], c->qref[i]);
                return IF_EINVAL;
            }
        if (memcmp(c->s, c->sref, c->M * G * sizeof(float)) != 0) {
            snprintf(err, errlen, "%s: quantize scales differ from scalar", t->quantize->name);
            return IF_EINVAL;
        }
        return IF_OK;
    }
    size_t n = c->M * c->N;
    memset(c->out, 0x55, n * sizeof(float));
    call_once(c, ref, 0, c->ref, NULL, NULL);
    call_once(c, t, 0, c->out, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &c->out[i], 4);
        memcpy(&b, &c->ref[i], 4);
        if (a != b) {
            snprintf(err, errlen, "%s: out[%zu, %zu] = %.9g, scalar %.9g (bits differ)",
                     kernel_name(c, t), i / c->N,
                     i % c->N, (double)c->out[i], (double)c->ref[i]);
            return IF_EINVAL;
        }
    }
    return IF_OK;
}

if_status ifb_time(ifb_case *c, const if_kernel_table *t, size_t iters, double *seconds,
                   char *err, size_t errlen) {
    if (!t || iters == 0) {
        snprintf(err, errlen, "need a kernel table and iters >= 1");
        return IF_EINVAL;
    }
    if_status st = ensure_packed(c, t, err, errlen);
    if (st != IF_OK) return st;
    double t0 = ifb_now();
    for (size_t k = 0; k < iters; k++) {
        call_once(c, t, c->next, c->out, c->q, c->s);
        if (++c->next == c->copies) c->next = 0;
    }
    *seconds = ifb_now() - t0;
    return IF_OK;
}

/* ---- the deliberately broken tables (tests of the gate) ---- */

static void broken_gemv(float *out, const int8_t *xq, const float *xs, const int8_t *w,
                        const float *ws, size_t n0, size_t n1, size_t K, size_t gs) {
    if_tier_table(0)->q8_gemv->run(out, xq, xs, w, ws, n0, n1, K, gs);
    if (n1 > n0) out[n1 - 1] = nextafterf(out[n1 - 1], INFINITY);
}

static void broken_gemm(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                        const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                        size_t gs) {
    if_tier_table(0)->q8_gemm->run(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
    if (M && n1 > n0) out[(M - 1) * ldo + n1 - 1] = nextafterf(out[(M - 1) * ldo + n1 - 1], 0.0f);
}

static void broken_quantize(int8_t *q, float *s, const float *x, size_t K, size_t gs) {
    if_tier_table(0)->quantize->run(q, s, x, K, gs);
    if (K) q[K - 1] = (int8_t)(q[K - 1] == 127 ? 126 : q[K - 1] + 1);
}

static void broken_f32_gemv(float *out, const float *x, const float *w, size_t n0, size_t n1,
                            size_t K) {
    if_tier_table(0)->f32_gemv->run(out, x, w, n0, n1, K);
    if (n1 > n0) out[n0] = nextafterf(out[n0], INFINITY);
}

static void broken_q4_gemv(float *out, const int8_t *xq, const float *xs, const uint8_t *w,
                           const float *ws, const int8_t *cb, size_t n0, size_t n1, size_t K,
                           size_t gs) {
    if_tier_table(0)->q4_gemv->run(out, xq, xs, w, ws, cb, n0, n1, K, gs);
    if (n1 > n0) out[n0] = nextafterf(out[n0], INFINITY);
}

static void broken_q4_gemm(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                           const uint8_t *w, const float *ws, const int8_t *cb, size_t n0,
                           size_t n1, size_t K, size_t gs) {
    if_tier_table(0)->q4_gemm->run(out, ldo, xq, xs, M, w, ws, cb, n0, n1, K, gs);
    if (M && n1 > n0) out[(M - 1) * ldo + n0] = nextafterf(out[(M - 1) * ldo + n0], 0.0f);
}

static const if_q4_gemv_kernel k_broken_q4_gemv = {
    .name = "q4_gemv_1x1_broken", .mr = 1, .nr = 1, .run = broken_q4_gemv};
static const if_q4_gemm_kernel k_broken_q4_gemm = {
    .name = "q4_gemm_1x1_broken", .mr = 1, .nr = 1, .run = broken_q4_gemm};

static const if_q8_gemv_kernel k_broken_gemv = {
    .name = "q8_gemv_1x1_broken", .mr = 1, .nr = 1, .run = broken_gemv};
static const if_q8_gemm_kernel k_broken_gemm = {
    .name = "q8_gemm_1x1_broken", .mr = 1, .nr = 1, .run = broken_gemm};
static const if_quantize_kernel k_broken_quantize = {
    .name = "q8_quantize_1x1_broken", .mr = 1, .nr = 1, .run = broken_quantize};
static const if_f32_gemv_kernel k_broken_f32_gemv = {
    .name = "f32_gemv_1x1_broken", .mr = 1, .nr = 1, .run = broken_f32_gemv};

/* A GEMM whose run is right for its declared layout (the row-major rows, copied) and whose
 * pack is wrong: it swaps rows 0 and 1 of every 4 (the kind of slip a new packed layout makes),
 * so only its packed weights disagree with scalar. */
static size_t badpack_size(size_t N, size_t K, size_t gs) {
    (void)gs;
    return N * K;
}

static void badpack_pack(int8_t *dst, const int8_t *w, size_t N, size_t K, size_t gs) {
    (void)gs;
    for (size_t n = 0; n < N; n++) {
        size_t src = (n % 4 == 0 && n + 1 < N) ? n + 1 : (n % 4 == 1) ? n - 1 : n;
        memcpy(dst + n * K, w + src * K, K);
    }
}

static void badpack_run(float *out, size_t ldo, const int8_t *xq, const float *xs, size_t M,
                        const int8_t *w, const float *ws, size_t n0, size_t n1, size_t K,
                        size_t gs) {
    if_tier_table(0)->q8_gemm->run(out, ldo, xq, xs, M, w, ws, n0, n1, K, gs);
}

static const if_q8_gemm_kernel k_badpack_gemm = {.name = "q8_gemm_1x4_badpack", .mr = 1,
    .nr = 4, .pack_size = badpack_size, .pack = badpack_pack, .run = badpack_run};

static const if_kernel_table g_broken = {.tier = "broken", .q8_gemv = &k_broken_gemv,
    .q8_gemm = &k_broken_gemm, .quantize = &k_broken_quantize, .f32_gemv = &k_broken_f32_gemv,
    .q4_gemv = &k_broken_q4_gemv, .q4_gemm = &k_broken_q4_gemm,
    .attn = &if_k_f32_attn_16x64_scalar, .attn_i8 = &if_k_f32_attn_16x64_scalar,
    .swiglu = &if_k_f32_swiglu_1x1_scalar, .geglu = &if_k_f32_geglu_1x1_scalar};

/* The scalar tier with the wrongly packing GEMM. */
static const if_kernel_table g_broken_pack = {.tier = "broken_pack",
    .q8_gemv = &if_k_q8_gemv_1x1_scalar, .q8_gemm = &k_badpack_gemm,
    .quantize = &if_k_q8_quantize_1x1_scalar, .f32_gemv = &if_k_f32_gemv_1x1_scalar,
    .attn = &if_k_f32_attn_16x64_scalar, .attn_i8 = &if_k_f32_attn_16x64_scalar,
    .swiglu = &if_k_f32_swiglu_1x1_scalar, .geglu = &if_k_f32_geglu_1x1_scalar};

#if defined(IF_X86_TIERS)
/* The AMX packed layout and attention with tile ops emulated in C (runs on any x86 CPU). */
#define AMX_EMULATED_KERNELS                                                               \
    .tier = "amx_emulated", .q8_gemv = &if_k_q8_gemv_1x1_scalar,                           \
    .q8_gemm = &if_k_q8_gemm_16x16_amx_emulated, .quantize = &if_k_q8_quantize_1x1_scalar,  \
    .f32_gemv = &if_k_f32_gemv_1x1_scalar, .attn = &if_k_f32_attn_16x64_scalar,            \
    .attn_i8 = &if_k_i8_attn_16x64_amx_emulated, .swiglu = &if_k_f32_swiglu_1x1_scalar,    \
    .geglu = &if_k_f32_geglu_1x1_scalar, .q4_gemv = &if_k_q4_gemv_1x1_scalar,             \
    .q4_gemm = &if_k_q4_gemm_16x16_amx_emulated
static const if_kernel_table g_amx_emulated = {AMX_EMULATED_KERNELS};
/* Plus the AMX K-quant GEMMs, whose expansion and readout are AVX-512 code: the table with
 * them only on a CPU with all their `requires` (elsewhere the K-quant ops run scalar). */
static const if_kernel_table g_amx_emulated_kq = {AMX_EMULATED_KERNELS,
    .q4k_gemm = &if_k_q4k_gemm_16x16_amx_emulated, .q5k_gemm = &if_k_q5k_gemm_16x16_amx_emulated,
    .q6k_gemm = &if_k_q6k_gemm_16x16_amx_emulated,
    .q4kx16_gemv = &if_k_q4kx16_gemv_1x16_avx512_vnni,
    .q4kx16_gemm = &if_k_q4kx16_gemm_16x16_amx_emulated,
    .q6kx16_gemv = &if_k_q6kx16_gemv_1x16_avx512_vnni,
    .q6kx16_gemm = &if_k_q6kx16_gemm_16x16_amx_emulated};

static const if_kernel_table *amx_emulated_table(void) {
    uint32_t have = 0;
    char err[128];
    if (if_features_mask(if_cpu_features(), &have, err, sizeof err) != IF_OK) have = 0;
    return (if_table_requires(&g_amx_emulated_kq) & ~have) ? &g_amx_emulated : &g_amx_emulated_kq;
}
#endif

const if_kernel_table *ifb_test_table(const char *name) {
    if (!name) return NULL;
#if defined(IF_X86_TIERS)
    if (strcmp(name, "amx_emulated") == 0) return amx_emulated_table();
#endif
    if (strcmp(name, "broken") == 0) return &g_broken;
    if (strcmp(name, "broken_pack") == 0) return &g_broken_pack;
    return NULL;
}
