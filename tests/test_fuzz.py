"""The fuzz targets (tests/fuzz/harness.py): every committed corpus input and seeded mutations
of it are refused cleanly or run; in CI a short coverage-guided atheris run per target
(scripts/fuzz.py) must find nothing; and a planted bug must be found, so neither can pass
vacuously."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fuzz import harness, seeds  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TARGETS = [t for t in harness.TARGETS if t != "planted"]


def test_every_reader_has_a_committed_corpus():
    assert set(TARGETS) == set(seeds.all_seeds())
    for t in TARGETS:
        assert harness.corpus(t), f"tests/fuzz/corpus/{t} is empty"


def test_seeds_are_valid_models():
    """The seeds load and run (so mutants start from inside the readers, not at the magic)."""
    for t, files in seeds.all_seeds().items():
        for data in files.values():
            harness.check(t, data)


@pytest.mark.parametrize("target", TARGETS)
def test_corpus_and_mutants_refused_cleanly(target):
    rng = np.random.default_rng(20261201)
    n = 0
    for seed in harness.corpus(target):
        harness.check(target, seed)
        for m in harness.mutations(seed, rng, 150):
            harness.check(target, m)
            n += 1
    assert n >= 150


def test_check_reports_unclean_failures(monkeypatch):
    def raw(data):
        raise KeyError("x")

    def empty(data):
        raise ValueError("")
    for fn, needle in ((raw, "KeyError"), (empty, "empty message")):
        monkeypatch.setitem(harness.TARGETS, "gguf", fn)
        with pytest.raises(harness.Finding, match=needle):
            harness.check("gguf", b"")


def _atheris() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


needs_atheris = pytest.mark.skipif(
    not _atheris() and not os.environ.get("CI"),
    reason="atheris is not installed (pip install atheris); CI requires it")


def _fuzz(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz.py"), *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=900)


@needs_atheris
def test_coverage_guided_run_finds_nothing(tmp_path):
    secs = os.environ.get("ISAFORGE_FUZZ_SECONDS", "6")
    r = _fuzz("--all", f"--seconds={secs}", f"--artifacts={tmp_path}")
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert len(lines) == len(TARGETS) and all("no finding" in x for x in lines)


@needs_atheris
def test_coverage_guided_run_finds_a_planted_bug(tmp_path):
    r = _fuzz("planted", "--seconds=60", f"--artifacts={tmp_path}",
              env={"ISAFORGE_FUZZ_PLANT": "1"})
    assert r.returncode != 0 and "planted bug" in r.stdout + r.stderr
    assert list(tmp_path.glob("planted-crash-*"))
