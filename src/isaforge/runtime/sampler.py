"""run.c's sampler (argmax, softmax with one xorshift* coin, top-p), optionally behind
llama.cpp's repetition penalty; the argument checks every front end shares; and the same
sampling for the rows of a batch at once (`penalize_rows`, `draw_rows`: token for token and
state for state what each row's Sampler.sample gives, in a few numpy calls per step)."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Sequence

import numpy as np

from .. import _native


def check_sampling(temperature: float, top_p: float) -> None:
    """Reject what run.c would silently clamp: a negative temperature, top-p outside [0, 1]."""
    finite = isinstance(temperature, (int, float)) and math.isfinite(temperature)
    if not finite or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if not (isinstance(top_p, (int, float)) and 0.0 <= top_p <= 1.0):
        raise ValueError(f"top-p must be in [0, 1], got {top_p!r}")


def check_penalty(repeat_penalty: float) -> None:
    if not (isinstance(repeat_penalty, (int, float)) and math.isfinite(repeat_penalty)
            and repeat_penalty > 0):
        raise ValueError(f"the repeat penalty must be a finite number > 0, got {repeat_penalty!r}")


class Sampler:
    """run.c's sampler: argmax at temperature 0, else softmax(logits / T) with one xorshift*
    coin per token, top-p when 0 < p < 1, multinomial otherwise. Seed <= 0 (or None) means
    "from the clock", as upstream.

    repeat_penalty != 1 first applies llama.cpp's repetition penalty: every distinct token
    among the last `repeat_last_n` seen (prompt tokens given to `accept`, then each sampled
    token) has its logit divided by the penalty when positive, multiplied when not. 1.0 (the
    default, and always for llama2.c files) leaves run.c's sampler untouched."""

    def __init__(self, temperature: float = 1.0, top_p: float = 0.9, seed: int | None = None,
                 repeat_penalty: float = 1.0, repeat_last_n: int = 64):
        check_sampling(temperature, top_p)
        check_penalty(repeat_penalty)
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        seed = int(seed) if seed is not None else 0
        self.seed = seed if seed > 0 else int(time.time())
        self.state = self.seed & 0xFFFFFFFFFFFFFFFF
        self.repeat_penalty = float(repeat_penalty)
        self.history: deque[int] = deque(maxlen=max(int(repeat_last_n), 1))

    def accept(self, tokens: Iterable[int]) -> None:
        """Tokens the repetition penalty should see (the prompt's, before sampling)."""
        self.history.extend(int(t) for t in tokens)

    def sample(self, logits: np.ndarray) -> int:
        buf = np.array(logits, dtype=np.float32, copy=True)  # run.c overwrites its logits
        if self.repeat_penalty != 1.0 and self.history:
            ids = np.fromiter(set(self.history), dtype=np.int64)
            ids = ids[(ids >= 0) & (ids < buf.size)]
            v = buf[ids]
            pen = np.float32(self.repeat_penalty)
            buf[ids] = np.where(v > 0, v / pen, v * pen)
        token, self.state = _native.sample(buf, self.temperature, self.top_p, self.state)
        self.history.append(token)
        return token


def penalize_rows(samplers: Sequence[Sampler], logits: np.ndarray) -> None:
    """Apply each row's repetition penalty in place: row r of `logits` (rows, vocab) float32
    becomes the buffer samplers[r].sample would draw from, the float32 operations on each
    element being its own; the rows' penalties go through one gather and one scatter."""
    rows, cols, pens = [], [], []
    vocab = logits.shape[1]
    for r, s in enumerate(samplers):
        if s.repeat_penalty != 1.0 and s.history:
            ids = [t for t in set(s.history) if 0 <= t < vocab]
            rows += [r] * len(ids)
            cols += ids
            pens += [s.repeat_penalty] * len(ids)
    if not rows:
        return
    ri, ci = np.array(rows, dtype=np.intp), np.array(cols, dtype=np.intp)
    pen = np.array(pens, dtype=np.float32)
    v = logits[ri, ci]
    logits[ri, ci] = np.where(v > 0, v / pen, v * pen)


def draw_rows(samplers: Sequence[Sampler], logits: np.ndarray) -> list[int]:
    """Draw row r's token with samplers[r] from `logits` (rows, vocab) float32, C-contiguous,
    already penalized (penalize_rows): the argmax of every temperature-0 row in one call
    (first maximum, as the C argmax; a row holding a NaN goes to the C sampler, whose
    comparisons treat it differently), the C sampler on each other row in place (its coin
    from the row's RNG state). Each sampler's state and history move on as in sample()."""
    toks = [0] * len(samplers)
    greedy = [r for r, s in enumerate(samplers) if np.float32(s.temperature) == 0]
    native = [r for r, s in enumerate(samplers) if np.float32(s.temperature) != 0]
    if greedy:
        sub = logits if len(greedy) == len(samplers) else logits[greedy]
        best = np.argmax(sub, axis=1)
        nan = np.isnan(sub[np.arange(len(greedy)), best])
        for j, r in enumerate(greedy):
            if nan[j]:
                native.append(r)
            else:
                toks[r] = int(best[j])
    for r in native:
        s = samplers[r]
        toks[r], s.state = _native.sample(logits[r], s.temperature, s.top_p, s.state)
    for r, s in enumerate(samplers):
        s.history.append(toks[r])
    return toks
