"""The int8 peak probes of `isaforge bench limits` (csrc/bench/peak_int8_*.c) issue the
instructions they count: every accumulator is its own chain in the compiled loop. (The VNNI
probes once compiled to one VPDPBUSD per iteration instead of 12: the 12 accumulators started
equal, so the compiler merged them.) Reads the built _bench module's disassembly; no timing."""

from __future__ import annotations

import platform
import shutil
import subprocess

import pytest

from isaforge import _bench

# probe -> (instruction, per loop iteration)
PROBES = {"ifb_peak_loop_avx2": ("vpmaddubsw", 8), "ifb_peak_loop_avx_vnni": ("vpdpbusd", 12),
          "ifb_peak_loop_avx512_vnni": ("vpdpbusd", 12)}


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 probes")
@pytest.mark.parametrize("symbol", sorted(PROBES))
def test_peak_probe_loop_issues_every_accumulator(symbol):
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump (binutils) not installed")
    asm = subprocess.run([objdump, "-d", f"--disassemble={symbol}", _bench.__file__],
                         capture_output=True, text=True, check=True).stdout
    assert f"<{symbol}" in asm, f"{symbol} not in {_bench.__file__}"
    insn, want = PROBES[symbol]
    assert sum(insn in line for line in asm.splitlines()) == want, asm
