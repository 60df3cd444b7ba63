"""Shared test fixtures: paths to the stories260K test model (read from ../shared)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from isaforge.types import Config

REPO = Path(__file__).resolve().parents[1]
STORIES = REPO.parent / "shared" / "models" / "stories260K"
MATS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")  # per-layer matrices, in file order
# a tiny model for synthetic weights: 4 query heads share 2 kv heads (kv_dim 8), own classifier
TINY_GQA = Config(dim=16, hidden_dim=24, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=32,
                  seq_len=8, shared_classifier=False)


@pytest.fixture(scope="session")
def stories() -> Path:
    if not (STORIES / "stories260K.bin").is_file():
        pytest.skip(f"test model not found at {STORIES}")
    return STORIES


@pytest.fixture(scope="session")
def v0_path(stories) -> Path:
    """stories260K.bin: llama2.c legacy v0, fp32."""
    return stories / "stories260K.bin"


@pytest.fixture(scope="session")
def stories_q8(stories, tmp_path_factory) -> Path:
    """stories260K quantized by `isaforge quantize --group-size 4`, with tok512.bin beside it."""
    d = tmp_path_factory.mktemp("q8")
    out = d / "stories260K_q8.bin"
    r = cli("quantize", str(stories / "stories260K.bin"), "-o", str(out), "--group-size", "4")
    assert r.returncode == 0, r.stderr
    (d / "tok512.bin").write_bytes((stories / "tok512.bin").read_bytes())
    return out


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) in the isaforge cache, as `isaforge pull` leaves it.
    Skipped when absent unless ISAFORGE_REAL_MODEL_TESTS=1 (CI pulls it and sets that)."""
    import os

    from isaforge.settings import default_model_path

    path = default_model_path()
    if not path.is_file():
        if os.environ.get("ISAFORGE_REAL_MODEL_TESTS") == "1":
            pytest.fail(f"{path} missing: run `isaforge pull` first")
        pytest.skip(f"SmolLM2 not in the cache ({path}); run `isaforge pull`")
    return path


def c_compiler() -> str:
    """This machine's C compiler (cc, else gcc), for the tests that build a small C driver;
    skips the test without one."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    return cc


def cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the isaforge CLI in a subprocess, capturing bytes."""
    return subprocess.run([sys.executable, "-m", "isaforge", *args], capture_output=True,
                          timeout=timeout, env=env)


# The start of a guard-page test script (run in a subprocess: a read past an array's end
# faults): imports and guarded(shape, dtype), an array whose last byte is followed by an
# inaccessible page. tests/test_kernels.py and tests/test_q4_kernels.py append their loops.
GUARDED_PRELUDE = """import ctypes, mmap, sys
import numpy as np
from isaforge import _bench
PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None)
keep = []
def guarded(shape, dtype):
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    pages = (nbytes + PAGE - 1) // PAGE + 1
    buf = mmap.mmap(-1, pages * PAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mprotect(ctypes.c_void_p(addr + (pages - 1) * PAGE), PAGE, 0) == 0
    keep.append(buf)
    off = (pages - 1) * PAGE - nbytes
    return np.frombuffer(buf, dtype, int(np.prod(shape)), off).reshape(shape)
"""


def simde_include() -> str:
    """SIMDe's include folder (the folder holding simde/x86/avx512.h) from scripts/simde.sh,
    which set-up runs: ISAFORGE_SIMDE_INCLUDE, the system's, or Debian's libsimde-dev unpacked
    into a cache. Unavailable: a skip, or in CI (CI=true) a failure."""
    r = subprocess.run(["bash", str(Path(__file__).resolve().parents[1] / "scripts" / "simde.sh")],
                       capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        why = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(
            f"SIMDe headers unavailable (scripts/simde.sh: {why})")
    return r.stdout.strip().splitlines()[-1]
