"""The Arm K-quant and legacy-block kernels (q4k_/q5k_/q6k_gemv_1x1_dotprod,
q40_/q41_/q50_/q51_/q80_gemv_1x4_dotprod and their GEMMs) under
qemu-aarch64 with the cached aarch64 toolchain (the tests/test_arm_emulated.py fixture):
tests/native/kquant_arm_test.c, built with only the manifest's dotprod flags for the kernels,
compares them with the scalar kernels bit for bit on random and extreme blocks (M 1 and 3,
N 1..19, K 256..1280 or 32..1056) on a Cortex-A76 model (dotprod); the GEMVs' assembly holds
SDOT."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from test_arm_emulated import toolchain  # noqa: F401

REPO = Path(__file__).resolve().parent.parent


def test_dotprod_kquant_kernels_equal_scalar_under_qemu(toolchain, tmp_path):  # noqa: F811
    sys.path.insert(0, str(REPO / "csrc"))
    import manifest

    m = manifest.read()
    (tmp_path / "if_kernel_decls.h").write_text(manifest.header(m))
    zig = shlex.split(toolchain["ISAFORGE_ZIG_CC"])
    common = ["-std=c11", "-O3", "-ffp-contract=off", "-DIF_ARM_TIERS=1", "-target",
              "aarch64-linux-musl", f"-I{REPO / 'csrc/include'}", f"-I{tmp_path}",
              f"-I{REPO / 'csrc/kernels'}"]
    dot = m.groups["dotprod"].zigflags or m.groups["dotprod"].flags
    objs = []
    legacy = [f"{t}_{op}_1x4_dotprod" for t in ("q40", "q41", "q50", "q51", "q80")
              for op in ("gemv", "gemm")]
    for stem in ("q4k_gemv_1x1_dotprod", "q6k_gemv_1x1_dotprod", "q5k_gemv_1x1_dotprod",
                 "q4k_gemm_1x1_dotprod", "q6k_gemm_1x1_dotprod", "q5k_gemm_1x1_dotprod",
                 *legacy):
        src = next(p for _, p, _ in m.kernels if Path(p).stem == stem)
        obj = tmp_path / f"{stem}.o"
        subprocess.run([*zig, *common, *dot, "-c", str(REPO / src), "-o", str(obj)], check=True)
        objs.append(str(obj))
        if "gemv" in stem:  # the design's instruction: SDOT
            asm = tmp_path / f"{stem}.s"
            subprocess.run([*zig, *common, *dot, "-S", str(REPO / src), "-o", str(asm)],
                           check=True)
            assert any(x.strip().startswith("sdot") for x in asm.read_text().splitlines()), stem
    scalar = [str(REPO / p) for p in (
        "csrc/kernels/q4k/q4k_gemv_1x1_scalar.c", "csrc/kernels/q6k/q6k_gemv_1x1_scalar.c",
        "csrc/kernels/q4k/q4k_gemm_1x1_scalar.c", "csrc/kernels/q6k/q6k_gemm_1x1_scalar.c",
        "csrc/kernels/q5k/q5k_gemv_1x1_scalar.c", "csrc/kernels/q5k/q5k_gemm_1x1_scalar.c",
        *[f"csrc/kernels/legacy/{t}_gemm_1x1_scalar.c"
          for t in ("q40", "q41", "q50", "q51", "q80")],
        "csrc/kernels/quantize/k8_quantize_1x1_scalar.c",
        "csrc/kernels/quantize/q8_quantize_1x1_scalar.c")]
    exe = tmp_path / "kquant_arm_test"
    subprocess.run([*zig, *common, "-mcpu=generic", str(REPO / "tests/native/kquant_arm_test.c"),
                    *objs, *scalar, "-lm", "-o", str(exe)], check=True)
    r = subprocess.run([toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", "cortex-a76", str(exe)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("bad 0"), r.stdout[-2000:]
    assert int(r.stdout.split()[-3]) == 8 * 36, r.stdout
