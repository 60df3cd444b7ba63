/* ops.c - RMSNorm, RoPE, SwiGLU; softmax lives in sampler.c with the sampler that shares it. */
#include "ops.h"

#include "detmath.h"

#include <math.h>

void if_rmsnorm(float *o, const float *x, const float *w, size_t n, float eps) {
    float ss = 0.0f;
    for (size_t j = 0; j < n; j++) ss += x[j] * x[j];
    ss /= (float)n;
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (size_t j = 0; j < n; j++) o[j] = w[j] * (ss * x[j]);
}

void if_rope(float *q, size_t n_q, float *k, size_t n_k, size_t head_size, size_t pos,
             float theta) {
    for (size_t i = 0; i < n_q; i += 2) {
        size_t head_dim = i % head_size;
        float freq = 1.0f / if_powf(theta, (float)head_dim / (float)head_size);
        float val = (float)pos * freq;
        float fcr = if_cosf(val), fci = if_sinf(val);
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

void if_swiglu(float *x, const float *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float val = x[i];
        val *= (1.0f / (1.0f + if_expf(-val)));
        val *= g[i];
        x[i] = val;
    }
}
