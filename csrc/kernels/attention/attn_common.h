/* attn_common.h - what every attention kernel shares (internal, static inline so each kernel
 * file compiles it with its own flags): which keys of a block a query row sees, where they sit
 * in the row's scores, and reading cached keys/values back as float32 (exact conversions, so
 * every tier sees the same floats).
 *
 * Tiling: a kernel call covers query rows [r0, r1) and query heads [h0, h1). Rows go in tiles
 * of IF_ATTN_Q_TILE, heads by kv group (the heads sharing one kv head), so one key block is
 * converted once and used by every row and head of the tile (GQA sharing). Key blocks are
 * IF_ATTN_KEY_BLOCK absolute positions [b*B, (b+1)*B). The fp32 kernels keep one row of
 * scores per (row, head) of a tile, indexed by the key's ordinal among the keys that row sees
 * (attn_row_keys), and compute every output exactly as run.c does, whatever the tiling or
 * the chunking. */
#ifndef ISAFORGE_ATTN_COMMON_H
#define ISAFORGE_ATTN_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "isaforge.h"

/* Keys of block [bs, be) visible to the query at position p, as two ordered, disjoint
 * half-open intervals iv[0..1] and iv[2..3] (either may be empty): the sinks, then the window
 * (or, without a window, everything up to p). Returns the number of visible keys. */
static inline size_t attn_visible(const if_attn_job *j, size_t p, size_t bs, size_t be,
                                  size_t iv[4]) {
    size_t end = be < p + 1 ? be : p + 1; /* causal */
    if (j->window == 0) {
        iv[0] = iv[1] = bs;
        iv[2] = bs;
        iv[3] = end > bs ? end : bs;
    } else {
        size_t ns = j->n_sinks;
        size_t s1 = end < ns ? end : ns;
        iv[0] = bs;
        iv[1] = s1 > bs ? s1 : bs;
        size_t w0 = p + 1 > j->window ? p + 1 - j->window : 0;
        if (w0 < ns) w0 = ns;
        if (w0 < bs) w0 = bs;
        iv[2] = w0;
        iv[3] = end > w0 ? end : w0;
    }
    return (iv[1] - iv[0]) + (iv[3] - iv[2]);
}

/* The keys visible to the query at position p, in order: the sinks t < *ns, then the window
 * t >= *w0 (without a window: *ns = *w0 = 0, every t <= p). Key t's ordinal, its place in the
 * row's scores, is t below *ns and *ns + t - *w0 from *w0 on. Returns how many keys (>= 1:
 * a query always sees itself), never more than the cache's slots (kv->cap). */
static inline size_t attn_row_keys(const if_attn_job *j, size_t p, size_t *ns, size_t *w0) {
    size_t iv[4];
    const size_t n = attn_visible(j, p, 0, p + 1, iv);
    *ns = iv[1];
    *w0 = iv[2];
    return n;
}

/* Scores per (row, head) row of a tile, padded to 16 floats (64 bytes). */
static inline size_t attn_score_ld(const if_attn_job *j) { return (j->kv->cap + 15) / 16 * 16; }

/* The span [*lo, *hi) of keys in block [bs, be) that any query row in [rt, re) of the job
 * sees (*lo >= *hi when none does): the keys a tile converts or packs for this block. */
static inline void attn_tile_span(const if_attn_job *j, size_t rt, size_t re, size_t bs,
                                  size_t be, size_t *lo, size_t *hi) {
    size_t iv[4];
    *lo = be;
    *hi = bs;
    for (size_t r = rt; r < re; r++) {
        if (!attn_visible(j, j->pos0 + r, bs, be, iv)) continue;
        size_t a = iv[1] > iv[0] ? iv[0] : iv[2], z = iv[3] > iv[2] ? iv[3] : iv[1];
        if (a < *lo) *lo = a;
        if (z > *hi) *hi = z;
    }
}

/* Start a tile's online softmax for n (row, head) pairs: running max -inf, running sum 0,
 * accumulator (n, hs) 0. */
static inline void attn_tile_start(float *ms, float *ls, float *acc, size_t n, size_t hs) {
    for (size_t i = 0; i < n; i++) {
        ms[i] = -INFINITY;
        ls[i] = 0.0f;
    }
    memset(acc, 0, n * hs * sizeof(float));
}

