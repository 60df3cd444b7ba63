"""The Arm 4-bit kernels under qemu-aarch64 (the tests/test_arm_emulated.py pattern, its
toolchain and driver build): tests/native/q4_native_test.c compares every tier the emulated CPU
runs against the scalar 4-bit kernels and rotation bit for bit; the dotprod kernel's object
holds TBL (the codebook lookup) and SDOT, the scalar ones neither."""

from __future__ import annotations

import subprocess

import pytest

from test_arm_emulated import CPUS, drivers, toolchain  # noqa: F401  (the shared fixtures)

# CPU model -> the tiers q4_native_test must run besides scalar
EXPECT = {"cortex-a53": ["neon"], "cortex-a76": ["neon", "dotprod"],
          "neoverse-n2": ["neon", "dotprod", "i8mm"],
          "max-sme128": ["neon", "dotprod", "i8mm", "sme2"]}


@pytest.mark.parametrize("cpu", [c for c in EXPECT if c in CPUS])
def test_q4_kernels_equal_scalar_under_emulation(toolchain, drivers, cpu):  # noqa: F811
    exe = drivers["aarch64"].parent / "q4_native_test-aarch64"
    r = subprocess.run([toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", CPUS[cpu][0], str(exe)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:]
    ran = [ln.split()[1].rstrip(":") for ln in r.stdout.splitlines() if ln.startswith("tier ")]
    assert ran == EXPECT[cpu], r.stdout
    if "dotprod" in ran:
        assert "tier dotprod: q4_gemv_1x4_dotprod q4_gemm_1x4_dotprod" in r.stdout


def test_q4_dotprod_object_uses_tbl_and_sdot(drivers):  # noqa: F811
    asm = drivers["aarch64"].parent / "asm-aarch64"

    def count(name, insn):
        text = (asm / f"{name}.s").read_text().lower()
        return sum(1 for ln in text.splitlines() if ln.split()[:1] == [insn])
    assert count("q4_gemv_1x4_dotprod", "tbl") > 0 and count("q4_gemv_1x4_dotprod", "sdot") > 0
    for name in ("q4_gemv_1x1_scalar", "q4_gemm_1x1_scalar"):  # portable: not in asm-aarch64
        assert not (asm / f"{name}.s").exists() or count(name, "sdot") == 0
