"""Continuous batching: many sequences decoded together through one engine.

`BatchEngine` is an Engine whose C model holds `n_seqs` KV caches (sequence slots): a prompt
is prefilled into one slot, and one decode step runs a token for every active slot in a single
forward call (the projections one GEMM at M = rows, attention per row over its own slot). Each
row's logits equal those of the same sequence run alone, bit for bit, so a request's output at
temperature 0 (or with a seed at any temperature) does not depend on what else is running.

`Scheduler` owns an Engine (a BatchEngine, or any engine: a one-slot one runs its requests
one after another) in one thread: requests wait in a bounded queue, are admitted
into free slots (the slot whose cached tokens share the longest prefix with the prompt, so a
conversation's next turn prefills only its new tokens), and every step is one forward call
(`BatchEngine.step`) over a decode row of each running sequence plus chunks of waiting
prompts (at most `prefill_chunk` prompt tokens per step, oldest first: a long prompt never
stalls the others' decoding for more than a chunk, many short prompts start in one step);
sequences decode together until a stop id, their token budget, the end of the context or
cancellation (a client gone, a stop string matched). Sequences join and leave between steps.
A request with a `constraint` (text.grammar) has its row's logits masked to what its grammar
allows before sampling, from a parse state of its own, and ends ("stop") when the grammar is
complete; the other rows of the step are not touched.

Each request gets its events through a callback from the scheduler thread: ("token", id,
logprobs or None) per sampled token and ("done", finish_reason, None) once, finish_reason
"stop" (a stop id), "length" (budget or context) or "cancelled"; ("error", message, None) if
the engine failed. Step listeners (`add_step_listener`) are called from the same thread after
every step, once its events are all out: a listener that relays events to another thread
can wake it once per step rather than once per token.

Work that is not a generation but needs the engine (an embedding: `Scheduler.run_job`) runs in
the same thread between steps, in a free slot, before waiting requests are admitted.
"""

from __future__ import annotations

import collections
import concurrent.futures
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..text.grammar import mask_rows
from .engine import Engine
from .generate import REPEAT_LAST_N
from .sampler import Sampler, check_logit_bias, draw_rows, penalize_rows

__all__ = ["BatchEngine", "QueueFullError", "Request", "Scheduler", "SchedulerStats"]


class BatchEngine(Engine):
    """An Engine with `n_seqs` KV cache slots (kv_cache_bytes counts them all)."""

    def __init__(self, model, n_seqs: int, threads: int | None = None, ubatch: int = 0,
                 kv_cache: str = "f32", kernel: str | None = None):
        if isinstance(n_seqs, bool) or not isinstance(n_seqs, int) or n_seqs < 1:
            raise ValueError(f"n_seqs must be an integer >= 1, got {n_seqs!r}")
        super().__init__(model, threads, ubatch=ubatch, kv_cache=kv_cache, kernel=kernel,
                         n_seqs=n_seqs)

    def decode_batch(self, seqs, tokens, positions) -> np.ndarray:
        """One step: tokens[r] at positions[r] in slot seqs[r] (distinct); (rows, vocab)."""
        t = np.ascontiguousarray(tokens, dtype=np.int32)
        out = np.empty((len(t), self.config.vocab_size), np.float32)
        self._m.decode_batch(t, np.ascontiguousarray(seqs, dtype=np.uintp),
                             np.ascontiguousarray(positions, dtype=np.uintp), out)
        return out


class QueueFullError(RuntimeError):
    """The scheduler's queue is full (the server answers 429)."""


@dataclass
class Request:
    """One generation: the prompt's token ids, how many to sample, how, and where to stop.
    `emit(kind, value, extra)` is called from the scheduler thread (see the module doc)."""

    tokens: list[int]
    max_new: int
    emit: Callable[[str, object, object], None]
    temperature: float = 1.0
    top_p: float = 0.9
    seed: int | None = None
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    top_k: int = 0  # llama.cpp's truncations and OpenAI's bias: see Sampler
    min_p: float = 0.0
    typical_p: float = 1.0
    logit_bias: dict[int, float] | None = None
    stop_ids: tuple[int, ...] = ()
    logprobs: int | None = None  # None: off; k >= 0: the chosen token's and the top k
    # a text.grammar.Constraint: each step's logits masked to what its grammar allows, the
    # request done ("stop") when the grammar is complete
    constraint: object | None = None
    cancelled: bool = False
    # filled by the scheduler
    submitted: float = field(default_factory=time.perf_counter)
    first_token_s: float | None = None
    prompt_cached: int = 0  # prompt tokens whose K/V were already in the slot
    on_cancel: Callable[[Request], None] | None = field(default=None, repr=False)

    def cancel(self) -> None:
        """Stop at the next step (safe from any thread); the slot is then free, and a request
        still waiting leaves the queue at once."""
        self.cancelled = True
        if self.on_cancel is not None:
            self.on_cancel(self)


