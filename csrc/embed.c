/* embed.c - the token-table lookup: the table stays as stored (F32, Q8, 4-bit or in-place
 * K-quant), each looked-up row is dequantized by plain scalar code shared by every tier, so the
 * embedded rows do not depend on the kernels, threads, chunking or batching. */
#include "embed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define ERR(...)                                               \
    do {                                                       \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
    } while (0)

if_matrix if_embed_table(const if_weights *w, size_t vocab, size_t dim) {
    if (!w->tok_embeddings) return w->tok;
    if_matrix t = {.dtype = IF_F32, .rows = vocab, .cols = dim, .f32 = w->tok_embeddings};
    return t;
}

/* An in-place K-quant matrix (IF_KQ): a type with kernels, whole blocks (256 values, 32 for the
 * legacy types) per row, and
 * exactly the file's bytes of that shape (the kernels read every block without bounds). */
static int kq_check(const if_matrix *w, size_t rows, size_t cols, const char *name, char *err,
                    size_t errlen) {
    const int t = w->ggml_type;
    const int legacy = t == IF_GGML_Q4_0 || t == IF_GGML_Q4_1 || t == IF_GGML_Q5_0 ||
                       t == IF_GGML_Q5_1 || t == IF_GGML_Q8_0 || t == IF_GGML_IQ4_NL;
    if (t != IF_GGML_Q4_K && t != IF_GGML_Q5_K && t != IF_GGML_Q6_K && !legacy &&
        t != IF_GGML_IQ4_XS) {
        const char *tn = if_ggml_type_name(t);
        ERR("%s: GGML type %d (%s) cannot run in place (only Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
            "IQ4_NL, Q4_K, Q5_K, Q6_K and IQ4_XS have kernels)", name, t, tn ? tn : "unknown");
        return 0;
    }
    const size_t qb = legacy ? IF_QL : IF_QK;
    if (cols % qb) {
        ERR("%s: %zu columns is not a multiple of the %s block of %zu values", name, cols,
            if_ggml_type_name(t), qb);
        return 0;
    }
    if (!w->raw) {
        ERR("%s: %s matrix without data", name, if_ggml_type_name(t));
        return 0;
    }
    const size_t need = if_ggml_bytes(t, rows, cols);
    if (w->raw_bytes != need) {
        ERR("%s: a (%zu, %zu) %s matrix is %zu bytes, got %zu", name, rows, cols,
            if_ggml_type_name(t), need, w->raw_bytes);
        return 0;
    }
    return 1;
}

int if_matrix_check(const if_matrix *w, size_t rows, size_t cols, size_t q8_gs,
                    const char *name, char *err, size_t errlen) {
    const int table = q8_gs == IF_ANY_GROUP;
    if (w->rows != rows || w->cols != cols) {
        ERR("%s has shape (%zu, %zu), expected (%zu, %zu)", name, w->rows, w->cols, rows, cols);
        return 0;
    }
    if (w->dtype == IF_F32) {
        if ((!table && q8_gs != 0) || !w->f32) {
            ERR("%s: fp32 matrix %s", name, w->f32 ? "in a Q8 model" : "without data");
            return 0;
        }
    } else if (w->dtype == IF_Q8) {
        const size_t g = w->group_size;
        if (g == 0 || (!table && g != q8_gs) || cols % g != 0) {
            if (table)
                ERR("%s: Q8 group size %zu invalid for %zu columns", name, g, cols);
            else
                ERR("%s: Q8 group size %zu invalid for %zu columns (model group size %zu)", name,
                    g, cols, q8_gs);
            return 0;
        }
        if (!w->q || !w->s) {
            ERR("%s: Q8 matrix without data or scales", name);
            return 0;
        }
    } else if (w->dtype == IF_Q4) {
        const size_t g = w->group_size, kp = w->kpad;
        if (g == 0 || g % 32 || kp % g || kp < cols || kp - cols >= g) {
            ERR("%s: 4-bit group size %zu and padded length %zu invalid for %zu columns (the "
                "group size must be a multiple of 32 dividing the padded length, padding less "
                "than one group)", name, g, kp, cols);
            return 0;
        }
        if (w->signs && (g & (g - 1))) {
            ERR("%s: rotation needs a power-of-two group size, got %zu", name, g);
            return 0;
        }
        if (!w->q4 || !w->s || !w->codebook) {
            ERR("%s: 4-bit matrix without data, scales or codebook", name);
            return 0;
        }
        for (int i = 0; i < 16 && !table; i++)
            if (w->codebook[i] == -128) {
                ERR("%s: codebook entry %d is -128 (the kernels need [-127, 127])", name, i);
                return 0;
            }
    } else if (w->dtype == IF_GGML) { /* converted to Q8 at group 32 when the model is made */
        const char *type = if_ggml_type_name(w->ggml_type);
        if (table) {
            ERR("%s: a GGUF tensor's bytes cannot be a token table", name);
            return 0;
        }
        if (!type || cols % 32 || q8_gs != 32) {
            ERR("%s: GGML type %d cannot be converted to Q8 at group 32 in a model of group "
                "size %zu", name, w->ggml_type, q8_gs);
            return 0;
        }
        const size_t need = if_ggml_bytes(w->ggml_type, rows, cols);
        if (!w->raw || !need || w->raw_bytes != need) {
            ERR("%s: %s tensor of (%zu, %zu) takes %zu bytes, got %zu", name, type, rows, cols,
                need, w->raw ? w->raw_bytes : 0);
            return 0;
        }
    } else if (w->dtype == IF_KQ) {
        return kq_check(w, rows, cols, name, err, errlen);
    } else {
        ERR("%s: unknown dtype %d", name, (int)w->dtype);
        return 0;
    }
    return 1;
}

int if_embed_init(if_embed *e, const if_matrix *t, float scale, size_t ub, size_t tile_rows) {
    memset(e, 0, sizeof *e);
    e->t = *t;
    e->dim = t->cols;
    e->scale = scale;
    for (e->nh = 16; e->nh < 2 * ub; e->nh *= 2) {}
    e->hkey = malloc(e->nh * sizeof *e->hkey);
    e->hrow = malloc(e->nh * sizeof *e->hrow);
    if (t->dtype == IF_Q4) e->v = malloc(3 * t->kpad * sizeof(float));
    if (e->v) /* v, the transform, and +1 signs (the kernel's H (signs * v) is then H v) */
        for (size_t i = 0; i < t->kpad; i++) e->v[2 * t->kpad + i] = 1.0f;
    if (t->dtype == IF_Q8) {
        e->nr = tile_rows ? tile_rows : 1;
        e->tile = malloc(e->nr * e->dim);
    }
    if (t->dtype == IF_KQ) e->rowb = malloc(t->raw_bytes / t->rows);
    return e->hkey && e->hrow && (t->dtype != IF_Q4 || e->v) && (t->dtype != IF_Q8 || e->tile) &&
           (t->dtype != IF_KQ || e->rowb);
}

void if_embed_use_packed(if_embed *e, const if_q8_gemm_kernel *k, const int8_t *packed) {
    if (e->t.dtype != IF_Q8 || !packed || !k->unpack || !k->pack_size || k->nr > e->nr) return;
    e->packed = packed;
    e->nr = k->nr;
    e->tile_bytes = k->pack_size(k->nr, e->dim, e->t.group_size);
    e->unpack = k->unpack;
}

int if_embed_use_packed_q4(if_embed *e, const if_q4_gemm_kernel *k, const uint8_t *packed) {
    if (e->t.dtype != IF_Q4 || !packed || !k->unpack || !k->pack_size) return 1;
    const size_t kp = e->t.kpad;
    e->tile4 = malloc(k->nr * (kp / 2));
    if (!e->tile4) return 0;
    e->packed4 = packed;
    e->nr4 = k->nr;
    e->tile4_bytes = k->pack_size(k->nr, kp, e->t.group_size);
    e->unpack4 = k->unpack;
    return 1;
}

