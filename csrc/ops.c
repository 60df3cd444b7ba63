/* ops.c - RMSNorm, RoPE, logit soft-capping and the attention kernels' scratch size. SwiGLU is
 * a kernel op (csrc/kernels/swiglu/), the KV cache rows live in kv.c, and softmax lives in
 * sampler.c with the sampler that shares it. */
#include "ops.h"

#include "detmath.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>

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
