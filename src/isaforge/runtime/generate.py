"""Sampler and generation loops: run.c's exactly, and the chat loop (KV-cache aware)."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

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


@dataclass
class Stats:
    prompt_tokens: int = 0
    prefill_s: float = 0.0
    decode_tokens: int = 0  # forward calls after the prefill
    decode_s: float = 0.0
    ttft_s: float = 0.0  # start to the first sampled token
    new_tokens: int = 0
    started: float = field(default_factory=time.perf_counter)

    @property
    def prefill_tps(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else 0.0


def generate_tokens(engine, prompt_tokens: list[int], steps: int, sampler: Sampler,
                    stop_ids: tuple[int, ...] = (1,), stats: Stats | None = None
                    ) -> Iterator[tuple[int, int]]:
    """run.c's loop: positions 0 .. steps-1; prompt tokens are forced, then sampled tokens.
    Yields (previous token, next token) for every token run.c would print; stops when the
    next token is in stop_ids (run.c: BOS). The prompt is prefilled in one call, which
    gives the same logits as run.c's token-by-token loop."""
    n = len(prompt_tokens)
    if n < 1:
        raise ValueError("the prompt encodes to no tokens")
    seq_len = engine.config.seq_len
    if n > seq_len:
        raise ValueError(f"the prompt is {n} tokens, longer than the model's context ({seq_len})")
    stats = stats or Stats()
    stats.prompt_tokens = n
    # prompt pieces run.c prints while forcing the prompt
    for pos in range(min(n - 1, steps)):
        if prompt_tokens[pos + 1] in stop_ids:
            return
        yield prompt_tokens[pos], prompt_tokens[pos + 1]
    if steps < n:
        return
    t0 = time.perf_counter()
    logits = engine.prefill(prompt_tokens, 0)
    stats.prefill_s = time.perf_counter() - t0
    prev = prompt_tokens[-1]  # sampled tokens go to positions n .. steps - 1 (run.c's pos)
    for nxt in sample_tokens(engine, logits, n, steps - n + 1, sampler, stop_ids, stats, []):
        yield prev, nxt
        prev = nxt


def resolve_steps(n_prompt: int, seq_len: int, steps: int | None = None,
                  new_tokens: int | None = None) -> int:
    """Positions to run. `steps` counts positions including the prompt (run.c's -n; 0 or
    past the context means the whole context); `new_tokens` counts sampled tokens."""
    if new_tokens is not None:
        if new_tokens < 0:
            raise ValueError(f"the number of new tokens must be >= 0, got {new_tokens}")
        return min(n_prompt - 1 + new_tokens, seq_len)
    steps = 256 if steps is None else steps
    if steps < 0:
        raise ValueError(f"--steps must be >= 0, got {steps}")
    return seq_len if steps == 0 or steps > seq_len else steps


def sample_tokens(engine, logits: np.ndarray, pos: int, limit: int, sampler: Sampler,
                  stop_ids: tuple[int, ...], stats: Stats, cached: list[int]) -> Iterator[int]:
    """Sample up to `limit` tokens after a prefill that left `logits` for position `pos`.
    Each yielded token but the last is then run at the next position (while the context has
    room) and appended to `cached`, the list of tokens whose K/V are in the cache. Ends before
    a stop id."""
    seq_len = engine.config.seq_len
    for i in range(limit):
        nxt = sampler.sample(logits)
        if stats.new_tokens == 0:
            stats.ttft_s = time.perf_counter() - stats.started
        stats.new_tokens += 1
        if nxt in stop_ids:
            return
        yield nxt
        if i + 1 == limit or pos >= seq_len:  # nothing will read this token's logits
            return
        t1 = time.perf_counter()
        logits = engine.forward(nxt, pos)
        stats.decode_s += time.perf_counter() - t1
        stats.decode_tokens += 1
        cached.append(nxt)
        pos += 1
