"""The Arm IQ4 kernels (iq4nl_/iq4xs_gemv_1x4_dotprod and their GEMMs) under qemu-aarch64 with
the cached aarch64 toolchain (the tests/test_arm_emulated.py fixture): tests/native/
iq4_arm_test.c, built with only the manifest's dotprod flags for the kernels, compares them
with the scalar kernels bit for bit on random and extreme blocks (M 1 and 3, N 1..19, K 32..1056
or 256..1280) on a Cortex-A76 model (dotprod); the GEMVs' assembly holds SDOT and TBL."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from test_arm_emulated import toolchain  # noqa: F401

REPO = Path(__file__).resolve().parent.parent


def test_dotprod_iq4_kernels_equal_scalar_under_qemu(toolchain, tmp_path):  # noqa: F811
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
    for stem in [f"{t}_{op}_1x4_dotprod" for t in ("iq4nl", "iq4xs") for op in ("gemv", "gemm")]:
        src = next(p for _, p, _ in m.kernels if Path(p).stem == stem)
        obj = tmp_path / f"{stem}.o"
        subprocess.run([*zig, *common, *dot, "-c", str(REPO / src), "-o", str(obj)], check=True)
        objs.append(str(obj))
        if "gemv" in stem:  # the design's instructions: TBL lookup, SDOT products
            asm = tmp_path / f"{stem}.s"
            subprocess.run([*zig, *common, *dot, "-S", str(REPO / src), "-o", str(asm)],
                           check=True)
            lines = [x.strip() for x in asm.read_text().splitlines()]
            assert any(x.startswith("sdot") for x in lines), stem
            assert any(x.startswith("tbl") for x in lines), stem
    scalar = [str(REPO / p) for p in (
        "csrc/kernels/iq4/iq4nl_gemm_1x1_scalar.c", "csrc/kernels/iq4/iq4xs_gemm_1x1_scalar.c",
        "csrc/kernels/quantize/k8_quantize_1x1_scalar.c",
        "csrc/kernels/quantize/q8_quantize_1x1_scalar.c")]
    exe = tmp_path / "iq4_arm_test"
    subprocess.run([*zig, *common, "-mcpu=generic", str(REPO / "tests/native/iq4_arm_test.c"),
                    *objs, *scalar, "-lm", "-o", str(exe)], check=True)
    r = subprocess.run([toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", "cortex-a76", str(exe)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip().endswith("bad 0"), r.stdout[-2000:]
    assert int(r.stdout.split()[-3]) == 2 * 7 * 3 * 2 * 2, r.stdout
