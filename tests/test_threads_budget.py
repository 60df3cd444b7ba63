"""Work splitting and thread budgets: the pool hands out contiguous
chunks of tasks from an atomic counter, and decode matmuls may run on fewer threads than the
pool (one per ISAFORGE_GEMV_ROWS_PER_THREAD output rows). Neither may change a bit: logits
after a prefill and along a greedy decode are the same at 1, 2, 3 and 7 threads, with budgets
on and off. par_min_work=1 sends every op through the pool (stories260K's matmuls are all
below the default 2^17 multiply-adds and would otherwise run on the calling thread)."""

from __future__ import annotations

import numpy as np
import pytest

from isaforge import settings
from isaforge.formats.llama2c import read_llama2c
from isaforge.model import read_model
from isaforge.runtime.engine import Engine, select_kernel
from isaforge.synthetic import SMOLLM2_135M, random_q8_model
from isaforge.types import Config

THREADS = (1, 2, 3, 7)
# (gemv_rows_per_thread, par_min_work): off; every op pooled, no budget; every op pooled with
# budgets of 1 thread per 16 rows (so ops differ in threads: stories' 32-row kv projections
# get 2, its 512-row classifier all of them); the defaults
BUDGETS = ((0, 1), (16, 1), (64, 1), (0, 0), (256, 0))


@pytest.fixture(autouse=True)
def _auto_kernels():
    select_kernel(None)
    yield
    select_kernel(None)


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float32).tobytes()


def run(eng: Engine, prompt: list[int], n_new: int) -> list[bytes]:
    """Logits of every prompt row (one prefill), then of n_new greedy decode steps."""
    logits = eng.prefill(prompt, 0, all_logits=True)
    out = [bits(logits)]
    last = np.asarray(logits).reshape(len(prompt), -1)[-1]
    pos = len(prompt)
    for _ in range(n_new):
        last = eng.forward(int(np.argmax(last)), pos)
        out.append(bits(last))
        pos += 1
    return out


def check_all_threads(model, prompt: list[int], n_new: int, kernel: str | None = None,
                      budgets=BUDGETS) -> None:
    want = run(Engine(model, threads=1, kernel=kernel, gemv_rows_per_thread=0), prompt, n_new)
    assert len(set(want[1:])) > 1  # the steps differ: the comparison means something
    for rows, min_work in budgets:
        for t in THREADS:
            eng = Engine(model, threads=t, kernel=kernel, gemv_rows_per_thread=rows,
                         par_min_work=min_work)
            assert eng.threads == t
            got = run(eng, prompt, n_new)
            bad = [i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b]
            assert not bad, (f"threads={t} gemv_rows_per_thread={rows} par_min_work={min_work}: "
                             f"logits differ at steps {bad} (0 = the prefill)")


@pytest.mark.parametrize("kernel", [None, "scalar"])
def test_stories_fp32_bit_identical_across_threads_and_budgets(stories, kernel):
    model = read_llama2c(stories / "stories260K.bin")
    check_all_threads(model, [1, 403, 407, 263, 458, 31], 12, kernel)


def test_stories_q8_bit_identical_across_threads_and_budgets(stories_q8):
    model = read_model(stories_q8)
    check_all_threads(model, [1, 403, 407, 263, 300, 411, 20, 9], 12)


def test_smollm2_shapes_bit_identical_across_threads_and_budgets():
    """SmolLM2-135M's shapes (2 layers, random Q8 weights): matmuls above the default
    threshold, the packed one-resident-copy decode, 16-row tiles; a 70-row prefill gives
    several causal attention tiles."""
    c = Config(**{**SMOLLM2_135M.__dict__, "n_layers": 2, "seq_len": 128})
    model = random_q8_model(c, seed=3)
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, c.vocab_size, 70)]
    check_all_threads(model, prompt, 6, budgets=((0, 0), (256, 0), (64, 1), (1000, 0)))


def test_smollm2_real_file_bit_identical_across_threads_and_budgets(smollm2_gguf):
    model = read_model(smollm2_gguf)
    prompt = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
              411, 407, 19712, 8182, 2]
    check_all_threads(model, prompt, 8, budgets=((0, 0), (256, 0), (512, 0)))


@pytest.mark.parametrize("name,value", [("GEMV_ROWS_PER_THREAD", "many"),
                                        ("GEMV_ROWS_PER_THREAD", "-1"),
                                        ("GEMV_ROWS_PER_THREAD", "2.5"),
                                        ("PAR_MIN_WORK", "lots"), ("PAR_MIN_WORK", "-3"),
                                        ("SME2_WORKERS", "two"), ("SME2_WORKERS", "-2")])
def test_bad_override_names_the_variable(stories, monkeypatch, name, value):
    monkeypatch.setenv(f"ISAFORGE_{name}", value)
    with pytest.raises(ValueError, match=f"ISAFORGE_{name}={value!r}"):
        getattr(settings, name.lower())()
    model = read_llama2c(stories / "stories260K.bin")
    with pytest.raises(ValueError, match=f"ISAFORGE_{name}"):
        Engine(model, threads=2)


def test_overrides_reach_the_engine(stories, monkeypatch):
    monkeypatch.setenv("ISAFORGE_GEMV_ROWS_PER_THREAD", " 128 ")
    monkeypatch.setenv("ISAFORGE_PAR_MIN_WORK", "1")
    assert settings.gemv_rows_per_thread() == 128 and settings.par_min_work() == 1
    monkeypatch.delenv("ISAFORGE_GEMV_ROWS_PER_THREAD")
    monkeypatch.delenv("ISAFORGE_PAR_MIN_WORK")
    assert settings.gemv_rows_per_thread() == settings.GEMV_ROWS_PER_THREAD
    assert settings.par_min_work() == 0
    model = read_llama2c(stories / "stories260K.bin")
    for kw in ({"gemv_rows_per_thread": -1}, {"par_min_work": -1}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            Engine(model, threads=2, **kw)


def test_sme2_split_defaults_off_and_checks_its_value(stories, monkeypatch):
    """ISAFORGE_SME2_WORKERS defaults to 0 (no split until measured on SME2 silicon); on a
    machine without SME2 a split asks for nothing and changes no bit (qemu covers SME2 itself:
    tests/test_arm_emulated.py)."""
    monkeypatch.delenv("ISAFORGE_SME2_WORKERS", raising=False)
    assert settings.SME2_WORKERS == 0 and settings.sme2_workers() == 0
    monkeypatch.setenv("ISAFORGE_SME2_WORKERS", " 2 ")
    assert settings.sme2_workers() == 2
    model = read_llama2c(stories / "stories260K.bin")
    with pytest.raises(ValueError, match="sme2_workers"):
        Engine(model, threads=2, sme2_workers=-1)
    prompt = [1, 403, 407, 261, 378]
    want = run(Engine(model, threads=1), prompt, 8)
    assert run(Engine(model, threads=2, par_min_work=1), prompt, 8) == want
