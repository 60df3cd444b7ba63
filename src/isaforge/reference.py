"""Readable numpy forward pass: the executable spec, top to bottom like llama2.c run.c.

The layer is Llama's, plus what Config and Weights.vectors describe (Gemma 3, Qwen2/3, Llama
3): embedding scale, q/k/v biases, per-head q/k RMSNorm, NEOX or interleaved RoPE (Llama 3
frequency divisors), per-layer sliding window and RoPE base, attention scale, norms after
attention and FFN, SiLU or GELU-tanh gate, final logit soft-capping.

fp32 weights: every step runs in `dtype` (float64 by default, a high-precision oracle).
Q8 weights: each matmul follows runq.c exactly: the float32 activation is quantized per group
at run time (round half away from zero, C roundf), each group's int32 dot product is scaled as
(float(isum) * w_scale) * x_scale and accumulated group by group in float32 (no FMA).
K-quant weights run in place (KQTensor, Q4_K / Q5_K / Q6_K; Q4_0 / Q4_1 / Q5_0 / Q5_1 alike
with one activation scale per 32, _legacy_matmul): the activation is quantized per
256 (K8, the same rule) with the int16 sum of each 16 values, then isaforge.h's integer formula
per block and its float32 steps in block order (kq_matmul), the C kernels' arithmetic exactly.
"""

from __future__ import annotations

import numpy as np

from .quant.ggml import IQ4_NATIVE, LEGACY_NATIVE, KQTensor
from .types import Config, Q8Tensor, Weights, embedding_rows


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """weight * (x / sqrt(mean(x^2) + eps)), computed in x's dtype."""
    ss = np.dot(x, x) / x.shape[0] + x.dtype.type(eps)
    return weight.astype(x.dtype) * (x.dtype.type(1.0) / np.sqrt(ss) * x)


