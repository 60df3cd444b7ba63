"""The one generation loop. A `GenerationConfig` says how much to generate, how to sample and
where to stop; a `Session` (an engine and the tokens its KV cache holds) runs it: the prompt is
prefilled (only past the prefix it shares with the cache), then tokens are sampled one by one.
`Session.pairs` yields (previous, next) token pairs exactly as run.c's loop prints them (with
`echo`, the prompt's own pieces first); `Session.text` turns them into UTF-8 text pieces cut
before any stop string. Every entry point (the Model methods, `isaforge run` and `chat`) is
one of these two over one config."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass, field
from numbers import Integral

import numpy as np

from ..text.stream import StopMatcher, StreamDecoder
from .sampler import Sampler, check_logit_bias, check_penalty, check_sampling, check_truncation

__all__ = ["ContextFullError", "GenerationConfig", "ModelBusyError", "Sampler", "Session",
           "Stats", "resolve_steps"]

DEFAULT_MAX_NEW = 512  # new tokens per reply when nothing else is said
REPEAT_LAST_N = 64  # tokens the repetition penalty looks back on (llama.cpp's)


class ContextFullError(ValueError):
    """The prompt (or conversation) does not fit in the context."""


class ModelBusyError(RuntimeError):
    """The model was used again from the thread whose generation on it is still open."""


@dataclass(frozen=True)
class GenerationConfig:
    """How much to generate, how to sample, where to stop. Fields left None take the model
    profile's defaults (`ModelProfile.complete`).

    max_new_tokens: sampled tokens at most (None: until the context is full); `steps`, when
      given, counts positions including the prompt instead (run.c's -n; 0: the whole context).
    temperature, top_p, seed: run.c's sampler (seed <= 0 or None: from the clock).
    repeat_penalty over the last repeat_last_n tokens: llama.cpp's (1.0: off).
    stop: strings the text ends before (never emitted, not even in part).
    stop_ids: token ids that end it (not emitted). echo: the prompt's own pieces first, as
      run.c prints them while it forces the prompt.
    top_k (0: off), min_p (0: off), typical_p (1: off), logit_bias ({token id: bias in
      [-100, 100]}), keywords only: llama.cpp's truncations and OpenAI's bias (Sampler).
    constraint: a text.grammar.Constraint (constraint_for): every step's logits masked to the
      tokens its grammar allows, the generation ending when the grammar is complete."""

    max_new_tokens: int | None = DEFAULT_MAX_NEW
    steps: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int = REPEAT_LAST_N
    stop: Sequence[str] = ()
    stop_ids: tuple[int, ...] | None = None
    echo: bool = False
    _: KW_ONLY
    top_k: int = 0
    min_p: float = 0.0
    typical_p: float = 1.0
    logit_bias: Mapping[int, float] | None = None
    constraint: object | None = None

    def __post_init__(self):
        stop = self.stop if self.stop is not None else ()
        if isinstance(stop, str) or not all(isinstance(s, str) for s in stop):
            raise ValueError("stop must be a list of strings")
        object.__setattr__(self, "stop", tuple(s for s in stop if s))
        for name in ("max_new_tokens", "steps", "seed", "repeat_last_n"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, Integral)):
                raise ValueError(f"{name} must be an integer or None, got {v!r}")
        for name in ("max_new_tokens", "steps"):
            v = getattr(self, name)
            if v is not None and v < 0:
                what = "--steps" if name == "steps" else "max_new_tokens"
                raise ValueError(f"{what} must be >= 0, got {v}")
        if self.repeat_last_n < 1:
            raise ValueError(f"repeat_last_n must be >= 1, got {self.repeat_last_n}")
        if self.stop_ids is not None:
            ids = self.stop_ids
            if isinstance(ids, (str, bytes)) or not all(
                    isinstance(t, Integral) and not isinstance(t, bool) for t in ids):
                raise ValueError(f"stop_ids must be a sequence of token ids, got {ids!r}")
            object.__setattr__(self, "stop_ids", tuple(int(t) for t in ids))
        if self.temperature is not None or self.top_p is not None:
            check_sampling(1.0 if self.temperature is None else self.temperature,
                           0.9 if self.top_p is None else self.top_p)
        if self.repeat_penalty is not None:
            check_penalty(self.repeat_penalty)
        check_truncation(self.top_k, self.min_p, self.typical_p)
        object.__setattr__(self, "logit_bias", check_logit_bias(self.logit_bias) or None)

    def replace(self, **changes) -> GenerationConfig:
        return dataclasses.replace(self, **changes)

    def new_tokens(self, n_prompt: int, seq_len: int) -> int:
        """Tokens to sample after an n_prompt-token prompt (negative: `steps` ends inside the
        prompt); the loop also ends when the context is full."""
        if self.steps is not None:
            return resolve_steps(n_prompt, seq_len, self.steps) - n_prompt + 1
        if self.max_new_tokens is None:
            return seq_len - n_prompt + 1
        return self.max_new_tokens


def resolve_steps(n_prompt: int, seq_len: int, steps: int | None = None) -> int:
    """Positions run.c's -n runs, the prompt's included: `steps` (default 256), or the whole
    context for 0 or anything past it."""
    steps = 256 if steps is None else steps
    if steps < 0:
        raise ValueError(f"--steps must be >= 0, got {steps}")
    return seq_len if steps == 0 or steps > seq_len else steps


@dataclass
class Stats:
    prompt_tokens: int = 0  # prefilled (after the cached prefix)
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


class Session:
    """An engine and the tokens whose K/V sit in its cache at positions 0.. (`cached`): a
    prompt that shares a prefix with them prefills only the rest, so a multi-turn chat runs
    only its new turn. `stats` describes the last generation.

    One call at a time: every engine call and the cached prefix are under the session's lock,
    held by a generation from its first token until it ends, is closed or is collected.
    Another thread waits for it; the thread holding it gets ModelBusyError (it would wait
    for itself)."""

    def __init__(self, engine):
        self.engine = engine
        self.cached: list[int] = []
        self.stats: Stats | None = None
        self._lock = threading.Lock()  # not an RLock: a generator may close in another thread
        self._owner: int | None = None

    @contextmanager
    def hold(self):
        """The session to this thread alone (waits while another thread holds it)."""
        me = threading.get_ident()
        if self._owner == me:
            raise ModelBusyError("the model is in use by an unfinished generation in this "
                                 "thread (finish or close() it first)")
        with self._lock:
            self._owner = me
            try:
                yield self
            finally:
                self._owner = None

    def logits(self, tokens: list[int]) -> np.ndarray:
        """(n, vocab) logits of `tokens` at positions 0..n-1, a fresh sequence."""
        with self.hold():
            self.cached = []
            out = self.engine.prefill(tokens, 0, all_logits=True)
            self.cached = list(tokens)
            return out

    def _prefill(self, tokens: list[int], stats: Stats) -> np.ndarray:
        k = 0
        for a, b in zip(self.cached, tokens[:-1], strict=False):  # always run >= 1 token
            if a != b:
                break
            k += 1
        self.cached = tokens[:k]
        t0 = time.perf_counter()
        logits = self.engine.prefill(tokens[k:], k)
        stats.prefill_s = time.perf_counter() - t0
        stats.prompt_tokens = len(tokens) - k
        self.cached = list(tokens)
        return logits

    def pairs(self, tokens: Sequence[int], config: GenerationConfig) -> Iterator[tuple[int, int]]:
        """(previous, next) token pairs as run.c's loop prints them: with config.echo the
        prompt's (forced, no stop id among them), then each sampled token until a stop id,
        the token budget or the end of the context. `config` is complete (no None sampling
        fields; see ModelProfile.complete). Checks the prompt before returning."""
        tokens = list(tokens)
        seq_len = self.engine.config.seq_len
        if not tokens:
            raise ValueError("the prompt encodes to no tokens")
        if len(tokens) > seq_len:
            raise ContextFullError(f"the prompt is {len(tokens)} tokens, longer than the "
                                   f"context ({seq_len}; see --ctx)")
        c = config
        check_logit_bias(c.logit_bias, self.engine.config.vocab_size)
        sampler = Sampler(c.temperature, c.top_p, c.seed, c.repeat_penalty, c.repeat_last_n,
                          top_k=c.top_k, min_p=c.min_p, typical_p=c.typical_p,
                          logit_bias=c.logit_bias)
        sampler.accept(tokens[-c.repeat_last_n:])
        matcher = c.constraint.matcher() if c.constraint is not None else None
        return self._held(tokens, c.new_tokens(len(tokens), seq_len), sampler,
                          tuple(c.stop_ids), c.echo, matcher)

    def _held(self, *args) -> Iterator[tuple[int, int]]:
        with self.hold():  # released when the loop ends, is closed or is collected
            self.stats = Stats()
            yield from self._loop(*args, self.stats)

    def _loop(self, tokens: list[int], new: int, sampler: Sampler, stop_ids: tuple[int, ...],
              echo: bool, matcher, stats: Stats) -> Iterator[tuple[int, int]]:
        n, seq_len = len(tokens), self.engine.config.seq_len
        if echo:  # run.c prints each prompt piece as it forces the token
            for pos in range(min(n - 1, n - 1 + new)):
                if tokens[pos + 1] in stop_ids:
                    return
                yield tokens[pos], tokens[pos + 1]
        if new < 0:
            return
        logits = self._prefill(tokens, stats)
        prev, pos = tokens[-1], n  # sampled tokens go to positions n .. (run.c's pos)
        for i in range(new):
            if matcher is not None:
                logits = np.array(logits, dtype=np.float32)  # the engine's own stays as it is
                if not matcher.mask(logits):
                    raise RuntimeError(f"structured output: {matcher.error}")
            nxt = sampler.sample(logits)
            if stats.new_tokens == 0:
                stats.ttft_s = time.perf_counter() - stats.started
            stats.new_tokens += 1
            if nxt in stop_ids:
                return
            if matcher is not None and not matcher.advance(nxt):
                raise RuntimeError(f"structured output: {matcher.error}")
            yield prev, nxt
            if matcher is not None and matcher.finished:  # complete: nothing may follow
                return
            if i + 1 == new or pos >= seq_len:  # nothing will read this token's logits
                return
            t1 = time.perf_counter()
            logits = self.engine.forward(nxt, pos)
            stats.decode_s += time.perf_counter() - t1
            stats.decode_tokens += 1
            self.cached.append(nxt)
            prev, pos = nxt, pos + 1

    def text(self, tokens: Sequence[int], config: GenerationConfig,
             tokenizer) -> Iterator[str]:
        """`pairs` as UTF-8 text pieces (never splitting a character), ending before the
        first of config.stop, of which nothing is ever emitted."""
        tokens = list(tokens)
        pairs = self.pairs(tokens, config)
        dec = StreamDecoder(tokenizer, tokens[0] if config.echo else tokens[-1])
        return _cut(dec.stream(nxt for _, nxt in pairs), config.stop, pairs)


def _cut(pieces: Iterator[str], stops: tuple[str, ...], pairs) -> Iterator[str]:
    matcher = StopMatcher(stops)
    try:
        for piece in pieces:
            piece, stopped = matcher.feed(piece)
            if piece:
                yield piece
            if stopped:
                return
        if rest := matcher.flush():
            yield rest
    finally:
        pairs.close()  # a reply cut short (or abandoned) stops the loop at once
