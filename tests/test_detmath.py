"""The core's expf, sinf and cosf (csrc/detmath.c) give glibc's results bit for bit, and their
vector copies (AVX2 exp8, AVX-512 exp16) give if_expf's, by tests/native/detmath_test.c:

- against this machine's libm over 44 million float bit patterns (every 97th: every sign,
  exponent and range branch) and 8.9 million RoPE angles, where the C library is glibc and the
  CPU has FMA (glibc's x86-64 build without FMA rounds differently on a few inputs, and so
  does llama2.c's run.c built against it there); elsewhere skipped, saying why;
- against tests/data/detmath_glibc.bin (16,215 inputs with glibc 2.36's results, x86-64 with
  FMA: special values, range edges, RoPE angles, the floats around every multiple of pi/2
  below 120 where the range reduction cancels), on every platform; the aarch64 build checks the
  same file under qemu (tests/test_arm_emulated.py);
- the two tables in detmath.c against scripts/detmath_tables.py, which derives them with exact
  arithmetic."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from conftest import REPO, c_compiler
from test_build_manifest import manifest

RECORDED = REPO / "tests" / "data" / "detmath_glibc.bin"


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    cc = c_compiler()
    out = tmp_path_factory.mktemp("detmath") / "detmath_test"
    common = ["-O3", "-std=c11", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wextra",
              "-Werror", "-D_DEFAULT_SOURCE", f"-I{REPO / 'csrc' / 'include'}"]
    objs, cmds = [], []
    x86 = subprocess.run([cc, "-dumpmachine"], capture_output=True, text=True).stdout
    x86 = x86.startswith("x86_64")
    groups = manifest.read().groups
    srcs = [("csrc/detmath.c", []), ("csrc/cpu/features.c", []),
            ("tests/native/detmath_test.c", ["-DIF_X86_TIERS=1"] if x86 else [])]
    if x86:
        srcs += [("tests/native/detmath_lanes.c", [*groups["avx2"].flags, "-DLANES=8"]),
                 ("tests/native/detmath_lanes.c", [*groups["avx512"].flags, "-DLANES=16"])]
    for i, (src, flags) in enumerate(srcs):
        o = out.parent / f"{i}.o"
        cmds.append([cc, *common, *flags, "-c", str(REPO / src), "-o", str(o)])
        objs.append(str(o))
    cmds.append([cc, "-o", str(out), *objs, "-lm", "-lpthread"])
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    return out


def run(driver, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(driver), *args], capture_output=True, text=True, timeout=600)


def counts(line: str) -> dict[str, tuple[int, int]]:
    return {k: (int(a), int(b)) for k, a, b in re.findall(r"(\w+) (\d+)/(\d+)", line)}


def test_equal_to_the_platform_glibc_on_every_sampled_input(driver):
    r = run(driver, "libm")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    print(line)
    libc, arch, fma = line.split()[1:4]
    if libc != "glibc":
        pytest.skip(f"the C library is {libc}, not glibc: the recorded values stand in for it")
    if fma != "fma=1":
        pytest.skip(f"{arch} without FMA: glibc's expf/sinf/cosf round without fused "
                    "multiply-adds there and differ on a few inputs")
    c = counts(line)
    assert c["expf"][1] > 44_000_000 and c["rope_sinf"][1] > 8_000_000
    assert {k: v[0] for k, v in c.items()} == dict.fromkeys(c, 0), line


def test_equal_to_the_recorded_glibc_values(driver):
    r = run(driver, "recorded", str(RECORDED))
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "recorded 16215 mismatches 0" in r.stdout


def test_vector_exp_copies_equal_if_expf(driver):
    r = run(driver, "lanes")
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    c = counts(r.stdout)
    if "exp8" not in c:
        pytest.skip(f"no AVX2 here: {r.stdout.strip()}")
    assert c["exp8"][0] == 0 and c["exp8"][1] > 70_000_000
    if "exp16" in c:
        assert c["exp16"] == (0, c["exp8"][1])


def test_bad_usage_is_exit_2(driver):
    assert run(driver).returncode == 2
    assert run(driver, "recorded", str(RECORDED.with_name("missing.bin"))).returncode == 2


def test_tables_are_the_exact_values_derived_by_the_script():
    spec = importlib.util.spec_from_file_location("detmath_tables",
                                                  REPO / "scripts" / "detmath_tables.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["detmath_tables"] = mod
    spec.loader.exec_module(mod)
    src = (REPO / "csrc" / "detmath.c").read_text()

    def table(name: str) -> list[int]:
        body = re.search(name + r"\[\d+\] = \{(.*?)\};", src, re.S)
        assert body, name
        return [int(v, 16) for v in re.findall(r"0x[0-9a-f]+", body.group(1))]

    assert table("if_exp2_tab") == mod.exp2_tab()
    assert table("SC_INV_PIO4") == mod.inv_pio4_tab()