/* IEEE binary16 bits -> float32, exactly (subnormals, infinities and NaNs included). */
static inline float attn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, f = h & 0x3ffu, bits;
    if (e == 0x1f) {
        bits = sign | 0x7f800000u | (f << 13);
    } else if (e != 0) {
        bits = sign | ((e + 112u) << 23) | (f << 13);
    } else if (f == 0) {
        bits = sign;
    } else { /* subnormal: f * 2^-24, exact in float */
        float v = (float)f * (1.0f / 16777216.0f);
        memcpy(&bits, &v, sizeof bits);
        bits |= sign;
    }
    float out;
    memcpy(&out, &bits, sizeof out);
    return out;
}

/* The row in cache slot `slot` of kv head g of a cache's keys (which 0) or values (1), as
 * head_size floats in dst (or a pointer straight into the cache for float32 caches, when dst
 * may be ignored). */
static inline const float *attn_slot_row(const if_kv_layer *kv, int which, size_t slot,
                                         size_t g, size_t hs, float *dst) {
    const size_t off = slot * kv->kv_dim + g * hs;
    const void *base = which ? kv->v : kv->k;
    if (!which && kv->keys_t) { /* block-transposed float32 keys (if_kv_layer): gathered */
        const float *k = (const float *)base + if_kv_key_t_index(kv, slot, g * hs);
        for (size_t i = 0; i < hs; i++) dst[i] = k[i * IF_ATTN_KEY_BLOCK];
        return dst;
    }
    if (kv->type == IF_KV_F32) return (const float *)base + off;
    if (kv->type == IF_KV_F16) {
        const uint16_t *h = (const uint16_t *)base + off;
        for (size_t i = 0; i < hs; i++) dst[i] = attn_f16_to_f32(h[i]);
        return dst;
    }
    const int8_t *q = (const int8_t *)base + off;
    const float *s = (which ? kv->vs : kv->ks) + off / kv->group;
    for (size_t i = 0; i < hs; i++) dst[i] = (float)q[i] * s[i / kv->group];
    return dst;
}

/* Row `pos` of kv head g (attn_slot_row at the position's slot). */
static inline const float *attn_row(const if_kv_layer *kv, int which, size_t pos, size_t g,
                                    size_t hs, float *dst) {
    return attn_slot_row(kv, which, if_kv_slot(kv, pos), g, hs, dst);
}

/* Rows of positions [lo, hi) of kv head g as rows[t - lo] (attn_row, converted into
 * buf + (t - lo) * hs), the slots stepped along (if_kv_slot once: position t + 1 sits in the
 * next slot, the first one past the sinks after the last). */
static inline void attn_rows(const if_kv_layer *kv, int which, size_t lo, size_t hi, size_t g,
                             size_t hs, float *buf, const float **rows) {
    if (lo >= hi) return;
    for (size_t t = lo, slot = if_kv_slot(kv, lo); t < hi; t++) {
        rows[t - lo] = attn_slot_row(kv, which, slot, g, hs, buf + (t - lo) * hs);
        slot = slot + 1 == kv->cap ? kv->n_sinks : slot + 1;
    }
}

/* The rows of block [bs, bs + IF_ATTN_KEY_BLOCK) that any query row in [rt, re) of the job
 * sees: keys (which 0) or values (1) of kv head g as rows[t - bs], converted into buf
 * ((block, head_size) floats) or pointing into a float32 cache. Returns 0 (and converts
 * nothing) when no row of the tile sees the block. */
static inline int attn_block_rows(const if_attn_job *j, size_t rt, size_t re, size_t bs,
                                  size_t g, int which, float *buf, const float **rows) {
    const size_t hs = j->head_size;
    size_t lo, hi;
    attn_tile_span(j, rt, re, bs, bs + IF_ATTN_KEY_BLOCK, &lo, &hi);
    if (lo >= hi) return 0;
    attn_rows(j->kv, which, lo, hi, g, hs, buf + (lo - bs) * hs, rows + (lo - bs));
    return 1;
}

#endif
