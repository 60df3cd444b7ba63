"""run.c's sampler (argmax, softmax with one xorshift* coin, top-p), optionally behind
llama.cpp's repetition penalty, OpenAI's logit bias and llama.cpp's top-k, locally typical and
min-p truncation; the argument checks every front end shares; and the same sampling for the
rows of a batch at once (`penalize_rows`, `draw_rows`: token for token and state for state
what each row's Sampler.sample gives, in a few numpy calls per step).

Every step is reproducible on any CPU: the truncations compare logits, take probabilities
from the core's softmax (its own expf) and sum in float64 with math.fsum or in a fixed order;
no BLAS call and no numpy transcendental (whose SIMD versions differ between CPUs)."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real

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


MAX_BIAS = 100.0  # OpenAI's logit_bias range: [-100, 100]


def check_truncation(top_k: int = 0, min_p: float = 0.0, typical_p: float = 1.0) -> None:
    """top_k an integer >= 0 (0: off), min_p in [0, 1] (0: off), typical_p in [0, 1] (1:
    off); anything else (a bool, NaN) is refused."""
    if isinstance(top_k, bool) or not isinstance(top_k, Integral) or top_k < 0:
        raise ValueError(f"top-k must be an integer >= 0 (0: off), got {top_k!r}")
    for name, v in (("min-p", min_p), ("typical-p", typical_p)):
        if isinstance(v, bool) or not isinstance(v, Real) or not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")


def check_logit_bias(bias: Mapping | None, vocab: int | None = None) -> dict[int, float]:
    """{token id: bias} with ids >= 0 (below `vocab` when given) and biases in [-100, 100]."""
    if bias is None:
        return {}
    if not isinstance(bias, Mapping):
        raise ValueError(f"logit_bias must map token ids to numbers, got {bias!r}")
    out = {}
    for k, v in bias.items():
        if isinstance(k, bool) or not isinstance(k, Integral) or k < 0 or (
                vocab is not None and k >= vocab):
            rng = "an integer >= 0" if vocab is None else f"in [0, {vocab})"
            raise ValueError(f"logit_bias: token id {k!r} is not {rng}")
        if isinstance(v, bool) or not isinstance(v, Real) or not -MAX_BIAS <= v <= MAX_BIAS:
            raise ValueError(f"logit_bias: the bias of token {k} must be a number in "
                             f"[-100, 100], got {v!r}")
        out[int(k)] = float(v)
    return out


class Sampler:
    """run.c's sampler: argmax at temperature 0, else softmax(logits / T) with one xorshift*
    coin per token, top-p when 0 < p < 1, multinomial otherwise. Seed <= 0 (or None) means
    "from the clock", as upstream.

    repeat_penalty != 1 first applies llama.cpp's repetition penalty: every distinct token
    among the last `repeat_last_n` seen (prompt tokens given to `accept`, then each sampled
    token) has its logit divided by the penalty when positive, multiplied when not. 1.0 (the
    default, and always for llama2.c files) leaves run.c's sampler untouched.

    logit_bias {id: b} then adds float32(b) to those logits (OpenAI's; what logprobs report
    includes it). At temperature > 0 the candidates are then cut, in llama.cpp's order, by
    top_k (the k highest logits, ties to the lower id), typical_p (llama.cpp's locally typical
    sampling: by |E_p[logit] - logit|, which is |-log p - H|, the fewest whose probability sums
    past typical_p) and min_p (probability >= min_p times the highest), and run.c's
    temperature and top-p run on what is left (its ids in ascending order). Temperature 0 is
    the argmax of the biased logits whatever the truncation; top_k = 1 gives the same token."""

    def __init__(self, temperature: float = 1.0, top_p: float = 0.9, seed: int | None = None,
                 repeat_penalty: float = 1.0, repeat_last_n: int = 64, *, top_k: int = 0,
                 min_p: float = 0.0, typical_p: float = 1.0,
                 logit_bias: Mapping[int, float] | None = None):
        check_sampling(temperature, top_p)
        check_penalty(repeat_penalty)
        check_truncation(top_k, min_p, typical_p)
        bias = check_logit_bias(logit_bias)
        self.top_k, self.min_p, self.typical_p = int(top_k), float(min_p), float(typical_p)
        self.bias_ids = np.fromiter(bias, dtype=np.intp, count=len(bias))
        self.bias = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
        self.truncates = self.top_k > 0 or self.min_p > 0 or self.typical_p < 1
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
        if self.bias.size:
            keep = self.bias_ids < buf.size
            buf[self.bias_ids[keep]] += self.bias[keep]
        token = self.draw(buf)
        self.history.append(token)
        return token

    def draw(self, buf: np.ndarray) -> int:
        """The token from `buf` (float32, C-contiguous, penalized and biased; overwritten),
        the RNG state moved on; the history is the caller's."""
        if self.truncates and np.float32(self.temperature) != 0:
            ids = self.candidates(buf)
            if ids.size < buf.size:
                sub = np.ascontiguousarray(buf[ids])
                k, self.state = _native.sample(sub, self.temperature, self.top_p, self.state)
                return int(ids[k])
        token, self.state = _native.sample(buf, self.temperature, self.top_p, self.state)
        return token

    def candidates(self, row: np.ndarray) -> np.ndarray:
        """The ids top_k, typical_p and min_p keep of `row` (float32), ascending; never none
        (a row whose comparisons keep nothing, NaN, keeps its argmax)."""
        n = row.size
        ids = np.arange(n)
        if 0 < self.top_k < n:
            k = self.top_k
            kth = np.partition(row, n - k)[n - k]
            above = np.flatnonzero(row > kth)
            ties = np.flatnonzero(row == kth)[:max(k - above.size, 0)]
            ids = np.union1d(above, ties)
        if self.typical_p < 1 and ids.size > 1:
            ids = np.sort(ids[_typical(row[ids], self.typical_p)])
        if self.min_p > 0 and ids.size > 1:
            p = np.array(row[ids], dtype=np.float32)
            _native.softmax(p)
            ids = ids[p.astype(np.float64) >= self.min_p * float(p.max())]
        if ids.size == 0:
            ids = np.array([int(np.argmax(row))])
        return ids


