"""Repository rules that are cheap to check: ruff is clean, the C core stays pure C."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_ruff_is_clean():
    r = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests"], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_c_core_includes_no_python_header():
    offenders = [p for p in (REPO / "csrc").rglob("*.[ch]") if "Python.h" in p.read_text()]
    assert not offenders
    assert any((REPO / "csrc" / "kernels").rglob("*_scalar.c"))