/* One row, dequantized: the only arithmetic of the lookup. */
static void row(if_embed *e, float *x, size_t tok) {
    const if_matrix *t = &e->t;
    const size_t dim = e->dim;
    if (t->dtype == IF_F32) {
        memcpy(x, t->f32 + tok * dim, dim * sizeof(float));
    } else if (t->dtype == IF_Q8) {
        const size_t gs = t->group_size;
        const int8_t *q = t->q + tok * dim;
        if (e->packed) { /* the tile holding the row, unpacked */
            const size_t tile = tok / e->nr, n = t->rows - tile * e->nr;
            e->unpack(e->tile, e->packed + tile * e->tile_bytes, n < e->nr ? n : e->nr, dim, gs);
            q = e->tile + (tok % e->nr) * dim;
        }
        const float *s = t->s + tok * (dim / gs);
        for (size_t i = 0; i < dim; i++) x[i] = (float)q[i] * s[i / gs];
    } else if (t->dtype == IF_KQ) { /* the file's blocks, as ggml dequantizes them */
        const size_t row_bytes = t->raw_bytes / t->rows;
        const uint8_t *b = (const uint8_t *)t->raw + tok * row_bytes;
        if (t->group_rows) { /* the weight arena's row groups: the row's bytes gathered */
            if_group_row(e->rowb, t->raw, t->ggml_type, t->group_rows, tok, dim);
            b = e->rowb;
        }
        if_ggml_dequant_row(t->ggml_type, b, dim, x);
    } else { /* 4-bit: per block of 32, byte j holds value j (low nibble) and j + 16 (high) */
        const size_t kp = t->kpad, gs = t->group_size;
        const uint8_t *w = t->q4 + tok * (kp / 2);
        if (e->packed4) { /* the tile holding the row, unpacked (the nibbles as they were) */
            const size_t tile = tok / e->nr4, n = t->rows - tile * e->nr4;
            e->unpack4(e->tile4, e->packed4 + tile * e->tile4_bytes, n < e->nr4 ? n : e->nr4,
                       kp, gs);
            w = e->tile4 + (tok % e->nr4) * (kp / 2);
        }
        const float *s = t->s + tok * (kp / gs);
        float *v = t->signs ? e->v : x, *h = e->v + kp;
        for (size_t b = 0; b < kp / 32 && (t->signs || 32 * b < dim); b++)
            for (size_t j = 0; j < 32; j++) {
                const size_t k = 32 * b + j;
                const uint8_t byte = w[16 * b + j % 16];
                const float c = (float)t->codebook[j < 16 ? byte & 15 : byte >> 4];
                if (t->signs || k < dim) v[k] = c * s[k / gs];
            }
        if (t->signs) { /* un-rotate: x = signs * H v (H symmetric, H H = gs I) */
            if_k_f32_hadamard_1x1_scalar.run(h, v, e->v + 2 * kp, kp, kp, gs);
            for (size_t i = 0; i < dim; i++) x[i] = h[i] * t->signs[i];
        }
    }
}

void if_embed_rows(if_embed *e, float *x, const int32_t *tokens, size_t M) {
    const size_t dim = e->dim, mask = e->nh - 1;
    for (size_t i = 0; i < e->nh; i++) e->hkey[i] = -1;
    for (size_t r = 0; r < M; r++) {
        if (r < e->nh / 2) { /* beyond what the table was sized for: no de-duplication */
            size_t h = ((uint32_t)tokens[r] * 2654435761u) & mask;
            while (e->hkey[h] >= 0 && e->hkey[h] != tokens[r]) h = (h + 1) & mask;
            if (e->hkey[h] == tokens[r]) {
                memcpy(x + r * dim, x + e->hrow[h] * dim, dim * sizeof(float));
                continue;
            }
            e->hkey[h] = tokens[r];
            e->hrow[h] = r;
        }
        row(e, x + r * dim, (size_t)tokens[r]);
        if (e->scale != 0.0f)
            for (size_t i = 0; i < dim; i++) x[r * dim + i] *= e->scale;
    }
}

void if_embed_free(if_embed *e) {
    free(e->v);
    free(e->tile);
    free(e->tile4);
    free(e->rowb);
    free(e->hkey);
    free(e->hrow);
    memset(e, 0, sizeof *e);
}
