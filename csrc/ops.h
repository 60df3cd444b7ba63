/* ops.h - non-matmul ops shared by every kernel tier (internal). They are plain C so the
 * whole forward pass is identical across tiers; their float order follows llama2.c run.c. */
#ifndef ISAFORGE_OPS_H
#define ISAFORGE_OPS_H

#include <stddef.h>

/* o = w * (x / sqrt(mean(x^2) + eps)), as run.c's rmsnorm. o may alias x. */
void if_rmsnorm(float *o, const float *x, const float *w, size_t n, float eps);
/* RoPE angles of position pos for one head, as run.c computes them per pair: cs[i] = cos and
 * cs[i + 1] = sin of pos * theta^(-i / head_size), i = 0, 2, 4, ... (head_size floats); with
 * freq_div (head_size / 2 floats, Llama 3 scaling) that angle is divided by freq_div[i / 2]. */
void if_rope_angles(float *cs, size_t head_size, size_t pos, float theta,
                    const float *freq_div);
/* Rotate interleaved pairs (i, i+1) of q (n_q values) and k (n_k <= n_q values) by the angles
 * cs of if_rope_angles (every head uses the same head_size angles). */
void if_rope_apply(float *q, size_t n_q, float *k, size_t n_k, size_t head_size,
                   const float *cs);
/* The same for NEOX layout: in each head, pair (i, i + head_size / 2) turns by angle i
 * (cs[2i], cs[2i + 1]). */
void if_rope_apply_neox(float *q, size_t n_q, float *k, size_t n_k, size_t head_size,
                        const float *cs);
/* Logit soft-capping: cap * tanh(x / cap), tanh from detmath's if_expf. */
float if_softcap(float x, float cap);

#endif
