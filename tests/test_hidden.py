"""Final hidden states from the core (Engine.hidden, the rows embeddings pool): the same bits
at every kernel tier, thread count and prefill chunk size; the last row alone equal to the
last of all; close to the float64 numpy reference; the slot's cache left holding the tokens;
bad sizes, slots and tokens refused with an error naming them."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from isaforge import _native
from isaforge.model import read_model
from isaforge.reference import Reference
from isaforge.runtime.engine import Engine
from isaforge.synthetic import random_q8_model
from isaforge.types import Config

SUPPORTED = [t["name"] for t in _native.info()["tiers"] if t["supported"]]
TOKENS = [1, 403, 407, 261, 378, 275, 1, 29, 60, 500, 7, 2, 300, 301, 302, 44, 45]
# GQA with a prompt longer than the smallest chunk, group size 32 (the Q8 GEMM path)
SMALL = Config(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512,
               seq_len=32)


@pytest.fixture(scope="module")
def stories_model(stories):
    return read_model(stories / "stories260K.bin")


@pytest.fixture(scope="module")
def q8_model():
    return random_q8_model(SMALL, group_size=32, seq_len=32)


@pytest.mark.parametrize("which", ["stories_model", "q8_model"])
def test_hidden_identical_across_tiers_threads_and_chunks(request, which):
    m = request.getfixturevalue(which)
    runs = {}
    for tier in SUPPORTED:
        for threads in (1, 2):
            for ubatch in (0, 1, 5):
                e = Engine(m, threads, ubatch=ubatch, kernel=tier)
                h = e.hidden(TOKENS)
                assert h.shape == (len(TOKENS), m.config.dim) and h.dtype == np.float32
                last = e.hidden(TOKENS, last=True)
                assert last.tobytes() == h[-1].tobytes()
                runs[(tier, threads, ubatch)] = h.tobytes()
    first = next(iter(runs.values()))
    assert [k for k, v in runs.items() if v != first] == []


def test_hidden_matches_the_reference(stories_model):
    """fp32 stories260K against Reference in float64: the core's float32 arithmetic stays
    within 2e-5 (absolute; 1.1e-5 measured, on rows of RMS 2.0) at every position."""
    h = Engine(stories_model, 1).hidden(TOKENS)
    ref = Reference(stories_model.config, stories_model.weights).hidden(TOKENS)
    assert ref.shape == h.shape
    err = np.abs(h.astype(np.float64) - ref).max()
    assert err < 2e-5, err
    # and they are the classifier's input: the reference's logits from these rows
    wcls = np.asarray(stories_model.weights.wcls, np.float64)
    logits = Engine(stories_model, 1).prefill(TOKENS, all_logits=True)
    assert np.abs(h.astype(np.float64) @ wcls.T - logits).max() < 1e-4


def test_hidden_leaves_the_tokens_in_the_cache(q8_model):
    """Decoding after hidden() continues the same sequence: its logits equal a prefill of the
    whole, bit for bit."""
    e = Engine(q8_model, 2)
    whole = e.prefill(TOKENS + [9], 0, all_logits=True)[-1].copy()
    e2 = Engine(q8_model, 2)
    e2.hidden(TOKENS)
    assert e2.forward(9, len(TOKENS)).tobytes() == whole.tobytes()


def test_hidden_refuses_bad_input(q8_model):
    e = Engine(q8_model, 1)
    dim = q8_model.config.dim
    with pytest.raises(ValueError, match=r"need 3 rows of 64 floats, the buffer holds 128"):
        e._m.hidden(0, np.array([1, 2, 3], np.int32), 0, np.empty((2, dim), np.float32), False)
    with pytest.raises(ValueError, match=r"sequence slot 1 out of range \[0, 1\)"):
        e.hidden([1, 2], seq=1)
    with pytest.raises(ValueError, match=r"token 512 out of range \[0, 512\)"):
        e.hidden([1, 512])
    with pytest.raises(ValueError, match="no tokens"):
        e.hidden([])
    with pytest.raises(ValueError, match="beyond the context length 32"):
        e.hidden(list(range(33)))
    # the last row only needs one row's room
    out = np.empty(dim, np.float32)
    e._m.hidden(0, np.array([1, 2, 3], np.int32), 0, out, True)
    assert out.tobytes() == e.hidden([1, 2, 3])[-1].tobytes()


def test_hidden_in_a_slot_of_a_batch_engine(q8_model):
    """Slot 1 of a two-slot engine gives the same rows as a one-slot engine."""
    from isaforge.runtime.batch import BatchEngine

    b = BatchEngine(dataclasses.replace(q8_model), 2, 1)
    assert b.hidden(TOKENS, seq=1).tobytes() == Engine(q8_model, 1).hidden(TOKENS).tobytes()


def test_scheduler_job_runs_in_a_free_slot(stories_model):
    """Scheduler.run_job: the job gets the engine and a free slot between steps; the slot's
    cached prefix is dropped (the job overwrote it), so a generation after it is unchanged;
    a failing job fails its future only; after close() no job is taken."""
    from isaforge.runtime.batch import BatchEngine, Request, Scheduler

    eng = BatchEngine(stories_model, 2, 1)
    sched = Scheduler(eng)
    try:
        def greedy():
            done, toks = [], []
            ev = threading.Event()

            def emit(kind, value, extra):
                if kind == "token":
                    toks.append(value)
                else:
                    done.append(value)
                    ev.set()
            sched.submit(Request(TOKENS[:5], 20, emit, temperature=0.0))
            assert ev.wait(60)
            return toks

        before = greedy()
        got = sched.run_job(lambda e, slot: (slot, e.hidden(TOKENS, seq=slot))).result(60)
        slot, h = got
        assert slot in (0, 1) and sched.slots[slot].cached == []
        assert h.tobytes() == Engine(stories_model, 1).hidden(TOKENS).tobytes()
        failing = sched.run_job(lambda e, slot: e.hidden([9999], seq=slot))
        with pytest.raises(ValueError, match="token 9999 out of range"):
            failing.result(60)
        assert greedy() == before
    finally:
        sched.close(10)
    with pytest.raises(Exception, match="shutting down"):
        sched.run_job(lambda e, slot: None)
