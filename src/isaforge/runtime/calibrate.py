"""Calibration for error-compensating 4-bit assignment (quant.cq4.gptq_cq4): the second moment
H = sum_t x_t x_t^T of every layer matrix's inputs while the float64 reference model
(reference.py) reads a calibration text, one token at a time."""

from __future__ import annotations

import os

import numpy as np

from ..reference import Reference
from ..types import LAYER_MATRICES, LoadedModel


class _Recorder(Reference):
    def __init__(self, config, weights):
        super().__init__(config, weights)
        self.xs: dict[int, list[np.ndarray]] = {}
        self.f64: dict[int, np.ndarray] = {}

    def matmul(self, w, x):
        if w is self.w.wcls:  # the logits are not needed
            return np.zeros(self.c.vocab_size)
        self.xs.setdefault(id(w), []).append(np.array(x))
        k = id(w)
        if k not in self.f64:  # float64 weights once, not per token
            self.f64[k] = w.dequantize().astype(np.float64) if hasattr(w, "dequantize") \
                else np.asarray(w, np.float64)
        return self.f64[k] @ x


def hessians(loaded: LoadedModel, tokens: list[int], log=None
              ) -> dict[tuple[str, int], np.ndarray]:
    """{(matrix name, layer): H (cols, cols)} over `tokens` (windows of 512 positions),
    from the float weights of `loaded` (Q8 matrices are read as the reference reads them)."""
    import dataclasses

    c, w = loaded.config, loaded.weights
    c = dataclasses.replace(c, seq_len=min(c.seq_len, 512))
    rec = _Recorder(c, w)
    n = len(tokens)
    for start in range(0, n, c.seq_len):
        rec.reset()
        for pos, tok in enumerate(tokens[start:start + c.seq_len]):
            rec.forward(int(tok), pos)
            if log and (start + pos) % 64 == 63:
                log(f"\rcalibrating: {start + pos + 1}/{n} tokens")
    if log:
        log("\n")
    out = {}
    for name in LAYER_MATRICES:
        for layer in range(c.n_layers):
            xs = rec.xs.get(id(getattr(w, name)[layer]))
            if xs is not None:
                x = np.stack(xs)
                out[(name, layer)] = x.T @ x
    return out


CALIBRATION_TOKENS = 512
# "generated": the model's own samples (generated_tokens) from prompts cut from the calibration
# text; "text": the calibration text itself
CALIBRATE_ON = os.environ.get("ISAFORGE_CALIBRATE_ON", "generated")


def calibration_text(chars: int = 40_000) -> str:
    """The default calibration text: Python's reference documentation (pydoc_data.topics, PSF
    License), its topics in sorted order from character 100,000 on; not the evaluation text
    (`isaforge eval` scores The Devil's Dictionary by default)."""
    import pydoc_data.topics as topics

    return "".join(topics.topics[k] for k in sorted(topics.topics))[100_000:100_000 + chars]


def generated_tokens(loaded: LoadedModel, prompt: list[int], n: int = CALIBRATION_TOKENS,
                     windows: int = 4, seed: int = 0) -> list[int]:
    """Calibration tokens the float model writes itself (data-free, in its own domain): `windows`
    sequences, each started from 8 tokens of `prompt` at a different offset and continued by
    sampling the model's distribution at temperature 1 (numpy RNG `seed`), n tokens in all."""
    from .engine import Engine

    rng = np.random.default_rng(seed)
    eng = Engine(loaded, threads=None)
    per = n // windows
    out: list[int] = []
    for wi in range(windows):
        off = (wi * max(1, (len(prompt) - 8) // windows)) % max(1, len(prompt) - 8)
        seq = list(prompt[off:off + 8])
        logits = eng.prefill(seq, 0)
        while len(seq) < per:
            p = np.exp(logits.astype(np.float64) - logits.max())
            t = int(rng.choice(len(p), p=p / p.sum()))
            seq.append(t)
            logits = eng.forward(t, len(seq) - 1)
        out += seq
    return out