def _typical(x: np.ndarray, mass: float) -> np.ndarray:
    """Positions of the logits `x` (float32) locally typical sampling keeps: by ascending
    |E_p[x] - x| (ties: the lower position), the fewest whose probabilities sum past `mass`.
    Only the smallest scores are sorted (k of them, k growing fourfold until the sum crosses
    `mass` before the k-th score's ties), which keeps exactly what sorting all would."""
    p = np.array(x, dtype=np.float32)
    _native.softmax(p)  # the core's softmax: the same bits on every CPU
    p64, x64 = p.astype(np.float64), x.astype(np.float64)
    mean = math.fsum((p64 * x64).tolist())  # exact products, one correct rounding
    score = np.abs(x64 - mean)
    n, k = score.size, 256
    while k < n:
        part = np.argpartition(score, k - 1)[:k]  # the k smallest, ties at the k-th in any order
        part = part[np.lexsort((part, score[part]))]
        safe = int(np.count_nonzero(score[part] < score[part[-1]]))  # the order is settled
        cum = np.cumsum(p64[part[:safe]])  # sequential: the prefix of the full cumsum
        past = np.flatnonzero(cum > mass)
        if past.size:
            return part[:int(past[0]) + 1]
        k *= 4
    order = np.argsort(score, kind="stable")
    past = np.flatnonzero(np.cumsum(p64[order]) > mass)
    return order[:int(past[0]) + 1 if past.size else n]


def penalize_rows(samplers: Sequence[Sampler], logits: np.ndarray) -> None:
    """Apply each row's repetition penalty and logit bias in place: row r of `logits` (rows,
    vocab) float32 becomes the buffer samplers[r].sample would draw from, the float32
    operations on each element being its own; the rows' penalties go through one gather and
    one scatter, their biases through another."""
    rows, cols, pens = [], [], []
    vocab = logits.shape[1]
    for r, s in enumerate(samplers):
        if s.repeat_penalty != 1.0 and s.history:
            ids = [t for t in set(s.history) if 0 <= t < vocab]
            rows += [r] * len(ids)
            cols += ids
            pens += [s.repeat_penalty] * len(ids)
    if rows:
        ri, ci = np.array(rows, dtype=np.intp), np.array(cols, dtype=np.intp)
        pen = np.array(pens, dtype=np.float32)
        v = logits[ri, ci]
        logits[ri, ci] = np.where(v > 0, v / pen, v * pen)
    biased = [(r, s) for r, s in enumerate(samplers) if s.bias.size]
    if biased:  # after the penalty, as sample() adds it
        keep = [s.bias_ids < vocab for _, s in biased]
        ri = np.concatenate([np.full(int(k.sum()), r, np.intp) for (r, _), k in
                             zip(biased, keep, strict=True)])
        ci = np.concatenate([s.bias_ids[k] for (_, s), k in zip(biased, keep, strict=True)])
        b = np.concatenate([s.bias[k] for (_, s), k in zip(biased, keep, strict=True)])
        logits[ri, ci] += b


def draw_rows(samplers: Sequence[Sampler], logits: np.ndarray) -> list[int]:
    """Draw row r's token with samplers[r] from `logits` (rows, vocab) float32, C-contiguous,
    already penalized (penalize_rows): the argmax of every temperature-0 row in one call
    (first maximum, as the C argmax; a row holding a NaN goes to the C sampler, whose
    comparisons treat it differently), Sampler.draw on each other row in place (its coin
    from the row's RNG state, truncated as the row's sampler says). Each sampler's state
    and history move on as in sample()."""
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
        toks[r] = samplers[r].draw(logits[r])
    for r, s in enumerate(samplers):
        s.history.append(toks[r])
    return toks
