"""One parallel region per forward call: every thread walks the layers,
meeting at barriers between dependent steps, and the norms, RoPE, KV stores, residual adds,
SwiGLU, activation quantization and the Hadamard rotation are split across threads (by rows in
prefill and batched steps, by elements / heads / quantization groups in a decode step). None of
it may change a bit: logits (compared as raw float bits) and T = 0 generated ids are the same
at 1, 2, 3 and 7 threads, for decode, prefill at several chunk sizes and batched decode, on the
f32, Q8 and 4-bit (cq4, rotated) paths, a Gemma-3-style layer (q/k norms, post norms, GELU,
NEOX RoPE, sliding window, embed scale) and a Qwen2-style one (biases).

ISAFORGE_PAR_MIN_WORK=1 puts every call of these tiny models in a region and splits every
step across the threads (at the default a tiny model's call runs on the calling thread alone,
and a small elementwise step is one chunk); the SmolLM2-shaped random Q8 model runs at the
defaults too (matmuls split, small elementwise steps one chunk, prefill rows split)."""

from __future__ import annotations

import numpy as np
import pytest

import isaforge
from isaforge.formats.gguf import read_gguf
from isaforge.model import read_model
from isaforge.runtime.batch import BatchEngine
from isaforge.runtime.engine import Engine, select_kernel
from isaforge.synthetic import SMOLLM2_135M, random_q8_model
from isaforge.types import Config
from test_families import write_family

THREADS = (1, 2, 3, 7)
UBATCHES = (1, 3, 16)


@pytest.fixture(autouse=True)
def _every_op_in_the_region(monkeypatch):
    monkeypatch.setenv("ISAFORGE_PAR_MIN_WORK", "1")
    select_kernel(None)
    yield
    select_kernel(None)


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).copy()


def walk(eng: Engine, prompt: list[int], n_new: int) -> tuple[list[np.ndarray], list[int]]:
    """Logits of every prompt row (one prefill, in the engine's chunks), then of n_new greedy
    decode steps; and the greedy ids."""
    logits = np.asarray(eng.prefill(prompt, 0, all_logits=True)).reshape(len(prompt), -1)
    out, ids = [bits(logits)], []
    last, pos = logits[-1], len(prompt)
    for _ in range(n_new):
        ids.append(int(np.argmax(last)))
        last = eng.forward(ids[-1], pos)
        out.append(bits(last))
        pos += 1
    return out, ids


def check(model, prompt: list[int], n_new: int = 6, ubatches=UBATCHES, **kw) -> None:
    want, want_ids = walk(Engine(model, threads=1, ubatch=1, **kw), prompt, n_new)
    assert len({w.tobytes() for w in want[1:]}) > 1  # the steps differ
    for ub in ubatches:
        for t in THREADS:
            eng = Engine(model, threads=t, ubatch=ub, **kw)
            assert eng.threads == t
            got, ids = walk(eng, prompt, n_new)
            assert ids == want_ids, (t, ub)
            for i, (g, w) in enumerate(zip(got, want, strict=True)):
                assert np.array_equal(g, w), f"threads={t} ubatch={ub}: step {i} differs"


def check_batch(model, n_slots: int = 3, steps: int = 4) -> None:
    """Batched decode (if_model_batch): every thread count gives the 1-thread rows' bits."""
    V = model.config.vocab_size
    rng = np.random.default_rng(1)
    prompts = [[int(t) for t in rng.integers(1, V, size=n)] for n in (5, 9, 3)][:n_slots]
    feed = [[int(t) for t in rng.integers(1, V, size=steps)] for _ in prompts]

    def run(threads: int) -> list[np.ndarray]:
        eb = BatchEngine(model, n_slots, threads=threads)
        out = [bits(eb.prefill_seq(s, p, 0)) for s, p in enumerate(prompts)]
        pos = [len(p) for p in prompts]
        for i in range(steps):
            rows = list(range(n_slots))
            out.append(bits(eb.decode_batch(rows, [feed[s][i] for s in rows],
                                            [pos[s] for s in rows])))
            pos = [p + 1 for p in pos]
        # a mixed step: a prompt chunk of slot 0 beside decode rows, logits of some rows only
        seqs, toks = [0, 0, 0, 1, 2], [3, 4, 5, 6, 7]
        where = [pos[0], pos[0] + 1, pos[0] + 2, pos[1], pos[2]]
        out.append(bits(eb.step(seqs, toks, where, [0, 1, 1, 0, 1])))
        return out

    want = run(1)
    for t in THREADS[1:]:
        got = run(t)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert np.array_equal(g, w), f"threads={t}: batched output {i} differs"


PROMPT = [1, 403, 407, 261, 378, 293, 322, 301, 434, 278, 271, 372, 260, 313, 301, 353, 338]


def test_stories_f32(stories):
    check(read_model(stories / "stories260K.bin", "f32"), PROMPT)


def test_stories_q8(stories_q8):
    check(read_model(stories_q8), PROMPT)


def test_stories_cq4_rotated(stories):
    m = read_model(stories / "stories260K.bin", "cq4")
    assert any(w.signs is not None for w in m.weights.wq)  # the Hadamard path runs
    check(m, PROMPT)


def test_stories_scalar_tier(stories_q8):
    check(read_model(stories_q8), PROMPT, ubatches=(16,), kernel="scalar")


@pytest.mark.parametrize("family", ["gemma3", "qwen2"])
@pytest.mark.parametrize("quant", ["f32", "q8"])
def test_family_layers(tmp_path, family, quant):
    m = read_gguf(write_family(tmp_path / f"{family}.gguf", family), quant=quant)
    if family == "gemma3":
        c = m.config
        assert c.swa_pattern and c.sliding_window and c.embed_scale and c.act == 1
    prompt = [int(t) for t in np.random.default_rng(5).integers(0, 48, 24)]  # past the window
    check(m, prompt, n_new=8)


def test_smollm2_shapes_q8_at_default_thresholds(monkeypatch):
    monkeypatch.delenv("ISAFORGE_PAR_MIN_WORK")
    c = Config(**{**SMOLLM2_135M.__dict__, "n_layers": 2, "vocab_size": 4096})
    check(random_q8_model(c, seq_len=64), [5, 17, 300, 1000, 7, 4000, 12, 99, 1],
          n_new=4, ubatches=(4, 16))


def test_batched_decode_f32_q8_cq4(stories, stories_q8):
    for m in (read_model(stories / "stories260K.bin", "f32"), read_model(stories_q8),
              read_model(stories / "stories260K.bin", "cq4")):
        check_batch(m)


def test_batched_decode_gemma3(tmp_path):
    check_batch(read_gguf(write_family(tmp_path / "g.gguf", "gemma3"), quant="q8"))


def test_generated_ids_at_t0(stories):
    """The public API's greedy text at every thread count (prefill, then decode)."""
    outs = []
    for t in THREADS:
        m = isaforge.load(stories / "stories260K.bin", stories / "tok512.bin", threads=t)
        outs.append(list(m.generate_ids("Once upon a time", max_new_tokens=40, temperature=0)))
    assert len(set(outs[0])) > 5
    assert all(o == outs[0] for o in outs[1:])
