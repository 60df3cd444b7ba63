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

    @property
    def head_size(self) -> int:
        return self.dim // self.n_heads

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


Matrix = "np.ndarray | Q8Tensor"  # float32 (rows, cols) or Q8Tensor


@dataclass
class Weights:
    """All tensors of a Llama model. Per-layer matrices are lists of length n_layers."""

    tok_embeddings: np.ndarray  # float32 (vocab, dim); dequantized for Q8 files, as runq.c
    rms_att: np.ndarray  # float32 (n_layers, dim)
    rms_ffn: np.ndarray  # float32 (n_layers, dim)
    rms_final: np.ndarray  # float32 (dim,)
    wq: list = field(default_factory=list)  # (dim, dim)
    wk: list = field(default_factory=list)  # (kv_dim, dim)
    wv: list = field(default_factory=list)  # (kv_dim, dim)
    wo: list = field(default_factory=list)  # (dim, dim)
    w1: list = field(default_factory=list)  # (hidden_dim, dim)
    w2: list = field(default_factory=list)  # (dim, hidden_dim)
    w3: list = field(default_factory=list)  # (hidden_dim, dim)
    wcls: object = None  # (vocab, dim): float32 array or Q8Tensor

    @property
    def group_size(self) -> int:
        """0 for a float32 model, else the Q8 group size."""
        return self.wq[0].group_size if isinstance(self.wq[0], Q8Tensor) else 0


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
