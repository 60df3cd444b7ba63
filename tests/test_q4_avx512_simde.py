"""The AVX-512 VNNI 4-bit kernels (q4_gemv_1x16_avx512_vnni, q4_gemm_8x16_avx512_vnni) on a CPU
without AVX-512: tests/native/build_q4_simde.sh compiles them once more without AVX-512 flags
against SIMDe (portable C implementations of the intrinsics, scripts/simde.sh fetches them) and
links them into q4_native_test.c (-DIF_Q4_SIMDE) as the table "avx512_vnni_simde", run on the
whole conformance grid (codebook kinds, tails, guard pages, long rows, odd group sizes) against
the scalar kernels bit for bit. The same files compiled with the real flags must contain the
instructions the design rests on (VPDPBUSD and VPSHUFB on zmm). The real instructions run under
the x86 emulator harness (q4_native_test's avx512_vnni tier) or on AVX-512 hardware."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import simde_include

REPO = Path(__file__).resolve().parent.parent
KERNELS = ("q4_gemv_1x16_avx512_vnni", "q4_gemm_8x16_avx512_vnni")

pytestmark = [
    pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only"),
    pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler"),
]




@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    inc = simde_include()
    out = tmp_path_factory.mktemp("q4simde")
    r = subprocess.run(["bash", str(REPO / "tests" / "native" / "build_q4_simde.sh"), str(out),
                        inc], capture_output=True, text=True)
    assert r.returncode == 0, f"build_q4_simde.sh failed:\n{r.stderr[-4000:]}"
    return out


def test_avx512_q4_kernels_under_simde_equal_scalar(built):
    r = subprocess.run([str(built / "q4_simde_test"), "--tier", "avx512_vnni_simde"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("ok"), r.stdout[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("tier avx512_vnni_simde:"))
    assert " ".join(KERNELS) in line, line
    assert int(line.split()[-2]) > 900, line  # the grid and the extra shapes all ran


@pytest.mark.skipif(not shutil.which("objdump"), reason="objdump (binutils) not installed")
@pytest.mark.parametrize("name", KERNELS)
def test_real_objects_use_vpdpbusd_and_vpshufb_on_zmm(built, name):
    asm = subprocess.run(["objdump", "-d", str(built / f"real-{name}.o")], capture_output=True,
                         text=True, check=True).stdout.lower()
    lines = asm.splitlines()
    dp = sum("vpdpbusd" in x and "%zmm" in x for x in lines)
    sh = sum("vpshufb" in x and "%zmm" in x for x in lines)
    assert dp > 0 and sh > 0, (name, dp, sh)


def test_avx512_vnni_and_amx_tiers_name_the_kernels():
    """csrc/cpu/dispatch.c's avx512_vnni tier runs these 4-bit kernels, amx the GEMV and its own
    GEMM (`isaforge info` lists only the tiers a CPU runs, so the table text is read)."""
    text = (REPO / "csrc" / "cpu" / "dispatch.c").read_text()
    want = {"avx512_vnni": KERNELS, "amx": (KERNELS[0], "q4_gemm_16x16_amx")}  # AMX's GEMM
    for tier, names in want.items():
        block = text.split(f'.tier = "{tier}"', 1)[1].split("},", 1)[0]
        for name in names:
            assert f"&if_k_{name}," in block, (tier, name)
