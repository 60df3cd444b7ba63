"""One model, many threads: every caller gets the result it would get alone.
The model's engine (scratch, KV cache, thread pool) and cached prefix are held by one call at
a time; a stream holds them until it ends, is closed or is collected."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import isaforge
from isaforge.runtime.generate import ModelBusyError

PROMPTS = ["Once upon a time", "The cat", "Lily went to the park", "One day, a little", "Tom"]


@pytest.fixture(scope="module")
def model(stories):
    return isaforge.load(stories / "stories260K.bin", stories / "tok512.bin", threads=2)


def _call(m, i: int):
    """Call i of a mix that touches the engine every way: text, stream, ids, logits, chat-
    length prompts sharing a prefix with the cache (so the cached prefix matters)."""
    p, kind = PROMPTS[i % len(PROMPTS)], i % 4
    if kind == 0:
        return m.generate(p, max_new_tokens=40, temperature=0)
    if kind == 1:
        return "".join(m.generate(p, max_new_tokens=30, temperature=0, stream=True))
    if kind == 2:
        return list(m.generate_ids(p, max_new_tokens=25, temperature=0))
    return m.logits(m.encode(p)).tobytes()


def test_threads_on_one_model_get_the_serial_results(model):
    n_threads, per_thread = 8, 10
    calls = list(range(n_threads * per_thread))
    serial = [_call(model, i) for i in calls]
    assert len(set(map(str, serial))) > len(PROMPTS)  # the calls differ from each other
    start = threading.Barrier(n_threads)

    def worker(t: int):
        start.wait()
        return [(i, _call(model, i)) for i in calls[t::n_threads]]

    with ThreadPoolExecutor(n_threads) as ex:
        results = [r for rs in ex.map(worker, range(n_threads)) for r in rs]
    assert len(results) == len(calls)
    wrong = [i for i, out in results if out != serial[i]]
    assert not wrong, f"{len(wrong)} of {len(calls)} concurrent calls differ from serial"


def test_two_models_in_two_threads_and_pairs_too(stories, model):
    other = isaforge.load(stories / "stories260K.bin", stories / "tok512.bin")
    want = model.generate("The dog", max_new_tokens=50, temperature=0)
    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(lambda m: m.generate("The dog", max_new_tokens=50, temperature=0),
                           [model, other] * 4))
    assert outs == [want] * 8


def test_an_open_stream_makes_other_threads_wait_then_they_get_their_result(model):
    want = model.generate("Tom", max_new_tokens=40, temperature=0)
    stream = model.generate("The cat", max_new_tokens=60, temperature=0, stream=True)
    first = next(stream)
    got, started = [], threading.Event()

    def other():
        started.set()
        got.append(model.generate("Tom", max_new_tokens=40, temperature=0))

    t = threading.Thread(target=other)
    t.start()
    started.wait()
    t.join(0.5)
    assert t.is_alive() and not got  # waits while the stream holds the model
    rest = "".join(stream)  # the stream finishes undisturbed
    assert first + rest == model.generate("The cat", max_new_tokens=60, temperature=0)
    t.join(30)
    assert got == [want]


def test_an_abandoned_stream_releases_the_model(model):
    want = model.generate("Lily", max_new_tokens=30, temperature=0)
    s = model.generate("The cat", max_new_tokens=60, temperature=0, stream=True)
    next(s)
    s.close()  # closed half-way
    assert model.generate("Lily", max_new_tokens=30, temperature=0) == want
    for _ in model.stream("The cat"):
        break  # the loop drops it half-way
    with ThreadPoolExecutor(1) as ex:  # another thread is not blocked by it
        assert ex.submit(model.generate, "Lily", 30, 0).result(30) == want
    never = model.generate("Tom", stream=True)  # never started: holds nothing
    assert model.generate("Lily", max_new_tokens=30, temperature=0) == want
    del never


def test_reentrant_use_from_the_same_thread_is_a_clear_error(model):
    want = model.generate("Tom", max_new_tokens=20, temperature=0)
    s = model.generate("The cat", max_new_tokens=60, temperature=0, stream=True)
    first = next(s)
    for again in (lambda: model.generate("Tom", max_new_tokens=20, temperature=0),
                  lambda: model.logits([1, 2, 3]),
                  lambda: next(iter(model.stream("Tom")))):
        with pytest.raises(ModelBusyError, match="unfinished generation in this thread"):
            again()
    rest = "".join(s)  # the open stream is unharmed by the refused calls
    assert first + rest == model.generate("The cat", max_new_tokens=60, temperature=0)
    assert model.generate("Tom", max_new_tokens=20, temperature=0) == want


def test_logits_in_threads_match(model):
    toks = model.encode("Once upon a time there was")
    want = model.logits(toks)
    with ThreadPoolExecutor(6) as ex:
        outs = list(ex.map(lambda _: model.logits(toks), range(24)))
    assert all(np.array_equal(o, want) for o in outs)
