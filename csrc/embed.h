/* embed.h - the token-table lookup (internal): rows of an F32, Q8 or Q4 table dequantized on
 * lookup, each distinct token of a chunk once. */
#ifndef ISAFORGE_EMBED_H
#define ISAFORGE_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "isaforge.h"

typedef struct if_embed {
    if_matrix t;          /* the table (F32, Q8 or Q4), (vocab, dim) */
    size_t dim;
    float scale;          /* embed_scale, 0: none */
    /* a tied Q8 table read from the classifier's packed copy (NULL: t's row-major data) */
    const int8_t *packed;
    size_t nr, tile_bytes;
    if_q8_unpack_fn unpack;
    /* a tied 4-bit table read from the classifier's packed copy (NULL: t's row-major nibbles) */
    const uint8_t *packed4;
    size_t nr4, tile4_bytes;
    if_q4_unpack_fn unpack4;
    uint8_t *tile4;       /* (nr4, kpad / 2) one unpacked tile of nibbles */
    /* scratch */
    float *v;             /* (3, kpad) a 4-bit row's values, their transform, +1 signs */
    int8_t *tile;         /* (nr, dim) one unpacked tile */
    uint8_t *rowb;        /* an in-place table's row bytes, gathered from its row groups */
    int32_t *hkey;        /* (nh) de-duplication hash of a chunk's tokens (-1: empty) */
    size_t *hrow;         /* (nh) the first row holding each */
    size_t nh;            /* a power of two >= 2 * ub */
} if_embed;

/* The table of w as a matrix: w->tok, or tok_embeddings as an F32 one. */
if_matrix if_embed_table(const if_weights *w, size_t vocab, size_t dim);
/* q8_gs of if_matrix_check for a token table. */
#define IF_ANY_GROUP ((size_t)-1)
/* 1 if w is a valid (rows, cols) matrix, else 0 with a reason naming it (name) in err. q8_gs:
 * the model's Q8 group size, which a Q8 matrix must have (0: an fp32 model, the only kind an
 * fp32 matrix may be in), or IF_ANY_GROUP for a token table (rows only looked up): fp32, Q8 at
 * any group dividing cols, or 4-bit with any codebook. The one checker of a model's matrices
 * (csrc/model.c) and of the table. */
int if_matrix_check(const if_matrix *w, size_t rows, size_t cols, size_t q8_gs,
                    const char *name, char *err, size_t errlen);
/* Set up the lookup of a checked table for chunks of up to ub rows (tile_rows: the rows of one
 * tile of the packed layout a tied Q8 table may be read from later). 0: out of memory. */
int if_embed_init(if_embed *e, const if_matrix *t, float scale, size_t ub, size_t tile_rows);
/* Read Q8 rows from a packed copy (kernel k's layout, k->nr <= tile_rows) instead of t's
 * row-major int8. */
void if_embed_use_packed(if_embed *e, const if_q8_gemm_kernel *k, const int8_t *packed);
/* Read 4-bit rows from a packed copy (kernel k's tile-major layout) instead of t's row-major
 * nibbles. 0: out of memory (the lookup then still reads t's nibbles). */
int if_embed_use_packed_q4(if_embed *e, const if_q4_gemm_kernel *k, const uint8_t *packed);
/* x (M, dim) = rows tokens[0..M) (checked in range), times scale when non-zero. A token seen
 * earlier in the chunk is copied from its first row. */
void if_embed_rows(if_embed *e, float *x, const int32_t *tokens, size_t M);
void if_embed_free(if_embed *e);

#endif
