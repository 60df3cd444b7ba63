"""The Arm K-quant and legacy-block kernels of the neon, dotprod, i8mm and sme2 tiers (Q4_K,
Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; GEMV and GEMM) under qemu-aarch64 with the cached
aarch64 toolchain (the tests/test_arm_emulated.py fixture): tests/native/kquant_arm_test.c, each
kernel built with only its tier's manifest flags, compares them with the scalar kernels bit for
bit on random and extreme blocks (GEMV, and GEMM at M 1, 2, 5, 11; N 1, 2, 10, 19 from a row
past 0; K 256..1280 or 32..1056). Each tier runs on a CPU model without the next tier's feature
(neon: Cortex-A53, no dotprod; dotprod: Cortex-A76, no i8mm; i8mm: Neoverse-N2), so a stray
instruction traps; the sme2 GEMMs run on `max` at 128-, 256- and 512-bit streaming vector
lengths (tiles of 4, 8 and 16 rows; there the largest M and N are 37 and 41 for several tiles
and a tail at each). The assembly holds each tier's instruction: SDOT in the dotprod files (not
the K-quant GEMMs, which run the GEMV), SMMLA in the i8mm GEMMs, SMOPA in the sme2 GEMMs, SMULL /
SMLAL and neither SDOT nor SMMLA in the neon files."""

from __future__ import annotations

import subprocess

import pytest

from blocks_helper import arm_cc, arm_compile, arm_flags, assert_driver_clean, manifest_and_header
from conftest import REPO
from test_arm_emulated import _sme_cpu, toolchain  # noqa: F401

TYPES = ("q4k", "q5k", "q6k", "q40", "q41", "q50", "q51", "q80")
# the types with an SME2 GEMM of their own
SME2 = ("q4k", "q5k", "q6k", "q40", "q41", "q50", "q51")


def _stems(t: str) -> dict[str, list[str]]:
    """The kernel files of type t per tier (the i8mm tier decodes with the dotprod GEMV)."""
    if t.endswith("k"):
        return {"neon": [f"{t}_gemv_1x1_neon", f"{t}_gemm_1x1_neon"],
                "dotprod": [f"{t}_gemv_1x1_dotprod", f"{t}_gemm_1x1_dotprod"],
                "i8mm": [f"{t}_gemm_2x2_i8mm"],
                "sme2": [f"{t}_gemm_vlxvl_sme2"] if t in SME2 else []}
    return {"neon": [f"{t}_gemv_1x4_neon", f"{t}_gemm_4x4_neon"],
            "dotprod": [f"{t}_gemv_1x4_dotprod", f"{t}_gemm_1x4_dotprod"],
            "i8mm": [f"{t}_gemm_8x2_i8mm"],
            "sme2": [f"{t}_gemm_vlxvl_sme2"] if t in SME2 else []}


TIERS = {"neon": "cortex-a53", "dotprod": "cortex-a76", "i8mm": "neoverse-n2", "sme2": None}
# the sme2 tier's runs: its kernels at each streaming vector length
RUNS = {"neon": ("neon", TIERS["neon"]), "dotprod": ("dotprod", TIERS["dotprod"]),
        "i8mm": ("i8mm", TIERS["i8mm"]),
        **{f"sme{v}": ("sme2", _sme_cpu(v)) for v in (128, 256, 512)}}
# tier: (instructions each file must contain, instructions none may contain)
INSNS = {"neon": (("smull", "smlal"), ("sdot", "smmla", "usmmla")),
         "dotprod": (("sdot",), ("smmla",)),
         "i8mm": (("smmla",), ()),
         "sme2": (("smopa",), ())}


@pytest.fixture(scope="module")
def built(toolchain, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp("kquant_arm")
    m = manifest_and_header(tmp)
    cc = arm_cc(toolchain, tmp)
    objs, asm = [], {}
    for tier in TIERS:
        for t in TYPES:
            for stem in _stems(t)[tier]:
                objs.append(arm_compile(cc, arm_flags(m, tier), m, stem, tmp, asm=True))
                asm[stem] = (tmp / f"{stem}.s").read_text().lower().splitlines()
    scalar = [str(REPO / p) for p in (
        *[f"csrc/kernels/{t}/{t}_gemm_1x1_scalar.c" for t in ("q4k", "q5k", "q6k")],
        *[f"csrc/kernels/{t}/{t}_gemv_1x1_scalar.c" for t in ("q4k", "q5k", "q6k")],
        *[f"csrc/kernels/legacy/{t}_gemm_1x1_scalar.c"
          for t in ("q40", "q41", "q50", "q51", "q80")],
        "csrc/kernels/quantize/k8_quantize_1x1_scalar.c",
        "csrc/kernels/quantize/q8_quantize_1x1_scalar.c")]
    abi = tmp / "sme_abi.o"  # the SME ABI routines the streaming kernels call
    subprocess.run([*cc, *arm_flags(m, "sme2"), "-c", str(REPO / "csrc/kernels/sme_abi.c"), "-o",
                    str(abi)], check=True)
    objs.append(str(abi))
    exe = tmp / "kquant_arm_test"
    subprocess.run([*cc, "-mcpu=generic", str(REPO / "tests/native/kquant_arm_test.c"),
                    *objs, *scalar, "-lm", "-o", str(exe)], check=True)
    return exe, asm


@pytest.mark.parametrize("run", list(RUNS))
def test_arm_kquant_kernels_equal_scalar_under_qemu(toolchain, built, run):  # noqa: F811
    exe, _ = built
    tier, cpu = RUNS[run]
    r = subprocess.run([toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", cpu, str(exe), tier],
                       capture_output=True, text=True, timeout=900)
    assert_driver_clean(r, 8 * 4 * 3 * 2 * 5)  # 8 types x 4 N x 3 K x 2 fills x (GEMV + 4 M)


@pytest.mark.parametrize("tier", list(TIERS))
def test_arm_kquant_objects_use_their_instructions(built, tier):
    _, asm = built
    need, banned = INSNS[tier]
    for t in TYPES:
        for stem in _stems(t)[tier]:
            if stem.endswith("_gemm_1x1_dotprod"):  # runs the GEMV per activation row
                continue
            lines = [x.strip() for x in asm[stem]]
            for insn in need:
                n = sum(1 for x in lines if x.startswith(insn))
                print(f"{stem}.s: {n} x {insn}")
                assert n > 0, f"no {insn} in {stem}.s"
            for insn in banned:
                assert not any(x.startswith(insn) for x in lines), f"{insn} in {stem}.s"
