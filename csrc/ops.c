/* ops.c - RMSNorm, RoPE, KV cache rows (SwiGLU is a kernel op: csrc/kernels/swiglu/);
 * softmax lives in sampler.c with the sampler
 * that shares it. */
#include "ops.h"

#include "detmath.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

void if_rmsnorm(float *o, const float *x, const float *w, size_t n, float eps) {
    float ss = 0.0f;
    for (size_t j = 0; j < n; j++) ss += x[j] * x[j];
    ss /= (float)n;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (size_t j = 0; j < n; j++) o[j] = w[j] * (ss * x[j]);
}

void if_rope_angles(float *cs, size_t head_size, size_t pos, float theta,
                    const float *freq_div) {
    for (size_t i = 0; i + 1 < head_size; i += 2) {
        float freq = 1.0f / if_powf(theta, (float)i / (float)head_size);
        float val = (float)pos * freq;
        if (freq_div) val /= freq_div[i / 2];
        cs[i] = if_cosf(val);
        cs[i + 1] = if_sinf(val);
    }
}

void if_rope_apply(float *q, size_t n_q, float *k, size_t n_k, size_t head_size,
                   const float *cs) {
    for (size_t i = 0; i < n_q; i += 2) {
        size_t head_dim = i % head_size;
        float fcr = cs[head_dim], fci = cs[head_dim + 1];
        float v0 = q[i], v1 = q[i + 1];
        q[i] = v0 * fcr - v1 * fci;
        q[i + 1] = v0 * fci + v1 * fcr;
        if (i < n_k) {
            v0 = k[i];
            v1 = k[i + 1];
            k[i] = v0 * fcr - v1 * fci;
            k[i + 1] = v0 * fci + v1 * fcr;
        }
    }
}

void if_rope_apply_neox(float *q, size_t n_q, float *k, size_t n_k, size_t head_size,
                        const float *cs) {
    const size_t half = head_size / 2;
    for (size_t h = 0; h < n_q; h += head_size) {
        for (size_t i = 0; i < half; i++) {
            float fcr = cs[2 * i], fci = cs[2 * i + 1];
            float *a = q + h + i, *b = a + half;
            float v0 = *a, v1 = *b;
            *a = v0 * fcr - v1 * fci;
            *b = v0 * fci + v1 * fcr;
            if (h < n_k) {
                a = k + h + i;
                b = a + half;
                v0 = *a;
                v1 = *b;
                *a = v0 * fcr - v1 * fci;
                *b = v0 * fci + v1 * fcr;
            }
        }
    }
}

float if_softcap(float x, float cap) {
    /* cap * tanh(x / cap), tanh(y) = sign(y) (1 - e) / (1 + e) with e = expf(-2|y|) */
    float y = x / cap, e = if_expf(-2.0f * fabsf(y));
    float t = (1.0f - e) / (1.0f + e);
    return cap * (y < 0 ? -t : t);
}

/* ---- KV cache rows ---- */

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

size_t if_attn_scratch_floats(size_t head_size, size_t n_heads, size_t kv_mul, size_t keys) {
    const size_t B = IF_ATTN_KEY_BLOCK, TQ = IF_ATTN_Q_TILE, hs = head_size;
    if (!hs || !n_heads || !kv_mul || hs > ((size_t)1 << 20) || n_heads > ((size_t)1 << 20) ||
        keys > SIZE_MAX / 64 / TQ / ((size_t)1 << 20))
        return 0;
    /* the fp32 kernels: a row of scores (keys rounded up to 16) per tile row and head of one
     * kv group; one block's scores; three (B, head_size) blocks (transposed keys, values,
     * keys); slack for alignment */
    const size_t G = n_heads < kv_mul ? n_heads : kv_mul, ld = (keys + 15) / 16 * 16;
    const size_t f32 = TQ * G * ld + B + 3 * B * hs + 8 * 16;
    /* the int8 matrix-engine kernels (attn_i8_matrix_body.h): floats, then bytes / 4 */
    const size_t i8 = TQ * n_heads * (2 * hs + 3) + TQ * B + 2 * B * hs + 2 * TQ + 3 * hs + 512 +
                      (n_heads * TQ * 4 * hs + 2 * B * hs + 512 * hs + TQ * B + 2 * hs) / 4 + 64;
    return f32 + i8;
}
