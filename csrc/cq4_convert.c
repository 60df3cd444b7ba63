/* cq4_convert.c - CQ4 quantization of a matrix (the "norm" scale rule), row by row.
 *
 * The reference is isaforge.quant.cq4.quantize_cq4_reference (numpy, float64); this file
 * repeats its arithmetic operation for operation so the nibbles and scales are the same bits:
 * the float32 row widened to double and multiplied by its +-1 sign, the Walsh-Hadamard
 * butterflies in the reference's order (stage h = 1, 2, 4, ...: a + b, a - b), a division by
 * sqrt(gs), the group's squared norm summed in numpy's pairwise order (eight running sums over
 * the group, combined ((0+1)+(2+3))+((4+5)+(6+7)), then the remainder: the order numpy's add
 * reduction takes over a contiguous group of at most 128), each value divided by
 * norm * step and given as index the number of codebook midpoints below it (numpy's
 * searchsorted, side left), and the scale norm * step (/ sqrt(gs) when rotated) rounded once
 * to float32. The build passes -ffp-contract=off, so no product is fused into a sum. A row
 * whose length is not a multiple of the group size (its padded groups are assigned by error
 * feedback) is the reference's job, not this file's. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isaforge.h"

typedef struct cq4_job {
    int type; /* a GGML type id, or -1: float32 rows */
    const void *src;
    size_t cols, gs;
    const float *signs;
    double mid[15], step, root;
    uint8_t *nibbles;
    float *scales;
    atomic_size_t first_bad; /* lowest row holding NaN or infinity (SIZE_MAX: none) */
    atomic_int nomem;
} cq4_job;

/* numpy's pairwise sum of n <= 128 doubles (its reduction's inner loop, n >= 8 here). */
static double pairwise_sum(const double *a, size_t n) {
    if (n < 8) {
        double res = 0.;
        for (size_t i = 0; i < n; i++) res += a[i];
        return res;
    }
    double r[8];
    memcpy(r, a, sizeof r);
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
        for (size_t k = 0; k < 8; k++) r[k] += a[i + k];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++) res += a[i];
    return res;
}

static void note_bad(cq4_job *j, size_t row) {
    size_t cur = atomic_load(&j->first_bad);
    while (row < cur && !atomic_compare_exchange_weak(&j->first_bad, &cur, row)) {
    }
}

static void cq4_rows(void *ctx, size_t t0, size_t t1, size_t tid) {
    (void)tid;
    cq4_job *j = ctx;
    const size_t cols = j->cols, gs = j->gs, ng = cols / gs;
    float *w = malloc(cols * sizeof *w);
    double *x = malloc(cols * sizeof *x), sq[128];
    uint8_t *idx = malloc(cols);
    if (!w || !x || !idx) {
        atomic_store(&j->nomem, 1);
        free(w);
        free(x);
        free(idx);
        return;
    }
    /* 1 / root when that is exact (a power of two: x / root and x * (1 / root) are the same
     * correctly rounded quotient), else the division itself */
    const double inv = j->root == 8.0 ? 0.125 : 0.0;
    double u[128];
    for (size_t r = t0; r < t1; r++) {
        if (j->type < 0)
            memcpy(w, (const float *)j->src + r * cols, cols * sizeof *w);
        else
            if_ggml_row_f32(j->type, j->src, cols, r, w);
        int finite = 1;
        for (size_t i = 0; i < cols; i++) finite &= isfinite(w[i]) != 0;
        if (!finite) {
            note_bad(j, r);
            continue;
        }
        if (j->signs) {
            for (size_t i = 0; i < cols; i++) x[i] = (double)w[i] * (double)j->signs[i];
            for (size_t g0 = 0; g0 < cols; g0 += gs)
                for (size_t h = 1; h < gs; h *= 2)
                    for (size_t b = g0; b < g0 + gs; b += 2 * h)
                        for (size_t i = b; i < b + h; i++) {
                            const double a = x[i], c = x[i + h];
                            x[i] = a + c;
                            x[i + h] = a - c;
                        }
            if (inv != 0.0)
                for (size_t i = 0; i < cols; i++) x[i] = x[i] * inv;
            else
                for (size_t i = 0; i < cols; i++) x[i] = x[i] / j->root;
        } else {
            for (size_t i = 0; i < cols; i++) x[i] = (double)w[i];
        }
        for (size_t g = 0; g < ng; g++) {
            const double *v = x + g * gs;
            for (size_t i = 0; i < gs; i++) sq[i] = v[i] * v[i];
            const double norm = sqrt(pairwise_sum(sq, gs));
            const double den = (norm > 0 ? norm : 1.0) * j->step;
            /* the index is the count of midpoints below u (they ascend): a branch-free binary
             * search, four comparisons instead of fifteen */
            for (size_t i = 0; i < gs; i++) u[i] = v[i] / den;
            for (size_t i = 0; i < gs; i++) {
                unsigned k = j->mid[7] < u[i] ? 8u : 0u;
                k += j->mid[k + 3] < u[i] ? 4u : 0u;
                k += j->mid[k + 1] < u[i] ? 2u : 0u;
                k += j->mid[k] < u[i] ? 1u : 0u;
                idx[g * gs + i] = (uint8_t)k;
            }
            const double alpha = norm * j->step;
            j->scales[r * ng + g] = (float)(j->signs ? alpha / j->root : alpha);
        }
        uint8_t *out = j->nibbles + r * (cols / 2);
        for (size_t b = 0; b < cols; b += 32)
            for (size_t i = 0; i < 16; i++)
                out[b / 2 + i] = (uint8_t)(idx[b + i] | (idx[b + 16 + i] << 4));
    }
    free(w);
    free(x);
    free(idx);
}

