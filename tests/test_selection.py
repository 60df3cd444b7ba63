"""Kernel selection is a value each model holds: two models with different
forced kernels run side by side in one process, each with its own; choosing a default later
changes no existing model; feature detection runs once even when many threads ask at once."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import isaforge
from conftest import REPO, c_compiler
from isaforge.formats.llama2c import read_llama2c
from isaforge.runtime.engine import Engine, runtime_info, select_kernel

SUPPORTED = [t["name"] for t in runtime_info("auto")["tiers"] if t["supported"]]


@pytest.fixture(autouse=True)
def _auto_kernels():
    select_kernel(None)
    yield
    select_kernel(None)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.skipif(len(SUPPORTED) < 2, reason="one kernel tier runs here")
def test_two_models_with_different_kernels_in_one_process(stories):
    m = read_llama2c(stories / "stories260K.bin")
    low, best = SUPPORTED[0], SUPPORTED[-1]
    a = Engine(m, threads=1, kernel=low)
    b = Engine(m, threads=1, kernel=best)
    assert a.kernels["prefill"]["tier"] == low and a.kernels["decode"]["tier"] == low
    assert b.kernels["prefill"]["tier"] == best and b.kernels["decode"]["tier"] == best
    prompt = [1, 403, 407, 261, 378] + list(range(20, 60))
    # interleaved, each with its own kernels (and the same bits, as every tier gives)
    la = a.prefill(prompt[:20], 0, all_logits=True)
    lb = b.prefill(prompt[:20], 0, all_logits=True)
    la2 = a.prefill(prompt[20:], 20, all_logits=True)
    lb2 = b.prefill(prompt[20:], 20, all_logits=True)
    assert np.array_equal(bits(la), bits(lb)) and np.array_equal(bits(la2), bits(lb2))
    assert a.kernels["prefill"]["tier"] == low and b.kernels["prefill"]["tier"] == best


def test_a_later_default_changes_no_existing_engine(stories):
    m = read_llama2c(stories / "stories260K.bin")
    before = Engine(m, threads=1)
    auto = before.kernels
    select_kernel("scalar")
    after = Engine(m, threads=1)
    assert before.kernels == auto
    assert after.kernels["prefill"]["tier"] == "scalar"
    assert Engine(m, threads=1, kernel="auto").kernels == auto  # its own choice wins


def test_load_with_a_kernel_is_per_model(stories):
    path = stories / "stories260K.bin"
    forced = isaforge.load(path, stories / "tok512.bin", kernel="scalar")
    auto = isaforge.load(path, stories / "tok512.bin")
    assert forced.engine.kernels["decode"]["tier"] == "scalar"
    info = runtime_info()
    assert auto.engine.kernels["decode"]["tier"] == info["decode"]["tier"]
    assert auto.engine.kernels["prefill"]["tier"] == info["prefill"]["tier"] == SUPPORTED[-1]
    assert forced.engine.kernels["prefill"]["tier"] == "scalar"  # unchanged by the second load


def test_runtime_info_reports_the_choice_and_rejects_bad_names():
    assert runtime_info("scalar")["prefill"]["tier"] == "scalar"
    assert runtime_info("auto")["prefill"]["tier"] == SUPPORTED[-1]  # the best prefill tier
    with pytest.raises(ValueError, match="unknown kernel tier 'avx1024'"):
        runtime_info("avx1024")
    with pytest.raises(ValueError, match="unknown kernel tier"):
        Engine(read_llama2c(REPO / "models" / "stories260K" / "stories260K.bin"),
               kernel="avx1024")


@pytest.fixture(scope="module")
def detect_driver(tmp_path_factory):
    cc = c_compiler()
    out = tmp_path_factory.mktemp("detect") / "detect_test"
    r = subprocess.run([cc, "-O2", "-std=c11", "-D_DEFAULT_SOURCE", "-Wall", "-Wextra", "-Werror",
                        f"-I{REPO / 'csrc' / 'include'}", str(REPO / "tests/native/detect_test.c"),
                        str(REPO / "csrc/cpu/features.c"), "-lpthread", "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_detection_from_many_threads_at_once_runs_once(detect_driver):
    """16 threads call if_cpu_detect at the same moment, in 20 fresh processes: each sees the
    same features, and the detection ran once (a detection guarded by a plain flag ran twice in
    about one process of three)."""
    for _ in range(20):
        r = subprocess.run([str(detect_driver)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith("detect ok 16 threads, 1 run")
