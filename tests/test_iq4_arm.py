"""The Arm IQ4 kernels (iq4nl_/iq4xs_gemv_1x4_dotprod and their GEMMs) under qemu-aarch64 with
the cached aarch64 toolchain (the tests/test_arm_emulated.py fixture): tests/native/
iq4_arm_test.c, built with only the manifest's dotprod flags for the kernels, compares them
with the scalar kernels bit for bit on random and extreme blocks (M 1 and 3, N 1..19, K 32..1056
or 256..1280) on a Cortex-A76 model (dotprod); the GEMVs' assembly holds SDOT and TBL."""

from __future__ import annotations

import subprocess

from blocks_helper import arm_cc, arm_compile, arm_flags, assert_driver_clean, manifest_and_header
from conftest import REPO
from test_arm_emulated import toolchain  # noqa: F401


def test_dotprod_iq4_kernels_equal_scalar_under_qemu(toolchain, tmp_path):  # noqa: F811
    m = manifest_and_header(tmp_path)
    cc = arm_cc(toolchain, tmp_path)
    dot = arm_flags(m, "dotprod")
    objs = []
    for stem in [f"{t}_{op}_1x4_dotprod" for t in ("iq4nl", "iq4xs") for op in ("gemv", "gemm")]:
        # the GEMVs' assembly: the design's instructions, TBL lookup and SDOT products
        objs.append(arm_compile(cc, dot, m, stem, tmp_path, asm="gemv" in stem))
        if "gemv" in stem:
            lines = [x.strip() for x in (tmp_path / f"{stem}.s").read_text().splitlines()]
            assert any(x.startswith("sdot") for x in lines), stem
            assert any(x.startswith("tbl") for x in lines), stem
    scalar = [str(REPO / p) for p in (
        "csrc/kernels/iq4/iq4nl_gemm_1x1_scalar.c", "csrc/kernels/iq4/iq4xs_gemm_1x1_scalar.c",
        "csrc/kernels/quantize/k8_quantize_1x1_scalar.c",
        "csrc/kernels/quantize/q8_quantize_1x1_scalar.c")]
    exe = tmp_path / "iq4_arm_test"
    subprocess.run([*cc, "-mcpu=generic", str(REPO / "tests/native/iq4_arm_test.c"),
                    *objs, *scalar, "-lm", "-o", str(exe)], check=True)
    r = subprocess.run([toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", "cortex-a76", str(exe)],
                       capture_output=True, text=True, timeout=600)
    assert_driver_clean(r, 2 * 7 * 3 * 2 * 2)