@dataclass
class SchedulerStats:
    requests: int = 0
    rejected: int = 0
    abandoned: int = 0  # cancelled while waiting for a slot (their clients left)
    prompt_tokens: int = 0
    prefill_tokens: int = 0  # prompt tokens actually run (after cached prefixes)
    prefill_s: float = 0.0
    generated_tokens: int = 0
    decode_steps: int = 0
    decode_rows: int = 0
    decode_s: float = 0.0
    ttft: list[float] = field(default_factory=list)  # recent times to first token (s)
    ttft_count: int = 0  # all of them


class _Slot:
    def __init__(self, idx: int):
        self.idx = idx
        self.cached: list[int] = []  # tokens whose K/V sit at positions 0.. of this slot
        self.req: Request | None = None
        self.todo: list[int] = []  # prompt tokens still to prefill
        self.pos = 0  # next position
        self.last = 0  # the token to run next (decoding)
        self.sampler: Sampler | None = None
        self.matcher = None  # the request's grammar state (Constraint.matcher()), or None
        self.counts: collections.Counter = collections.Counter()
        self.new = 0


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max()
    return x - (m + math.log(np.exp(x - m).sum()))


class Scheduler:
    """Runs `engine` (a BatchEngine) in a thread of its own; see the module doc.

    max_queue: requests waiting for a slot before submit raises QueueFullError.
    prefill_chunk: prompt tokens prefilled per step (between decode steps), over as many
      waiting prompts as it covers, the oldest first."""

    TTFT_KEEP = 4096

    def __init__(self, engine: BatchEngine, max_queue: int = 64, prefill_chunk: int = 256):
        self.engine = engine
        self.seq_len = engine.config.seq_len
        self.slots = [_Slot(i) for i in range(engine.n_seqs)]
        self.max_queue = max_queue
        self.prefill_chunk = max(1, prefill_chunk)
        self.stats = SchedulerStats()
        self._queue: collections.deque[Request] = collections.deque()
        self._jobs: collections.deque = collections.deque()  # (fn, future): run_job's
        self._cv = threading.Condition()
        self._stop = False
        self._listeners: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._run, name="isaforge-scheduler",
                                        daemon=True)
        self._thread.start()

    # -- the caller's side -------------------------------------------------------------------

    def submit(self, req: Request) -> None:
        if not req.tokens:
            raise ValueError("the prompt encodes to no tokens")
        if len(req.tokens) >= self.seq_len + 1:
            raise ValueError(f"the prompt is {len(req.tokens)} tokens, longer than the "
                             f"context ({self.seq_len})")
        Sampler(req.temperature, req.top_p, req.seed, req.repeat_penalty, top_k=req.top_k,
                min_p=req.min_p, typical_p=req.typical_p, logit_bias=check_logit_bias(
                    req.logit_bias, self.engine.config.vocab_size))  # its errors, here
        with self._cv:
            if self._stop:
                raise QueueFullError("the server is shutting down")
            if len(self._queue) >= self.max_queue:
                self.stats.rejected += 1
                raise QueueFullError(f"{len(self._queue)} requests are waiting (the queue "
                                     f"holds {self.max_queue})")
            self.stats.requests += 1
            req.on_cancel = self._withdraw
            self._queue.append(req)
            self._cv.notify()

    def run_job(self, fn) -> concurrent.futures.Future:
        """fn(engine, slot) run in the scheduler thread between steps, in a free slot (the
        one whose cached prefix is shortest; fn may overwrite its cache: the slot is then
        counted empty); a future of its result. Jobs go before waiting requests."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._cv:
            if self._stop:
                raise QueueFullError("the server is shutting down")
            self._jobs.append((fn, fut))
            self._cv.notify()
        return fut

    def _run_jobs(self) -> None:
        while self._jobs:
            free = [s for s in self.slots if s.req is None]
            if not free:
                return
            try:
                fn, fut = self._jobs.popleft()
            except IndexError:  # close() took them meanwhile
                return
            if not fut.set_running_or_notify_cancel():
                continue
            slot = min(free, key=lambda s: (len(s.cached), s.idx))
            slot.cached = []  # whatever fn leaves there is not a prefix a request can reuse
            try:
                fut.set_result(fn(self.engine, slot.idx))
            except Exception as e:
                fut.set_exception(e)

    def _withdraw(self, req: Request) -> None:
        """A cancelled request leaves the queue now, not when it would have reached a slot:
        its place is free for the next submit (nobody listens for its events)."""
        with self._cv:
            req.on_cancel = None
            for k, r in enumerate(self._queue):
                if r is req:  # identity: equal requests are still different requests
                    del self._queue[k]
                    self.stats.abandoned += 1
                    return

    def add_step_listener(self, fn: Callable[[], None]) -> None:
        """Call fn() from the scheduler thread after each step, when that step's events have
        all been emitted (a failing listener is ignored)."""
        self._listeners.append(fn)

    @property
    def alive(self) -> bool:
        """Whether the scheduler thread still runs (a reader waiting for events checks it)."""
        return self._thread.is_alive()

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def active(self) -> int:
        return sum(s.req is not None for s in self.slots)

    def idle(self) -> bool:
        return not self._queue and self.active == 0

    def close(self, timeout: float | None = None) -> None:
        """Cancel everything, stop the thread."""
        with self._cv:
            self._stop = True
            for r in self._queue:
                r.on_cancel = None  # told "cancelled" by the thread's last _admit
                r.cancel()
            for s in self.slots:
                if s.req:
                    s.req.cancel()
            for _, fut in self._jobs:
                fut.cancel()
            self._jobs.clear()
            self._cv.notify()
        self._thread.join(timeout)

    # -- the scheduler thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cv:
                while (not self._stop and not self._queue and not self._jobs
                       and self.active == 0):
                    self._cv.wait()
                if self._stop and not self._queue and self.active == 0:
                    return
                has_jobs = bool(self._jobs)
            if has_jobs:
                self._run_jobs()  # outside the lock: submit and run_job stay free meanwhile
            with self._cv:
                self._admit()
            try:
                self._step()
            except Exception as e:  # an engine failure ends the requests it was running
                for s in self.slots:
                    if s.req is not None:
                        self._finish(s, "error", f"{type(e).__name__}: {e}")
            for fn in self._listeners:
                try:
                    fn()
                except Exception:
                    pass

    def _admit(self) -> None:
        while self._queue:
            req = self._queue[0]
            if req.cancelled:
                self._queue.popleft()
                _tell(req, "done", "cancelled", None)
                continue
            free = [s for s in self.slots if s.req is None]
            if not free:
                return
            self._queue.popleft()
            req.on_cancel = None
            slot = max(free, key=lambda s: (_common(s.cached, req.tokens), -s.idx))
            self._start(slot, req)

    def _start(self, slot: _Slot, req: Request) -> None:
        k = _common(slot.cached, req.tokens[:-1])  # always run >= 1 token for its logits
        slot.cached = slot.cached[:k]
        slot.req, slot.todo, slot.pos, slot.new = req, list(req.tokens[k:]), k, 0
        req.prompt_cached = k
        slot.sampler = Sampler(req.temperature, req.top_p, req.seed, req.repeat_penalty,
                               REPEAT_LAST_N, top_k=req.top_k, min_p=req.min_p,
                               typical_p=req.typical_p, logit_bias=req.logit_bias)
        slot.sampler.accept(req.tokens[-REPEAT_LAST_N:])
        slot.matcher = req.constraint.matcher() if req.constraint is not None else None
        slot.counts = collections.Counter()
        self.stats.prompt_tokens += len(req.tokens)

    def _step(self) -> None:
        for s in self.slots:  # cancellations free their slots first
            if s.req is not None and s.req.cancelled:
                self._finish(s, "done", "cancelled")
        # one forward call: a decode row for every running sequence, then prompt chunks (at
        # most prefill_chunk tokens, oldest request first) whose last row wants logits only
        # when it ends its prompt
        seqs: list[int] = []
        toks: list[int] = []
        poss: list[int] = []
        want: list[bool] = []
        decoding = [s for s in self.slots if s.req is not None and not s.todo and s.new > 0]
        for s in decoding:
            seqs.append(s.idx)
            toks.append(s.last)
            poss.append(s.pos)
            want.append(True)
        chunks = []
        budget = self.prefill_chunk
        prefilling = [s for s in self.slots if s.req is not None and s.todo]
        for s in sorted(prefilling, key=lambda s: s.req.submitted):
            if budget <= 0:
                break
            chunk = s.todo[:budget]
            budget -= len(chunk)
            ends = len(chunk) == len(s.todo)
            seqs += [s.idx] * len(chunk)
            toks += chunk
            poss += range(s.pos, s.pos + len(chunk))
            want += [False] * (len(chunk) - 1) + [ends]
            chunks.append((s, chunk, ends))
        if not seqs:
            return
        t0 = time.perf_counter()
        if not decoding and len(chunks) == 1:  # one prompt alone: the tiled prefill is faster
            s, chunk, ends = chunks[0]
            out = self.engine.prefill_seq(s.idx, chunk, s.pos)[None]
        else:
            out = self.engine.step(seqs, toks, poss, want)
        dt = time.perf_counter() - t0
        n_pre = len(seqs) - len(decoding)  # the step's time split by rows
        self.stats.prefill_s += dt * n_pre / len(seqs)
        self.stats.decode_s += dt * len(decoding) / len(seqs)
        self.stats.prefill_tokens += n_pre
        if decoding:
            self.stats.decode_steps += 1
            self.stats.decode_rows += len(decoding)
        rows = []  # (slot, its logits row), in row order
        for s in decoding:
            s.cached.append(s.last)
            s.pos += 1
            rows.append((s, len(rows)))
        for s, chunk, ends in chunks:
            s.cached += chunk
            s.pos += len(chunk)
            del s.todo[:len(chunk)]
            if ends:
                rows.append((s, len(rows)))
        self._sample(rows, out)

    def _sample(self, rows: list[tuple[_Slot, int]], out: np.ndarray) -> None:
        """Sample the next token of every slot in `rows` from its row of `out` (overwritten)
        and tell the requests, in row order: the penalties and temperature-0 argmaxes of all
        rows at once (sampler.penalize_rows / draw_rows), each row's tokens equal to its
        Sampler's alone."""
        live = []
        for s, k in rows:
            if s.req.cancelled:
                self._finish(s, "done", "cancelled")
            else:
                live.append((s, k))
        if not live:
            return
        idx = [k for _, k in live]
        logits = out if idx == list(range(len(out))) else out[idx]
        for j, (s, _) in enumerate(live):
            req = s.req
            if req.frequency_penalty or req.presence_penalty:
                row = logits[j]
                for tok, n in s.counts.items():  # OpenAI's: over the tokens generated so far
                    row[tok] -= np.float32(n * req.frequency_penalty + req.presence_penalty)
        samplers = [s.sampler for s, _ in live]
        penalize_rows(samplers, logits)  # logits: the distributions sampled from
        failed = {}  # rows whose grammar allows no token: they end with an error
        con = [j for j, (s, _) in enumerate(live) if s.matcher is not None]
        if con:  # constrained rows only: the others pay nothing
            ok = mask_rows([live[j][0].matcher for j in con], logits, con)
            for j, good in zip(con, ok, strict=True):
                if not good:
                    failed[j] = live[j][0].matcher.error
                    logits[j] = 0  # drawn from and dropped: the other rows sample as ever
        lps = {}
        for j, (s, _) in enumerate(live):
            if s.req.logprobs is not None:
                ls = _log_softmax(logits[j])
                top = []
                if s.req.logprobs > 0:
                    k = min(s.req.logprobs, ls.size)
                    i = np.argpartition(-ls, k - 1)[:k]
                    i = i[np.lexsort((i, -ls[i]))]
                    top = [(int(t), float(ls[t])) for t in i if ls[t] > -np.inf]
                lps[j] = (ls, top)
        toks = draw_rows(samplers, logits)
        now = time.perf_counter()
        stats = self.stats
        for j, (s, _) in enumerate(live):
            req, tok = s.req, toks[j]
            if s.new == 0:
                req.first_token_s = now - req.submitted
                stats.ttft.append(req.first_token_s)
                stats.ttft_count += 1
                if len(stats.ttft) > self.TTFT_KEEP:
                    del stats.ttft[:len(stats.ttft) - self.TTFT_KEEP]
            s.new += 1
            s.counts[tok] += 1
            stats.generated_tokens += 1
            if j in failed:
                self._finish(s, "error", f"structured output: {failed[j]}")
                continue
            if tok in req.stop_ids:
                self._finish(s, "done", "stop")
                continue
            m = s.matcher
            if m is not None and not m.advance(tok):
                self._finish(s, "error", f"structured output: {m.error}")
                continue
            lp = None
            if j in lps:
                ls, top = lps[j]
                lp = (float(ls[tok]), top)
            _tell(req, "token", tok, lp)
            s.last = tok
            if m is not None and m.finished:  # the grammar is complete: nothing may follow
                self._finish(s, "done", "stop")
            elif s.new >= req.max_new or s.pos >= self.seq_len:
                self._finish(s, "done", "length")

    def _finish(self, s: _Slot, kind: str, value) -> None:
        req, s.req, s.todo, s.sampler, s.matcher = s.req, None, [], None, None  # s.cached: what ran
        _tell(req, kind, value, None)
        with self._cv:
            self._cv.notify()


def _tell(req: Request, kind: str, value, extra) -> None:
    """req.emit, whose failure (its listener gone) cancels the request, never the scheduler."""
    try:
        req.emit(kind, value, extra)
    except Exception:
        req.cancel()


def _common(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k
