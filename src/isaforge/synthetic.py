"""Random-weight models at real models' shapes, for tests and benchmarks (built in memory)."""

from __future__ import annotations

import numpy as np

from .types import Config, LoadedModel, Q8Tensor, Weights

# SmolLM2-135M: dim 576, hidden 1536, 30 layers, 9 heads, 3 KV heads, vocab 49152, tied.
SMOLLM2_135M = Config(dim=576, hidden_dim=1536, n_layers=30, n_heads=9, n_kv_heads=3,
                      vocab_size=49152, seq_len=8192, rope_theta=100000.0)


def random_q8_model(config: Config = SMOLLM2_135M, group_size: int = 32, seed: int = 0,
                    seq_len: int | None = None) -> LoadedModel:
    """A Q8 model with `config`'s shapes and random int8 weights (tied classifier)."""
    if seq_len is not None:
        config = Config(**{**config.__dict__, "seq_len": seq_len})
    c, gs = config, group_size
    rng = np.random.default_rng(seed)

    def q8(rows: int, cols: int) -> Q8Tensor:
        q = rng.integers(-127, 128, size=(rows, cols), dtype=np.int8)
        s = rng.uniform(0.5, 1.5, size=(rows, cols // gs)).astype(np.float32) / np.float32(1016)
        return Q8Tensor(q, s, gs)

    emb = q8(c.vocab_size, c.dim)
    L = c.n_layers
    w = Weights(tok_embeddings=emb,  # tied: the classifier's matrix is the table
                rms_att=rng.uniform(0.5, 1.5, (L, c.dim)).astype(np.float32),
                rms_ffn=rng.uniform(0.5, 1.5, (L, c.dim)).astype(np.float32),
                rms_final=rng.uniform(0.5, 1.5, c.dim).astype(np.float32), wcls=emb)
    for _ in range(L):
        w.wq.append(q8(c.dim, c.dim))
        w.wk.append(q8(c.kv_dim, c.dim))
        w.wv.append(q8(c.kv_dim, c.dim))
        w.wo.append(q8(c.dim, c.dim))
        w.w1.append(q8(c.hidden_dim, c.dim))
        w.w2.append(q8(c.dim, c.hidden_dim))
        w.w3.append(q8(c.hidden_dim, c.dim))
    return LoadedModel(c, w, f"<random Q8 gs{gs} {c.dim}x{c.hidden_dim}x{L}>", "synthetic")
