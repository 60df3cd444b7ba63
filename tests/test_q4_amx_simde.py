"""The AMX 4-bit GEMM's AVX-512 half (q4_gemm_16x16_amx_avx512.h: the nibble expansion into
VNNI B tiles and the readout) on a CPU without AVX-512: tests/native/q4_amx_simde_test.c
compiles the kernel body with the emulated tile machine and those AVX-512 lines through SIMDe
(header-only; Debian's libsimde-dev, or ISAFORGE_SIMDE_INCLUDE=<dir holding simde/>), and checks
it against q4_gemm_1x1_scalar bit for bit on a grid with M / N tails, K above the expansion
chunk, tail windows and odd output splits. Skipped when SIMDe is not found (it is never
vendored into the repository)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import simde_include

REPO = Path(__file__).resolve().parents[1]




def test_amx_q4_avx512_half_through_simde_equals_scalar(tmp_path):
    inc = Path(simde_include())
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    gen = tmp_path / "generated"
    subprocess.run([sys.executable, str(REPO / "csrc" / "manifest.py"), "--header",
                    str(gen / "if_kernel_decls.h")], check=True, capture_output=True)
    exe = tmp_path / "q4_amx_simde_test"
    subprocess.run([cc, "-O2", "-std=c11", "-ffp-contract=off", "-fno-fast-math", "-Wall",
                    "-Wextra", "-Wno-psabi", f"-I{inc}", f"-I{REPO / 'csrc' / 'include'}",
                    f"-I{gen}", str(REPO / "tests" / "native" / "q4_amx_simde_test.c"), "-o",
                    str(exe)], check=True, capture_output=True, text=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr
