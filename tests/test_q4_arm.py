"""The Arm 4-bit kernels under qemu-aarch64 (the tests/test_arm_emulated.py pattern, its
toolchain and driver build): tests/native/q4_native_test.c compares every tier the emulated CPU
runs against the scalar 4-bit kernels and rotation bit for bit on the Q8 conformance grid
(M x N x K x GS with tails, guard pages after the weights, scales and activations, sentinels
past the outputs), SME2 at streaming vector lengths 128, 256 and 512; each tier's objects hold
their instructions (neon: TBL + SMULL/SMLAL2/SADALP and no SDOT; dotprod: TBL + SDOT; i8mm:
TBL + SMMLA; sme2: LUTI4 from ZT0 + SDOT), the scalar ones none."""

from __future__ import annotations

import os
import subprocess

import pytest

from test_arm_emulated import CPUS, FULL_CONFORMANCE, drivers, toolchain  # noqa: F401

# CPU model -> the tiers q4_native_test must run besides scalar
_ALL = ["neon", "dotprod", "i8mm", "sme2"]
EXPECT = {"cortex-a53": ["neon"], "cortex-a76": ["neon", "dotprod"],
          "neoverse-n2": ["neon", "dotprod", "i8mm"],
          "max-sme128": _ALL, "max-sme256": _ALL, "max-sme512": _ALL}
# tier -> its 4-bit GEMV and GEMM
KERNELS = {"neon": ("q4_gemv_1x4_neon", "q4_gemm_4x4_neon"),
           "dotprod": ("q4_gemv_1x4_dotprod", "q4_gemm_1x4_dotprod"),
           "i8mm": ("q4_gemv_1x4_dotprod", "q4_gemm_4x4_i8mm"),
           "sme2": ("q4_gemv_1x1_sme2", "q4_gemm_1x1_sme2")}


@pytest.mark.parametrize("cpu", [c for c in EXPECT if c in CPUS])
def test_q4_kernels_equal_scalar_under_emulation(toolchain, drivers, cpu):  # noqa: F811
    exe = drivers["aarch64"].parent / "q4_native_test-aarch64"
    # the full grid where every tier runs at the widest vector; the others skip the large
    # GEMMs except at M = 1 and 17 (as the Q8 conformance) unless ISAFORGE_ARM_FULL=1
    full = cpu == FULL_CONFORMANCE or os.environ.get("ISAFORGE_ARM_FULL") == "1"
    r = subprocess.run([toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", CPUS[cpu][0], str(exe),
                        *([] if full else ["--quick"])],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:]
    ran = [ln.split()[1].rstrip(":") for ln in r.stdout.splitlines() if ln.startswith("tier ")]
    assert ran == EXPECT[cpu], r.stdout
    for tier in ran:
        gemv, gemm = KERNELS[tier]
        assert f"tier {tier}: {gemv} {gemm} " in r.stdout, r.stdout


def _count(drivers, name: str, insn: str) -> int:  # noqa: F811
    text = (drivers["aarch64"].parent / "asm-aarch64" / f"{name}.s").read_text().lower()
    return sum(1 for ln in text.splitlines() if ln.split()[:1] == [insn])


@pytest.mark.parametrize("name,present,absent", [
    ("q4_gemv_1x4_neon", ["tbl", "smull", "smlal2", "sadalp"], ["sdot", "smmla", "luti4"]),
    ("q4_gemm_4x4_neon", ["tbl", "smull", "smlal2", "sadalp"], ["sdot", "smmla", "luti4"]),
    ("q4_gemv_1x4_dotprod", ["tbl", "sdot"], ["smmla", "luti4"]),
    ("q4_gemm_4x4_i8mm", ["tbl", "smmla"], ["luti4"]),
    ("q4_gemv_1x1_sme2", ["luti4", "sdot"], ["tbl"]),
    ("q4_gemm_1x1_sme2", ["luti4", "sdot"], ["tbl"]),
])
def test_q4_arm_objects_use_their_instructions(drivers, name, present, absent):  # noqa: F811
    counts = {i: _count(drivers, name, i) for i in present + absent}
    print(f"{name}.s: {counts}")
    assert all(counts[i] > 0 for i in present), counts
    assert all(counts[i] == 0 for i in absent), counts
    if "luti4" in present:  # the table comes from ZT0, loaded by LDR ZT0
        text = (drivers["aarch64"].parent / "asm-aarch64" / f"{name}.s").read_text().lower()
        assert any(ln.split()[:2] == ["ldr", "zt0,"] for ln in text.splitlines())


def test_q4_scalar_objects_use_none(drivers):  # noqa: F811
    asm = drivers["aarch64"].parent / "asm-aarch64"
    for name in ("q4_gemv_1x1_scalar", "q4_gemm_1x1_scalar"):  # portable: not in asm-aarch64
        assert not (asm / f"{name}.s").exists() or _count(drivers, name, "sdot") == 0
