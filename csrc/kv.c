/* kv.c - the KV cache: its shape per layer (plain arrays over the context, rings for sliding
 * windows), its allocation for a model's sequence slots, and storing a row into it (converted
 * to the cache type). The attention kernels read it (csrc/kernels/attention/). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model_internal.h"

/* ---- shape and allocation ---- */

/* Slots of layer l's cache for a config and prefill chunk ub: a plain array over the context,
 * or with a sliding window a ring of n_sinks + window + ub - 1 slots (a chunk's rows go in
 * before its attention, so the ring must also hold the window of the chunk's first row). */
static size_t layer_cap(const if_config *c, size_t ub, size_t l) {
    const size_t window = layer_window(c, l);
    if (window && c->n_sinks + window + ub - 1 < c->seq_len) return c->n_sinks + window + ub - 1;
    return c->seq_len; /* global layers (swa_pattern's) keep the whole context */
}

/* Slots of one sequence's cache over all layers (each layer_cap), 0 if that overflows. */
static size_t kv_slots(const if_config *c, size_t ub) {
    size_t n = 0;
    for (size_t l = 0; l < c->n_layers; l++) {
        const size_t cap = layer_cap(c, ub, l);
        if (cap > SIZE_MAX - n) return 0;
        n += cap;
    }
    return n;
}

void if_kv_geometry(const if_config *c, size_t ub, if_kv_type type, size_t *cap, size_t *group,
                    size_t *el) {
    const size_t hs = if_config_head_size(c);
    *cap = 0; /* the largest layer's (each layer: layer_cap) */
    for (size_t l = 0; l < c->n_layers; l++)
        if (layer_cap(c, ub, l) > *cap) *cap = layer_cap(c, ub, l);
    *group = 0;
    *el = type == IF_KV_F32 ? 4 : type == IF_KV_F16 ? 2 : 1;
    if (type == IF_KV_I8)
        for (*group = 32; hs % *group;) *group /= 2;
}

size_t if_kv_cache_bytes(const if_config *c, size_t ubatch, if_kv_type type) {
    if (!c->n_heads || (!c->head_dim && c->dim % c->n_heads) || !c->seq_len ||
        (type != IF_KV_F32 && type != IF_KV_F16 && type != IF_KV_I8))
        return 0;
    size_t ub = ubatch ? ubatch : IF_DEFAULT_UBATCH, cap, group, el, n, t;
    if (ub > c->seq_len) ub = c->seq_len;
    if_kv_geometry(c, ub, type, &cap, &group, &el);
    t = kv_slots(c, ub);
    if (!t || !mul_ok(t, if_config_head_size(c) * c->n_kv_heads, &n) ||
        n > SIZE_MAX / 2 / (el + sizeof(float)))
        return 0;
    return 2 * n * el + (group ? 2 * (n / group) * sizeof(float) : 0);
}

int if_kv_alloc(if_model *m, if_kv_type type) {
    const if_config *c = &m->c;
    size_t cap, group, el;
    if_kv_geometry(c, m->ub, type, &cap, &group, &el);
    const size_t slots = kv_slots(c, m->ub); /* overflow checked by the caller */
    size_t n = m->n_seqs * slots * m->kv_dim;
    m->kc = calloc(n, el);
    m->vc = calloc(n, el);
    if (!m->kc || !m->vc) return 0;
    if (group) {
        m->ksc = calloc(n / group, sizeof(float));
        m->vsc = calloc(n / group, sizeof(float));
        if (!m->ksc || !m->vsc) return 0;
    }
    m->kv_bytes = m->n_seqs * if_kv_cache_bytes(c, m->ub, type);
    size_t off = 0;
    for (size_t l = 0; l < m->n_seqs * c->n_layers; l++) { /* slot l / n_layers */
        const size_t layer = l % c->n_layers;
        cap = layer_cap(c, m->ub, layer);
        if_kv_layer kv = {type,
                          (char *)m->kc + off * el,
                          (char *)m->vc + off * el,
                          group ? m->ksc + off / group : NULL,
                          group ? m->vsc + off / group : NULL,
                          cap,
                          m->kv_dim,
                          group,
                          layer_window(c, layer) ? c->n_sinks : 0,
                          0};
        /* float32 keys block-transposed where the SIMD kernels can read them in place */
        kv.keys_t = type == IF_KV_F32 && cap % IF_ATTN_KEY_BLOCK == 0 && !kv.n_sinks;
        m->kv[l] = kv;
        off += cap * m->kv_dim;
    }
    return 1;
}

/* ---- rows ---- */

size_t if_kv_slot(const if_kv_layer *kv, size_t pos) {
    if (pos < kv->n_sinks) return pos;
    return kv->n_sinks + (pos - kv->n_sinks) % (kv->cap - kv->n_sinks);
}

/* float32 -> IEEE binary16 bits, round to nearest even (overflow to infinity). */
static uint16_t f32_to_f16(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    uint32_t e = (b >> 23) & 0xffu, f = b & 0x7fffffu;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (f ? 0x200u : 0)); /* inf / NaN */
    int32_t he = (int32_t)e - 127 + 15;
    if (he >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    uint32_t mant, shift;
    if (he <= 0) { /* subnormal half (or zero): value = mant * 2^-24 */
        if (he < -10) return sign;
        mant = f | 0x800000u;
        shift = (uint32_t)(14 - he);
        he = 0;
    } else {
        mant = f;
        shift = 13;
    }
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    /* a carry out of the mantissa bumps the exponent (and may give infinity): that is right */
    return (uint16_t)(sign | (((uint32_t)he << 10) + q));
}

size_t if_kv_key_t_index(const if_kv_layer *kv, size_t slot, size_t c) {
    const size_t B = IF_ATTN_KEY_BLOCK;
    return ((slot / B) * kv->kv_dim + c) * B + slot % B;
}

void if_kv_prefetch_row(const if_kv_layer *kv, size_t pos) {
    if (kv->type != IF_KV_F32) return;
    const size_t slot = if_kv_slot(kv, pos), n = kv->kv_dim;
    if (kv->keys_t) { /* if_kv_store's addresses: one line per element */
        const float *d = (const float *)kv->k + if_kv_key_t_index(kv, slot, 0);
        for (size_t i = 0; i < n; i++) __builtin_prefetch(d + i * IF_ATTN_KEY_BLOCK, 1, 3);
    }
    const float *v = (const float *)kv->v + slot * n;
    for (size_t i = 0; i < n; i += 16) __builtin_prefetch(v + i, 1, 3);
}

void if_kv_store(const if_kv_layer *kv, int which, size_t pos, const float *x) {
    const size_t slot = if_kv_slot(kv, pos), off = slot * kv->kv_dim, n = kv->kv_dim;
    void *base = which ? kv->v : kv->k;
    if (kv->type == IF_KV_F32 && !which && kv->keys_t) { /* block-transposed keys */
        float *d = (float *)base + if_kv_key_t_index(kv, slot, 0);
        for (size_t i = 0; i < n; i++) d[i * IF_ATTN_KEY_BLOCK] = x[i];
    } else if (kv->type == IF_KV_F32) {
        memcpy((float *)base + off, x, n * sizeof(float));
    } else if (kv->type == IF_KV_F16) {
        uint16_t *h = (uint16_t *)base + off;
        for (size_t i = 0; i < n; i++) h[i] = f32_to_f16(x[i]);
    } else {
        if_q8_quantize_1x1_scalar((int8_t *)base + off, (which ? kv->vs : kv->ks) + off / kv->group,
                              x, n, kv->group);
    }
}
