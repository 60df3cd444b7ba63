"""The token table of a loaded model: quantized like its classifier (no float32 copy)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..quant.q4 import Q4Tensor
from ..types import LoadedModel, Q8Tensor


def quantized_table(loaded: LoadedModel) -> LoadedModel:
    """`loaded` with no float32 token table when its classifier is quantized: a tied
    classifier's matrix is the table (one copy; its rows are dequantized on lookup), an untied
    model's table is Q8 at the classifier's group size (Q8_0's 32 for a 4-bit classifier, or the
    largest power of two dividing dim). Float32 models keep their float32 table."""
    from ..quant.q8 import as_q8, halved_group

    w = loaded.weights
    if not isinstance(w.wcls, (Q8Tensor, Q4Tensor)):
        return loaded
    if loaded.config.shared_classifier:
        tok = w.wcls
    elif isinstance(w.tok_embeddings, np.ndarray):
        gs = w.wcls.group_size if isinstance(w.wcls, Q8Tensor) else 32
        tok = as_q8(w.tok_embeddings, halved_group(gs, loaded.config.dim))
    else:
        return loaded
    if tok is w.tok_embeddings:
        return loaded
    return dataclasses.replace(loaded, weights=dataclasses.replace(w, tok_embeddings=tok))