if_status if_cq4_quantize(int type, const void *src, size_t src_bytes, size_t rows,
                          size_t cols, size_t gs, const float *signs, const int8_t codebook[16],
                          double step, uint8_t *nibbles, float *scales, if_pool *pool,
                          char *err, size_t errlen) {
#define FAIL(st, ...)                                          \
    do {                                                       \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return (st);                                           \
    } while (0)
    if (gs != 32 && gs != 64 && gs != 128) FAIL(IF_EINVAL, "CQ4 group size %zu is not 32, 64 "
                                                 "or 128", gs);
    if (!rows || !cols || cols % gs || cols % 32)
        FAIL(IF_EINVAL, "CQ4 of %zu x %zu values: the row length must be a nonzero multiple of "
             "the group size %zu and of 32", rows, cols, gs);
    if (rows > SIZE_MAX / cols / sizeof(float))
        FAIL(IF_EINVAL, "CQ4 of %zu x %zu values: size overflows", rows, cols);
    const size_t need = type < 0 ? rows * cols * sizeof(float) : if_ggml_bytes(type, rows, cols);
    if (!need) FAIL(IF_EINVAL, "ggml type %d with rows of %zu is not supported", type, cols);
    if (src_bytes != need)
        FAIL(IF_EINVAL, "%s tensor of %zu x %zu values takes %zu bytes, got %zu",
             type < 0 ? "float32" : if_ggml_type_name(type), rows, cols, need, src_bytes);
    if (!src || !codebook || !nibbles || !scales) FAIL(IF_EINVAL, "NULL source or destination");
    for (unsigned i = 0; i < 15; i++)
        if (codebook[i] >= codebook[i + 1]) FAIL(IF_EINVAL, "the codebook is not ascending");
    if (!(step > 0) || !isfinite(step)) FAIL(IF_EINVAL, "codebook step %g is not positive", step);
    cq4_job j = {.type = type, .src = src, .cols = cols, .gs = gs, .signs = signs,
                 .step = step, .root = sqrt((double)gs), .nibbles = nibbles, .scales = scales};
    for (unsigned i = 0; i < 15; i++) j.mid[i] = ((double)codebook[i + 1] + codebook[i]) / 2;
    atomic_init(&j.first_bad, SIZE_MAX);
    atomic_init(&j.nomem, 0);
    if_pool_parallel_for(pool, rows, 1 + 16384 / cols, cq4_rows, &j);
    if (atomic_load(&j.nomem)) FAIL(IF_ENOMEM, "out of memory for a %zu-value row", cols);
    const size_t bad = atomic_load(&j.first_bad);
    if (bad != SIZE_MAX) FAIL(IF_EINVAL, "row %zu holds NaN or infinity", bad);
    return IF_OK;
#undef FAIL
}
