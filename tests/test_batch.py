"""Batched decoding (runtime/batch.py, if_model_decode_batch): N KV slots, one forward call
for every active sequence, each row's logits equal to the same sequence run alone bit for bit
(fp32 and Q8, the tiny model and SmolLM2), sequences joining and leaving between steps; the
Scheduler's output alone equals its output batched, at temperature 0 and seeded at T > 0."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import isaforge
from isaforge.model import read_model
from isaforge.runtime.batch import BatchEngine, QueueFullError, Request, Scheduler
from isaforge.runtime.engine import Engine


def _check_rows_equal(loaded, n_slots=4, steps=6, seed=0):
    e1 = Engine(loaded, threads=2)
    eb = BatchEngine(loaded, n_slots, threads=2)
    assert eb.kv_cache_bytes == n_slots * e1.kv_cache_bytes
    V = loaded.config.vocab_size
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(1, V, size=n)) for n in (5, 9, 3, 17)][:n_slots]
    feed = [list(rng.integers(1, V, size=steps)) for _ in prompts]
    alone = []
    for p, f in zip(prompts, feed, strict=True):
        out = [e1.prefill(p, 0).copy()]
        for i, t in enumerate(f):
            out.append(e1.forward(t, len(p) + i).copy())
        alone.append(out)
    got = [[eb.prefill_seq(s, p, 0)] for s, p in enumerate(prompts)]
    pos = [len(p) for p in prompts]
    for i in range(steps):
        # slot 2 leaves after 3 steps; slot 3 joins late (its first steps alone earlier)
        rows = [s for s in range(len(prompts)) if not (s == 2 and i >= 3)]
        out = eb.decode_batch(rows, [feed[s][i] for s in rows], [pos[s] for s in rows])
        for j, s in enumerate(rows):
            got[s].append(out[j])
            pos[s] += 1
    for s in range(len(prompts)):
        for k, g in enumerate(got[s]):
            assert np.array_equal(g, alone[s][k]), (s, k)


def test_rows_equal_alone_fp32(stories):
    _check_rows_equal(read_model(stories / "stories260K.bin"))


def test_rows_equal_alone_q8(stories_q8):
    _check_rows_equal(read_model(stories_q8))


def test_rows_equal_alone_smollm2(smollm2_gguf):
    from isaforge.formats import with_context

    _check_rows_equal(with_context(read_model(smollm2_gguf), 256), seed=1)


def test_batch_errors(stories):
    eb = BatchEngine(read_model(stories / "stories260K.bin"), 2)
    with pytest.raises(ValueError, match=r"slot 2 out of range \[0, 2\)"):
        eb.decode_batch([2], [1], [0])
    with pytest.raises(ValueError, match="both decode slot 1"):
        eb.decode_batch([1, 1], [1, 2], [0, 0])
    with pytest.raises(ValueError, match="beyond the context"):
        eb.decode_batch([0], [1], [512])
    with pytest.raises(ValueError, match="out of range"):
        eb.prefill_seq(5, [1, 2], 0)
    with pytest.raises(ValueError, match="n_seqs must be"):
        BatchEngine(read_model(stories / "stories260K.bin"), 0)


def _collect(sched, reqs):
    """Run requests through the scheduler; their sampled tokens and finish reasons."""
    out = {i: [] for i in range(len(reqs))}
    reasons = {}
    done = threading.Event()

    def emitter(i):
        def emit(kind, value, extra):
            if kind == "token":
                out[i].append(value)
            else:
                reasons[i] = value
                if len(reasons) == len(reqs):
                    done.set()
        return emit

    made = [Request(emit=emitter(i), **r) for i, r in enumerate(reqs)]
    for r in made:
        sched.submit(r)
    assert done.wait(60)
    return [out[i] for i in range(len(reqs))], [reasons[i] for i in range(len(reqs))]


def test_scheduler_alone_equals_batched(stories):
    m = isaforge.load(stories / "stories260K.bin")
    prompts = [m.encode(t) for t in ("Once upon a time", "The cat", "Lily went to the park",
                                     "One day", "Tom and Sam", "A big dog")]
    reqs = [dict(tokens=p, max_new=30 + 5 * i, temperature=0.0 if i % 2 else 0.9,
                 top_p=0.9, seed=100 + i, stop_ids=tuple(m.stop_ids))
            for i, p in enumerate(prompts)]
    s1 = Scheduler(BatchEngine(m.loaded, 1), max_queue=64)
    alone = [_collect(s1, [r]) for r in reqs]
    s1.close()
    s4 = Scheduler(BatchEngine(m.loaded, 4), max_queue=64, prefill_chunk=3)
    toks, reasons = _collect(s4, reqs)
    s4.close()
    assert toks == [a[0][0] for a in alone]
    assert reasons == [a[1][0] for a in alone]
    # and equal to the Python API's one generation loop at temperature 0
    for i in (1, 3):
        want = [nxt for _, nxt in m.pairs(prompts[i], isaforge.GenerationConfig(
            max_new_tokens=reqs[i]["max_new"], temperature=0.0, repeat_penalty=1.0))]
        assert toks[i] == want


def test_scheduler_queue_full(stories):
    m = read_model(stories / "stories260K.bin")
    sched = Scheduler(BatchEngine(m, 1), max_queue=1)
    gate = threading.Event()
    first = Request(tokens=[1, 2], max_new=400, emit=lambda *a: None)
    sched.submit(first)
    try:
        while sched.active == 0:  # the first is running, so the next one waits
            gate.wait(0.01)
        sched.submit(Request(tokens=[1, 3], max_new=2, emit=lambda *a: None))
        with pytest.raises(QueueFullError, match="queue holds 1"):
            sched.submit(Request(tokens=[1, 4], max_new=2, emit=lambda *a: None))
        assert sched.stats.rejected == 1
    finally:
        sched.close()


def test_scheduler_forgets_cancelled_waiters(stories):
    """A request cancelled while it waits leaves the queue at once: its place is free for the
    next submit (a full queue of clients that left refused everyone until a slot freed)."""
    m = read_model(stories / "stories260K.bin")
    sched = Scheduler(BatchEngine(m, 1), max_queue=2)
    gate = threading.Event()
    sched.submit(Request(tokens=[1, 2], max_new=400, emit=lambda *a: None))
    try:
        while sched.active == 0:
            gate.wait(0.01)
        waiting = [Request(tokens=[1, 3 + i], max_new=2, emit=lambda *a: None)
                   for i in range(2)]
        for r in waiting:
            sched.submit(r)
        assert sched.queue_depth == 2
        waiting[0].cancel()
        assert sched.queue_depth == 1 and sched.stats.abandoned == 1
        sched.submit(Request(tokens=[1, 9], max_new=2, emit=lambda *a: None))  # not 429
        waiting[0].cancel()  # twice: counted once
        assert sched.queue_depth == 2 and sched.stats.abandoned == 1
        assert sched.stats.rejected == 0
    finally:
        sched.close()


def test_mixed_step_equals_alone(stories_q8):
    """if_model_batch: decode rows and prompt chunks of other slots in one call; the wanted
    rows' logits equal the sequences alone, and a slot's rows must rise."""
    loaded = read_model(stories_q8)
    e1 = Engine(loaded)
    eb = BatchEngine(loaded, 3)
    a, b, c = [1, 50, 60, 70], [1, 80, 90, 100, 110, 120, 130], [1, 200, 210]
    want_a = e1.prefill(a + [300], 0).copy()
    want_b = e1.prefill(b, 0).copy()
    want_c3 = e1.prefill(c, 0).copy()
    eb.prefill_seq(0, a, 0)
    eb.prefill_seq(2, c[:2], 0)
    # slot 0 decodes token 300 at 4; slot 1's whole prompt; slot 2's last prompt token
    rows = ([0], [300], [4], [True])
    rows = (rows[0] + [1] * 7 + [2], rows[1] + b + [c[2]], rows[2] + list(range(7)) + [2],
            rows[3] + [False] * 6 + [True] + [True])
    out = eb.step(*rows)
    assert out.shape == (3, loaded.config.vocab_size)
    assert np.array_equal(out[0], want_a)
    assert np.array_equal(out[1], want_b)
    assert np.array_equal(out[2], want_c3)
    with pytest.raises(ValueError, match="positions 3, 3 must rise"):
        eb.step([1, 1], [5, 6], [3, 3], [True, True])


def test_scheduler_prefix_reuse(stories):
    """A slot keeps its tokens' K/V: the same prompt again prefills one token, a longer one
    only its new tokens, and the reply is the same as from a fresh slot."""
    m = isaforge.load(stories / "stories260K.bin")
    p = m.encode("Once upon a time there was")
    sched = Scheduler(BatchEngine(m.loaded, 1))
    try:
        first = _collect(sched, [dict(tokens=p, max_new=12, temperature=0.0)])
        ran = sched.stats.prefill_tokens
        assert ran == len(p)
        again = _collect(sched, [dict(tokens=p, max_new=12, temperature=0.0)])
        assert again == first and sched.stats.prefill_tokens == ran + 1
        longer = p + first[0][0][:3]
        ran = sched.stats.prefill_tokens
        got = _collect(sched, [dict(tokens=longer, max_new=5, temperature=0.0)])
        assert sched.stats.prefill_tokens == ran + 1  # the reply's tokens were cached too
        assert got[0][0] == first[0][0][3:8]
    finally:
        sched.close()


def test_scheduler_survives_a_failing_listener(stories):
    m = isaforge.load(stories / "stories260K.bin")
    sched = Scheduler(BatchEngine(m.loaded, 2))

    def broken(kind, value, extra):
        raise RuntimeError("listener gone")
    try:
        bad = Request(tokens=m.encode("Once"), max_new=50, emit=broken)
        sched.submit(bad)
        good = _collect(sched, [dict(tokens=m.encode("Once upon"), max_new=10,
                                     temperature=0.0)])
        assert len(good[0][0]) == 10 and good[1] == ["length"]
        assert bad.cancelled
        t0 = time.monotonic()
        while sched.active and time.monotonic() - t0 < 10:
            time.sleep(0.01)
        assert sched.active == 0  # the failed request's slot was freed
    finally:
        sched.close()


def test_step_listener_follows_each_steps_events(stories):
    """A step listener runs after every step, once the step's events are out: between two
    calls each running request gets at most one token, and the last event is followed by a
    call (a relay that wakes its reader per call misses nothing)."""
    m = isaforge.load(stories / "stories260K.bin")
    sched = Scheduler(BatchEngine(m.loaded, 3), prefill_chunk=4)
    log: list = []
    lock = threading.Lock()
    done = threading.Event()
    finished = []

    def emitter(i):
        def emit(kind, value, extra):
            with lock:
                log.append((i, kind))
            if kind == "done":
                finished.append(i)
                if len(finished) == 3:
                    done.set()
        return emit

    def step():
        with lock:
            log.append("step")

    sched.add_step_listener(step)
    sched.add_step_listener(lambda: 1 / 0)  # a failing listener changes nothing
    try:
        for i, text in enumerate(("Once upon a time", "The cat sat", "One day")):
            sched.submit(Request(tokens=m.encode(text), max_new=12 + 4 * i,
                                 emit=emitter(i), temperature=0.0))
        assert done.wait(60)
        t0 = time.monotonic()
        while log[-1] != "step" and time.monotonic() - t0 < 10:
            time.sleep(0.01)
    finally:
        sched.close()
    assert log[-1] == "step"
    tokens = [[k for k in log if k == (i, "token")] for i in range(3)]
    assert [len(t) for t in tokens] == [12, 16, 20]
    between: list = []
    for k in log:
        if k == "step":
            assert len(between) == len(set(between)), between  # a token per request
            between = []
        elif k[1] == "token":
            between.append(k[0])
    assert log.count("step") >= 20  # one per step: at least the longest request's tokens
