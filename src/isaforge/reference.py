"""Readable numpy Llama forward pass: the executable spec, top to bottom like llama2.c run.c.

fp32 weights: every step runs in `dtype` (float64 by default, a high-precision oracle).
Q8 weights: each matmul follows runq.c exactly: the float32 activation is quantized per group
at run time (round half away from zero, C roundf), each group's int32 dot product is scaled as
(float(isum) * w_scale) * x_scale and accumulated group by group in float32 (no FMA).
"""

from __future__ import annotations

import numpy as np

from isaforge.types import Config, Q8Tensor, Weights


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """weight * (x / sqrt(mean(x^2) + eps)), computed in x's dtype."""
    ss = np.dot(x, x) / x.shape[0] + x.dtype.type(eps)
    return weight.astype(x.dtype) * (x.dtype.type(1.0) / np.sqrt(ss) * x)


def rope(vec: np.ndarray, pos: int, head_size: int, theta: float = 10000.0) -> np.ndarray:
    """Rotate interleaved pairs (i, i+1) by pos * theta^-(i % head_size / head_size)."""
    t = vec.dtype.type
    i = np.arange(0, vec.shape[0], 2)
    freq = t(1.0) / np.power(t(theta), ((i % head_size) / t(head_size)).astype(vec.dtype))
    ang = t(pos) * freq
    c, s = np.cos(ang), np.sin(ang)
    v0, v1 = vec[0::2], vec[1::2]
    out = np.empty_like(vec)
    out[0::2] = v0 * c - v1 * s
    out[1::2] = v0 * s + v1 * c
    return out


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def silu(x: np.ndarray) -> np.ndarray:
    return x * (x.dtype.type(1.0) / (x.dtype.type(1.0) + np.exp(-x)))


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, pos0: int, n_heads: int,
              n_kv_heads: int, window: int = 0, n_sinks: int = 0) -> np.ndarray:
    """Causal multi-head attention in float64, the oracle of the C attention kernels.

    q: (n, n_heads * hs), row r is the query at position pos0 + r. k, v: (pos0 + n,
    n_kv_heads * hs), the keys and values of positions 0 .. pos0 + n - 1 (the cache as a plain
    array, before any ring-buffer or type conversion). Query head h reads kv head
    h // (n_heads // n_kv_heads). The query at p sees positions t <= p; with a window, only
    t > p - window, plus the first n_sinks positions (attention sinks). Returns (n, n_heads*hs).
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    n, hs, kv_mul = q.shape[0], q.shape[1] // n_heads, n_heads // n_kv_heads
    if k.shape != v.shape or k.shape != (pos0 + n, n_kv_heads * hs):
        raise ValueError(f"k, v must be ({pos0 + n}, {n_kv_heads * hs}), got {k.shape}, {v.shape}")
    t = np.arange(pos0 + n)
    out = np.empty_like(q)
    for r in range(n):
        p = pos0 + r
        vis = t <= p
        if window:
            vis &= (t > p - window) | (t < n_sinks)
        for h in range(n_heads):
            g = slice((h // kv_mul) * hs, (h // kv_mul + 1) * hs)
            scores = k[vis, g] @ q[r, h * hs: (h + 1) * hs] / np.sqrt(hs)
            out[r, h * hs: (h + 1) * hs] = softmax(scores) @ v[vis, g]
    return out


# --------------------------------------------------------------------------------------------
# Q8 path (runq.c)


def round_half_away(v: np.ndarray) -> np.ndarray:
    """C round(): halves go away from zero (numpy's rint goes to even)."""
    a = np.floor(np.abs(v.astype(np.float64)) + 0.5)  # exact for float32 inputs
    return np.copysign(a, v)


def quantize_activations(x: np.ndarray, gs: int) -> tuple[np.ndarray, np.ndarray]:
    """runq.c quantize(): per group scale = max|x| / 127 (float32), q = round(x / scale).

    A zero group gets scale 0 and q 0 (C would divide by zero).
    """
    x32 = np.asarray(x, dtype=np.float32)
    if x32.ndim != 1 or x32.shape[0] % gs:
        raise ValueError(f"activation of shape {x32.shape} is not a whole number of groups {gs}")
    g = x32.reshape(-1, gs)
    scale = np.abs(g).max(axis=1) / np.float32(127.0)
    zero = scale == 0
    v = g / np.where(zero, np.float32(1.0), scale)[:, None]  # float32 division
    r = round_half_away(v)
    r[zero] = 0
    r = np.where(np.isfinite(r), r, 0)
    return np.clip(r, -127, 127).astype(np.int8).reshape(-1), scale.astype(np.float32)


def q8_matmul_int_parts(xq: np.ndarray, wq: np.ndarray, gs: int) -> np.ndarray:
    """Exact int32 partial sums: out[r, g] = sum_k xq[g*gs + k] * wq[r, g*gs + k]."""
    rows, cols = wq.shape
    w3 = wq.reshape(rows, cols // gs, gs).astype(np.int32)
    x2 = np.asarray(xq).reshape(cols // gs, gs).astype(np.int32)
    return np.einsum("rgk,gk->rg", w3, x2).astype(np.int32)


def q8_matmul(xq: np.ndarray, xs: np.ndarray, w: Q8Tensor) -> np.ndarray:
    """runq.c matmul: val += (float(isum) * w_scale) * x_scale, groups in order, float32."""
    parts = q8_matmul_int_parts(xq, w.q, w.group_size).astype(np.float32)
    ws = np.asarray(w.s, dtype=np.float32)
    xs = np.asarray(xs, dtype=np.float32)
    acc = np.zeros(w.q.shape[0], dtype=np.float32)
    for g in range(parts.shape[1]):
        acc = acc + (parts[:, g] * ws[:, g]) * xs[g]
    return acc


# --------------------------------------------------------------------------------------------
# the model


class Reference:
    """Single-sequence Llama with its own KV cache; `forward(token, pos)` -> logits."""

    def __init__(self, config: Config, weights: Weights, dtype: type = np.float64) -> None:
        self.c, self.w, self.dtype = config, weights, np.dtype(dtype)
        self.gs = weights.group_size  # 0 for fp32 weights
        shape = (config.n_layers, config.seq_len, config.kv_dim)
        self.key_cache = np.zeros(shape, dtype=self.dtype)
        self.value_cache = np.zeros(shape, dtype=self.dtype)

    def reset(self) -> None:
        self.key_cache[:] = 0
        self.value_cache[:] = 0

    def matmul(self, w: np.ndarray | Q8Tensor, x: np.ndarray) -> np.ndarray:
        """W (d, n) @ x (n,) -> (d,); Q8 weights take the runq.c integer path."""
        if isinstance(w, Q8Tensor):
            xq, xs = quantize_activations(x, w.group_size)
            return q8_matmul(xq, xs, w).astype(self.dtype)
        return np.asarray(w, dtype=self.dtype) @ x

    def forward(self, token: int, pos: int) -> np.ndarray:
        c, w = self.c, self.w
        if not 0 <= token < c.vocab_size:
            raise ValueError(f"token {token} outside vocabulary of {c.vocab_size}")
        if not 0 <= pos < c.seq_len:
            raise ValueError(f"position {pos} outside context of {c.seq_len}")
        hs, kv_mul, t = c.head_size, c.n_heads // c.n_kv_heads, self.dtype.type
        x = np.array(w.tok_embeddings[token], dtype=self.dtype)

        for layer in range(c.n_layers):
            # attention rmsnorm, then q, k, v for this position
            xb = rmsnorm(x, w.rms_att[layer], c.norm_eps)
            q = self.matmul(w.wq[layer], xb)
            k = self.matmul(w.wk[layer], xb)
            v = self.matmul(w.wv[layer], xb)

            # RoPE on q (over dim) and k (over kv_dim), then cache k, v
            q = rope(q, pos, hs, c.rope_theta)
            k = rope(k, pos, hs, c.rope_theta)
            self.key_cache[layer, pos] = k
            self.value_cache[layer, pos] = v

            # multi-head attention (GQA, causal, sliding window with sinks per config)
            if c.sliding_window == 0:
                att_out = np.empty(c.dim, dtype=self.dtype)
                for h in range(c.n_heads):  # query head h reads kv head h // kv_mul
                    kvh = (h // kv_mul) * hs
                    keys = self.key_cache[layer, : pos + 1, kvh : kvh + hs]
                    vals = self.value_cache[layer, : pos + 1, kvh : kvh + hs]
                    scores = keys @ q[h * hs : (h + 1) * hs] / np.sqrt(t(hs))
                    att_out[h * hs : (h + 1) * hs] = softmax(scores) @ vals
            else:
                att_out = attention(q[None], self.key_cache[layer, : pos + 1],
                                    self.value_cache[layer, : pos + 1], pos, c.n_heads,
                                    c.n_kv_heads, c.sliding_window, c.n_sinks)[0]
                att_out = att_out.astype(self.dtype)

            # output projection and residual
            x = x + self.matmul(w.wo[layer], att_out)

            # SwiGLU FFN: w2(silu(w1 x) * w3 x), residual
            xb = rmsnorm(x, w.rms_ffn[layer], c.norm_eps)
            hb = silu(self.matmul(w.w1[layer], xb)) * self.matmul(w.w3[layer], xb)
            x = x + self.matmul(w.w2[layer], hb)

        # final rmsnorm and classifier
        x = rmsnorm(x, w.rms_final, c.norm_eps)
        return self.matmul(w.wcls, x)

    def logits(self, tokens: list[int] | np.ndarray) -> np.ndarray:
        """Logits (n, vocab) for tokens at positions 0..n-1, from an empty cache."""
        self.reset()
        out = np.empty((len(tokens), self.c.vocab_size), dtype=self.dtype)
        for pos, tok in enumerate(tokens):
            out[pos] = self.forward(int(tok), pos)
        return out
