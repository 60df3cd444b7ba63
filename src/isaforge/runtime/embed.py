"""Embeddings: one vector per text, pooled from the final hidden states the core writes
(Engine.hidden: after the last layer and the final norm, the rows the classifier reads).

Pooling: "mean" over every position (the default), "last" (the last position's row: what a
causal model has read the whole text at) or "cls" (the first position's, for models trained
to put the summary there). A GGUF file's `<arch>.pooling_type` (llama.cpp's numbering: 1 mean,
2 cls, 3 last) picks the model's own. Sums run in float64 and the result is rounded once to
float32, so a text's vector depends only on its tokens: the same bits alone or in any batch,
at any tier, thread count or chunk size (the hidden states are)."""

from __future__ import annotations

import numpy as np

__all__ = ["POOLINGS", "check_pooling", "embed_tokens", "pooling_for"]

POOLINGS = ("mean", "last", "cls")
_GGUF_POOLING = {1: "mean", 2: "cls", 3: "last"}  # llama.cpp's enum llama_pooling_type


def pooling_for(metadata: dict) -> str:
    """The model's pooling: its GGUF `<arch>.pooling_type` when that is one of POOLINGS'
    (none, rank and unknown values fall back), else "mean"."""
    arch = metadata.get("general.architecture")
    v = metadata.get(f"{arch}.pooling_type") if isinstance(arch, str) else None
    try:
        return _GGUF_POOLING.get(int(v), "mean") if v is not None else "mean"
    except (TypeError, ValueError):
        return "mean"


def check_pooling(pooling: str) -> str:
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {pooling!r}")
    return pooling


def embed_tokens(engine, tokens: list[int], pooling: str = "mean", normalize: bool = True,
                 seq: int = 0) -> np.ndarray:
    """(dim,) float32: `tokens` run at positions 0.. in slot `seq` (its cache then holds
    them), their hidden states pooled, L2-normalized unless normalize=False (a zero vector
    stays zero)."""
    check_pooling(pooling)
    if not tokens:
        raise ValueError("the text encodes to no tokens")
    if pooling == "last":
        v = engine.hidden(tokens, last=True, seq=seq).astype(np.float64)
    else:
        h = engine.hidden(tokens, seq=seq)
        v = h[0].astype(np.float64) if pooling == "cls" else h.astype(np.float64).mean(axis=0)
    if normalize:
        norm = np.sqrt(np.dot(v, v))
        if norm > 0:
            v = v / norm
    return v.astype(np.float32)
