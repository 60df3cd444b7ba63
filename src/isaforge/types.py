"""Plain data shared by the readers, the quantizer, the engine and the reference model.

Shapes follow llama2.c: a weight matrix is (out_features, in_features), row-major, so one
output is one row. Q8 groups run along a row (the K axis).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import _native

# The matrices of one layer, in the order the C core takes them (isaforge.h's
# IF_LAYER_MATRICES, exported by the extension, not mirrored). llama2.c's v1/v2 files store
# them in this order too.
LAYER_MATRICES: tuple[str, ...] = _native.LAYER_MATRICES
LAYER_VECTORS: tuple[str, ...] = _native.LAYER_VECTORS  # optional ones (IF_LAYER_VECTORS)


class ModelFormatError(ValueError):
    """A model or tokenizer file is malformed; the message names the file and the reason."""


def check_regular(path) -> None:
    """Refuse a path that exists but is not a regular file (a FIFO or a device would block or
    stream forever when read), before anything opens it."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing: the caller's open() reports it
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise ModelFormatError(f"{path}: not a regular file (a FIFO, socket or device)")


@dataclass(frozen=True)
class Config:
    dim: int  # embedding width
    hidden_dim: int  # FFN width
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int  # key/value heads (GQA when < n_heads)
    vocab_size: int
    seq_len: int  # maximum context
    shared_classifier: bool = True  # classifier == token embedding table
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    sliding_window: int = 0  # 0: global attention; else a query sees this many positions
    n_sinks: int = 0  # with a window: the first n_sinks positions stay visible (sinks)
    # The layer description (isaforge.h's if_config; all defaults: a Llama layer). Per-layer
    # norms and biases are Weights.vectors.
    head_dim: int = 0  # per-head width; 0: dim // n_heads
    act: int = 0  # gated FFN activation: 0 SiLU, 1 GELU-tanh
    rope_neox: int = 0  # 0: rotate pairs (2i, 2i+1); 1: NEOX pairs (i, i + head_size/2)
    swa_pattern: int = 0  # n > 0: layer l global when (l + 1) % n == 0, else windowed
    rope_theta_swa: float = 0.0  # RoPE base of windowed layers under swa_pattern (0: rope_theta)
    embed_scale: float = 0.0  # token embeddings times this (0: unscaled)
    attn_scale: float = 0.0  # attention scores' scale (0: 1 / sqrt(head_size))
    logit_softcap: float = 0.0  # logits = c * tanh(logits / c) (0: none)

    @property
    def head_size(self) -> int:
        return self.head_dim or self.dim // self.n_heads

    @property
    def q_dim(self) -> int:
        return self.head_size * self.n_heads

    def layer_window(self, layer: int) -> int:
        """Layer `layer`'s sliding window (0: global attention)."""
        if self.swa_pattern and (layer + 1) % self.swa_pattern == 0:
            return 0
        return self.sliding_window

    def layer_rope_theta(self, layer: int) -> float:
        if self.swa_pattern and self.rope_theta_swa and self.layer_window(layer):
            return self.rope_theta_swa
        return self.rope_theta

    @property
    def kv_dim(self) -> int:
        return self.head_size * self.n_kv_heads


@dataclass
class Q8Tensor:
    """Symmetric int8 per group of `group_size` along each row: w ~= q * s."""

    q: np.ndarray  # int8, (rows, cols)
    s: np.ndarray  # float32, (rows, cols // group_size)
    group_size: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.q.shape

    def dequantize(self) -> np.ndarray:
        rows, cols = self.q.shape
        g = self.q.reshape(rows, cols // self.group_size, self.group_size).astype(np.float32)
        return (g * self.s[:, :, None]).reshape(rows, cols)

    def rows(self, ids) -> np.ndarray:
        """float32 (len(ids), cols): rows `ids` dequantized, as the core's lookup does."""
        return Q8Tensor(self.q[ids], self.s[ids], self.group_size).dequantize()


Matrix = "np.ndarray | Q8Tensor"  # float32 (rows, cols) or Q8Tensor


@dataclass
class Weights:
    """All tensors of a Llama model. Per-layer matrices are lists of length n_layers."""

    # the token table (vocab, dim): float32 for float32 models, else quantized (a Q8Tensor, or a
    # 4-bit quant.q4.Q4Tensor; rows dequantized on lookup, embedding_rows); with a tied
    # classifier (shared_classifier) of a quantized model it is the same object as wcls
    tok_embeddings: object
    rms_att: np.ndarray  # float32 (n_layers, dim)
    rms_ffn: np.ndarray  # float32 (n_layers, dim)
    rms_final: np.ndarray  # float32 (dim,)
    wq: list = field(default_factory=list)  # (q_dim, dim)
    wk: list = field(default_factory=list)  # (kv_dim, dim)
    wv: list = field(default_factory=list)  # (kv_dim, dim)
    wo: list = field(default_factory=list)  # (dim, q_dim)
    w1: list = field(default_factory=list)  # (hidden_dim, dim)
    w2: list = field(default_factory=list)  # (dim, hidden_dim)
    w3: list = field(default_factory=list)  # (hidden_dim, dim)
    wcls: object = None  # (vocab, dim): float32 array or Q8Tensor
    # optional per-layer float32 vectors by LAYER_VECTORS name (rms_post_att, rms_post_ffn: dim;
    # q_norm, k_norm: head_size; bq: q_dim; bk, bv: kv_dim): a list of n_layers arrays or None
    vectors: dict = field(default_factory=dict)
    rope_freqs: np.ndarray | None = None  # (head_size // 2) float32 divisors (Llama 3 RoPE)

    @property
    def group_size(self) -> int:
        """0 for a float32 model, else the Q8 group size."""
        return self.wq[0].group_size if isinstance(self.wq[0], Q8Tensor) else 0


def embedding_rows(table, ids) -> np.ndarray:
    """float32 (len(ids), cols) token rows of a table (float32 array, Q8Tensor or Q4Tensor)."""
    if isinstance(table, np.ndarray):
        return np.asarray(table[ids], np.float32)
    return table.rows(ids)


def table_bytes(table) -> int:
    """Bytes a token table holds (values and scales)."""
    if isinstance(table, np.ndarray):
        return table.nbytes
    return sum(int(np.asarray(a).nbytes) for a in (getattr(table, "q", None),
               getattr(table, "nibbles", None), table.s) if a is not None)


@dataclass
class LoadedModel:
    config: Config
    weights: Weights
    path: str
    format: str  # e.g. "llama2c-v0", "llama2c-v1", "llama2c-v2", "gguf", "hf", "isaf"
    keepalive: list = field(default_factory=list)  # mmaps backing the arrays
    # Format-level key/values the tokenizer and chat layers need: GGUF KV pairs as Python
    # values (str/int/float/list), or for HF folders config.json plus tokenizer files' paths.
    metadata: dict = field(default_factory=dict)