def rope(vec: np.ndarray, pos: int, head_size: int, theta: float = 10000.0,
         neox: bool = False, freq_div: np.ndarray | None = None) -> np.ndarray:
    """Rotate each head's pairs by pos * theta^-(2j / head_size) (divided by freq_div[j]): pair
    j is (2j, 2j+1), or with neox (j, j + head_size/2)."""
    t = vec.dtype.type
    j = np.arange(head_size // 2)
    freq = t(1.0) / np.power(t(theta), (2 * j / t(head_size)).astype(vec.dtype))
    ang = t(pos) * freq
    if freq_div is not None:
        ang = ang / np.asarray(freq_div, vec.dtype)
    c, s = np.cos(ang), np.sin(ang)
    heads = vec.reshape(-1, head_size)
    half = head_size // 2
    v0, v1 = (heads[:, :half], heads[:, half:]) if neox else (heads[:, 0::2], heads[:, 1::2])
    out = np.empty_like(heads)
    o0, o1 = (out[:, :half], out[:, half:]) if neox else (out[:, 0::2], out[:, 1::2])
    o0[:] = v0 * c - v1 * s
    o1[:] = v0 * s + v1 * c
    return out.reshape(-1)


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def silu(x: np.ndarray) -> np.ndarray:
    return x * (x.dtype.type(1.0) / (x.dtype.type(1.0) + np.exp(-x)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))."""
    t = x.dtype.type
    return t(0.5) * x * (t(1.0) + np.tanh(t(np.sqrt(2.0 / np.pi)) * (x + t(0.044715) * x ** 3)))


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, pos0: int, n_heads: int,
              n_kv_heads: int, window: int = 0, n_sinks: int = 0,
              scale: float = 0.0) -> np.ndarray:
    """Causal multi-head attention in float64, the oracle of the C attention kernels.

    q: (n, n_heads * hs), row r is the query at position pos0 + r. k, v: (pos0 + n,
    n_kv_heads * hs), the keys and values of positions 0 .. pos0 + n - 1 (the cache as a plain
    array, before any ring-buffer or type conversion). Query head h reads kv head
    h // (n_heads // n_kv_heads). The query at p sees positions t <= p; with a window, only
    t > p - window, plus the first n_sinks positions (attention sinks). Scores are q.k times
    `scale` (0: 1 / sqrt(hs)). Returns (n, n_heads*hs).
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    n, hs, kv_mul = q.shape[0], q.shape[1] // n_heads, n_heads // n_kv_heads
    if k.shape != v.shape or k.shape != (pos0 + n, n_kv_heads * hs):
        raise ValueError(f"k, v must be ({pos0 + n}, {n_kv_heads * hs}), got {k.shape}, {v.shape}")
    t = np.arange(pos0 + n)
    scale = scale or 1.0 / np.sqrt(hs)
    out = np.empty_like(q)
    for r in range(n):
        p = pos0 + r
        vis = t <= p
        if window:
            vis &= (t > p - window) | (t < n_sinks)
        for h in range(n_heads):
            g = slice((h // kv_mul) * hs, (h // kv_mul + 1) * hs)
            scores = k[vis, g] @ q[r, h * hs: (h + 1) * hs] * scale
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


def quantize_k8(x: np.ndarray, qb: int = 256) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """K8 activations (if_k8_quantize_fn; qb = 32: the legacy blocks' L8): quantize_activations
    at qb, then the int16 sum of each 16 consecutive int8 values."""
    xq, xd = quantize_activations(x, qb)
    return xq, xd, xq.reshape(-1, 16).astype(np.int16).sum(axis=1).astype(np.int16)


def kq_matmul(xq: np.ndarray, xd: np.ndarray, xsum: np.ndarray, w: KQTensor) -> np.ndarray:
    """isaforge.h's K-quant arithmetic: per output row and block b, exact integer sums (Q4_K
    and Q5_K, q in 0..15 / 0..31: sumi = sum_j sc[j] dot_j(q, xq), summ = sum_j m[j] (xsum of
    sub-block j); Q6_K: sumi = sum_j sc[j] (dot_j(u, xq) - 32 xsum_j)), then in float32, blocks
    in order from 0: Q4_K / Q5_K acc = (acc + (d * xd[b]) * sumi) - (dmin * xd[b]) * summ;
    Q6_K acc = acc + (d * xd[b]) * sumi."""
    if w.type_name in LEGACY_NATIVE:
        return _legacy_matmul(xq, xd, xsum, w)
    if w.type_name in IQ4_NATIVE:
        return _iq4_matmul(xq, xd, w)
    n, nb = w.shape[0], w.cols // 256
    x = np.asarray(xq).astype(np.int64).reshape(nb, -1)
    bs = np.asarray(xsum).astype(np.int64).reshape(nb, 16)
    acc = np.zeros(n, np.float32)
    if w.type_name in ("Q4_K", "Q5_K"):
        d, dmin, sc, mn, q = w.integers()
        dots = np.einsum("nbjl,bjl->nbj", q.reshape(n, nb, 8, 32), x.reshape(nb, 8, 32))
        sumi = (dots * sc.reshape(n, nb, 8)).sum(axis=2).astype(np.float32)
        summ = (mn.reshape(n, nb, 8) * bs.reshape(nb, 8, 2).sum(axis=2)).sum(axis=2)
        summ = summ.astype(np.float32)
        d, dmin = d.reshape(n, nb), dmin.reshape(n, nb)
        for b in range(nb):
            acc = (acc + (d[:, b] * xd[b]) * sumi[:, b]) - (dmin[:, b] * xd[b]) * summ[:, b]
        return acc
    d, sc, u = w.integers()
    dots = np.einsum("nbjl,bjl->nbj", u.reshape(n, nb, 16, 16), x.reshape(nb, 16, 16)) - 32 * bs
    sumi = (dots * sc.reshape(n, nb, 16)).sum(axis=2).astype(np.float32)
    d = d.reshape(n, nb)
    for b in range(nb):
        acc = acc + (d[:, b] * xd[b]) * sumi[:, b]
    return acc


def _legacy_matmul(xq: np.ndarray, xd: np.ndarray, xsum: np.ndarray, w: KQTensor) -> np.ndarray:
    """isaforge.h's legacy-block arithmetic (L8 activations, one scale per 32): per output row
    and block b, dot = sum_j u_j xq_j and xs = the block's activation sum (exact integers), then
    in float32, blocks in order from 0: Q4_0 / Q5_0 / Q8_0 acc = acc + (d * xd[b]) *
    (dot - z xs), z = 8 / 16 / 0 (Q8_0's values are signed); Q4_1 / Q5_1 acc = (acc +
    (d * xd[b]) * dot) + (m * xd[b]) * xs."""
    n, nb = w.shape[0], w.cols // 32
    x = np.asarray(xq).astype(np.int64).reshape(nb, 32)
    xs = np.asarray(xsum).astype(np.int64).reshape(nb, 2).sum(axis=1)
    d, m, u = w.integers()
    dot = np.einsum("nbj,bj->nb", u.reshape(n, nb, 32), x)
    d = d.reshape(n, nb)
    xd = np.asarray(xd, np.float32)
    acc = np.zeros(n, np.float32)
    if m is None:
        z = {"Q4_0": 8, "Q5_0": 16, "Q8_0": 0}[w.type_name]
        sumi = (dot - z * xs[None, :]).astype(np.float32)
        for b in range(nb):
            acc = acc + (d[:, b] * xd[b]) * sumi[:, b]
        return acc
    m = m.reshape(n, nb)
    dotf, xsf = dot.astype(np.float32), xs.astype(np.float32)
    for b in range(nb):
        acc = (acc + (d[:, b] * xd[b]) * dotf[:, b]) + (m[:, b] * xd[b]) * xsf[b]
    return acc


def _iq4_matmul(xq: np.ndarray, xd: np.ndarray, w: KQTensor) -> np.ndarray:
    """isaforge.h's IQ4 arithmetic: per output row and block b (IQ4_NL: 32 values, L8
    activations; IQ4_XS: 256, K8), exact integers (IQ4_NL dot = sum_j level_j xq_j; IQ4_XS
    sumi = sum_j (ls_j - 32) dot_j over its 8 sub-blocks), then in float32, blocks in order
    from 0: acc = acc + (d * xd[b]) * sumi."""
    n = w.shape[0]
    if w.type_name == "IQ4_NL":
        nb = w.cols // 32
        d, level = w.integers()
        sumi = np.einsum("nbj,bj->nb", level.reshape(n, nb, 32),
                         np.asarray(xq).astype(np.int64).reshape(nb, 32))
    else:
        nb = w.cols // 256
        d, s, level = w.integers()
        dots = np.einsum("nbjl,bjl->nbj", level.reshape(n, nb, 8, 32),
                         np.asarray(xq).astype(np.int64).reshape(nb, 8, 32))
        sumi = (dots * s.reshape(n, nb, 8)).sum(axis=2)
    sumi = sumi.astype(np.float32)
    d = d.reshape(n, nb)
    xd = np.asarray(xd, np.float32)
    acc = np.zeros(n, np.float32)
    for b in range(nb):
        acc = acc + (d[:, b] * xd[b]) * sumi[:, b]
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
        """W (d, n) @ x (n,) -> (d,); Q8 weights take the runq.c integer path, K-quant ones
        the K8 integer path (kq_matmul)."""
        if isinstance(w, KQTensor):
            qb = 32 if w.type_name in LEGACY_NATIVE + ("IQ4_NL",) else 256
            return kq_matmul(*quantize_k8(x, qb), w).astype(self.dtype)
        if isinstance(w, Q8Tensor):
            xq, xs = quantize_activations(x, w.group_size)
            return q8_matmul(xq, xs, w).astype(self.dtype)
        return np.asarray(w, dtype=self.dtype) @ x

    def vector(self, name: str, layer: int) -> np.ndarray | None:
        """Layer `layer`'s optional vector `name` (Weights.vectors) in self.dtype, or None."""
        per_layer = self.w.vectors.get(name)
        a = None if per_layer is None else per_layer[layer]
        return None if a is None else np.asarray(a, dtype=self.dtype)

    def forward(self, token: int, pos: int) -> np.ndarray:
        c, w = self.c, self.w
        logits = self.matmul(w.wcls, self.hidden_step(token, pos))
        if c.logit_softcap:
            t = self.dtype.type
            logits = t(c.logit_softcap) * np.tanh(logits / t(c.logit_softcap))
        return logits

    def hidden_step(self, token: int, pos: int) -> np.ndarray:
        """The final hidden state (after the final norm) of `token` at `pos`, caching its K/V."""
        c, w = self.c, self.w
        if not 0 <= token < c.vocab_size:
            raise ValueError(f"token {token} outside vocabulary of {c.vocab_size}")
        if not 0 <= pos < c.seq_len:
            raise ValueError(f"position {pos} outside context of {c.seq_len}")
        hs, kv_mul, t = c.head_size, c.n_heads // c.n_kv_heads, self.dtype.type
        x = np.array(embedding_rows(w.tok_embeddings, [token])[0], dtype=self.dtype)
        if c.embed_scale:
            x = x * t(c.embed_scale)
        scale = t(c.attn_scale) if c.attn_scale else t(1.0) / np.sqrt(t(hs))

        for layer in range(c.n_layers):
            def vec(name: str, layer: int = layer) -> np.ndarray | None:
                return self.vector(name, layer)

            # attention rmsnorm, then q, k, v for this position (+ biases)
            xb = rmsnorm(x, w.rms_att[layer], c.norm_eps)
            q = self.matmul(w.wq[layer], xb)
            k = self.matmul(w.wk[layer], xb)
            v = self.matmul(w.wv[layer], xb)
            for name, a in (("bq", q), ("bk", k), ("bv", v)):
                if (b := vec(name)) is not None:
                    a += b

            # per-head RMSNorm of q and k, then RoPE (this layer's base), then cache k, v
            if (qn := vec("q_norm")) is not None:
                q = np.concatenate([rmsnorm(h, qn, c.norm_eps) for h in q.reshape(-1, hs)])
            if (kn := vec("k_norm")) is not None:
                k = np.concatenate([rmsnorm(h, kn, c.norm_eps) for h in k.reshape(-1, hs)])
            theta = c.layer_rope_theta(layer)
            q = rope(q, pos, hs, theta, c.rope_neox, w.rope_freqs)
            k = rope(k, pos, hs, theta, c.rope_neox, w.rope_freqs)
            self.key_cache[layer, pos] = k
            self.value_cache[layer, pos] = v

            # multi-head attention (GQA, causal, sliding window with sinks per layer)
            window = c.layer_window(layer)
            if window == 0:
                att_out = np.empty(c.q_dim, dtype=self.dtype)
                for h in range(c.n_heads):  # query head h reads kv head h // kv_mul
                    kvh = (h // kv_mul) * hs
                    keys = self.key_cache[layer, : pos + 1, kvh : kvh + hs]
                    vals = self.value_cache[layer, : pos + 1, kvh : kvh + hs]
                    scores = keys @ q[h * hs : (h + 1) * hs] * scale
                    att_out[h * hs : (h + 1) * hs] = softmax(scores) @ vals
            else:
                att_out = attention(q[None], self.key_cache[layer, : pos + 1],
                                    self.value_cache[layer, : pos + 1], pos, c.n_heads,
                                    c.n_kv_heads, window, c.n_sinks, float(scale))[0]
                att_out = att_out.astype(self.dtype)

            # output projection (post-attention norm), residual
            att = self.matmul(w.wo[layer], att_out)
            if (pn := vec("rms_post_att")) is not None:
                att = rmsnorm(att, pn, c.norm_eps)
            x = x + att

            # gated FFN: w2(act(w1 x) * w3 x) (post-FFN norm), residual
            xb = rmsnorm(x, w.rms_ffn[layer], c.norm_eps)
            act = gelu_tanh if c.act == 1 else silu
            hb = act(self.matmul(w.w1[layer], xb)) * self.matmul(w.w3[layer], xb)
            ffn = self.matmul(w.w2[layer], hb)
            if (pn := vec("rms_post_ffn")) is not None:
                ffn = rmsnorm(ffn, pn, c.norm_eps)
            x = x + ffn

        return rmsnorm(x, w.rms_final, c.norm_eps)  # the classifier's input

    def hidden(self, tokens: list[int] | np.ndarray) -> np.ndarray:
        """Final hidden states (n, dim) for tokens at positions 0..n-1, from an empty cache."""
        self.reset()
        return np.stack([self.hidden_step(int(tok), pos) for pos, tok in enumerate(tokens)])

    def logits(self, tokens: list[int] | np.ndarray) -> np.ndarray:
        """Logits (n, vocab) for tokens at positions 0..n-1, from an empty cache."""
        self.reset()
        out = np.empty((len(tokens), self.c.vocab_size), dtype=self.dtype)
        for pos, tok in enumerate(tokens):
            out[pos] = self.forward(int(tok), pos)
        return out
