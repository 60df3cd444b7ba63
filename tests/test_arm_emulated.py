"""The C core on aarch64 without Arm hardware.

tests/native/if_native_test.c is built from csrc/ for aarch64 (Zig's clang, static musl) and
for this machine (cc, glibc; plus an x86_64 static musl build with Zig, to tell a libm
difference from an architecture difference), then run under qemu-aarch64 user mode as several
CPU models: feature detection and dispatch (`info`), kernel conformance against the scalar
tier (`conformance`), and whole-model logits (`forward`) compared bit for bit with x86-64.

Needs the toolchain of scripts/arm_toolchain.sh: with ISAFORGE_ARM_TESTS=1 the script is run
(a failure then fails the tests); otherwise the cached toolchain is used if present, else
every test here is skipped.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
STORIES = Path(__file__).resolve().parents[2] / "shared" / "models" / "stories260K"
CACHE = Path(
    os.environ.get("ISAFORGE_TOOLCHAIN_CACHE")
    or Path.home() / ".cache" / "isaforge" / "toolchain"
)
FORCED = os.environ.get("ISAFORGE_ARM_TESTS") == "1"
N_TOKENS = 64


def _sme_cpu(vl: int) -> str:
    """-cpu max with SME streaming vector lengths up to vl bits, vl the default."""
    props = ",".join(f"sme{v}={'on' if v <= vl else 'off'}" for v in (128, 256, 512, 1024, 2048))
    return f"max,{props},sme-default-vector-length={vl // 8}"


ALL_ARM = {"asimd", "asimddp", "i8mm", "sve2", "sme", "sme2"}
# name: (-cpu argument, features `info` must report, SME vector length in bytes or None,
#        the tier dispatch must choose for decode and prefill)
CPUS = {
    "cortex-a53": ("cortex-a53", {"asimd"}, None, "neon"),
    "cortex-a76": ("cortex-a76", {"asimd", "asimddp"}, None, "dotprod"),
    "neoverse-n2": ("neoverse-n2", {"asimd", "asimddp", "i8mm", "sve2"}, None, "i8mm"),
    "max-sme128": (_sme_cpu(128), ALL_ARM, 16, "sme2"),
    "max-sme256": (_sme_cpu(256), ALL_ARM, 32, "sme2"),
    "max-sme512": (_sme_cpu(512), ALL_ARM, 64, "sme2"),
}
# The CPU that has every feature (so runs every tier) gets the full conformance shape set; the
# others the --quick one (~7x less work under emulation) unless ISAFORGE_ARM_FULL=1.
FULL_CONFORMANCE = "max-sme512"
# Variables that change dispatch: cleared so `info` and conformance see automatic choice.
DISPATCH_VARS = ("ISAFORGE_KERNEL", "ISAFORGE_DISABLE_FEATURES")


def _exports(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export ") and "=" in line:
            key, _, val = line[len("export "):].partition("=")
            words = shlex.split(val)
            env[key] = words[0] if words else ""
    return env


@pytest.fixture(scope="module")
def toolchain() -> dict[str, str]:
    def unavailable(reason: str):
        if FORCED:
            pytest.fail(reason)
        pytest.skip(reason)

    if FORCED:
        r = subprocess.run(["bash", str(REPO / "scripts" / "arm_toolchain.sh")],
                           capture_output=True, text=True, timeout=3000)
        if r.returncode != 0:
            pytest.fail(f"scripts/arm_toolchain.sh failed:\n{r.stderr[-3000:]}")
        env = _exports(r.stdout)
    else:
        f = CACHE / "env.sh"
        if not f.is_file():
            pytest.skip(f"no cached aarch64 toolchain ({f} not found): run "
                        "scripts/arm_toolchain.sh, or set ISAFORGE_ARM_TESTS=1 to let the tests "
                        "run it")
        env = _exports(f.read_text())
    cc, qemu = env.get("ISAFORGE_ZIG_CC", ""), env.get("ISAFORGE_QEMU_AARCH64", "")
    if not cc or not qemu:
        unavailable("toolchain exports lack ISAFORGE_ZIG_CC or ISAFORGE_QEMU_AARCH64")
    if not os.access(qemu, os.X_OK):
        unavailable(f"cached qemu-aarch64 {qemu} is missing: run scripts/arm_toolchain.sh")
    zig = shlex.split(cc)
    if zig[-1] == "cc" and subprocess.run([*zig[:-1], "version"],
                                          capture_output=True).returncode != 0:
        unavailable(f"`{cc}` does not run (ziglang not installed?): run "
                    "scripts/arm_toolchain.sh")
    return {"ISAFORGE_ZIG_CC": cc, "ISAFORGE_QEMU_AARCH64": qemu}


@pytest.fixture(scope="module")
def drivers(toolchain, tmp_path_factory) -> dict[str, Path]:
    # one build per session, shared by every module that imports this fixture (each import is
    # its own fixture instance, so the folder and a marker say whether it was built)
    out = tmp_path_factory.getbasetemp() / "if_native_test"
    targets = ("aarch64", "native", "x86_64-musl")
    built = out / "built.ok"
    if not built.is_file():
        out.mkdir(exist_ok=True)
        # The x86-64 builds are the reference for aarch64's scalar tier: they leave the x86
        # tier files out (ISAFORGE_NATIVE_X86_TIERS=0), which other tests cover.
        env = {**os.environ, **toolchain, "ISAFORGE_NATIVE_X86_TIERS": "0"}
        r = subprocess.run(["bash", str(REPO / "tests" / "native" / "build.sh"), str(out),
                            *targets], env=env, capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, f"tests/native/build.sh failed:\n{r.stderr[-4000:]}"
        built.write_text("ok\n")
    return {t: out / f"if_native_test-{t}" for t in targets}


# The long emulator runs (every CPU model's conformance, here and in test_q4_arm.py) start in
# the background at this module's first test, longest first, as many at a time as the machine
# has cores, so they overlap each other and the tests in between; a test then takes its run's
# result (or runs it itself when it was not started). Only selected tests' runs are started.
_JOBS: dict[tuple, object] = {}
Q4_CONFORMANCE_TEST = "test_q4_kernels_equal_scalar_under_emulation"


def q4_trace_log(drivers, cpu: str) -> Path | None:
    """Where the 4-bit conformance run on an SME CPU logs what qemu translated (-d in_asm:
    test_q4_arm.py checks that every SMOPA / LUTI4 site of the SME2 GEMM ran); None elsewhere."""
    return drivers["aarch64"].parent / f"q4_in_asm-{cpu}.log" if CPUS[cpu][2] else None


def conformance_cmd(toolchain, drivers, kind: str, cpu: str) -> list[str]:
    """The emulator command of a conformance run: kind "q8" (if_native_test) or "q4"."""
    full = cpu == FULL_CONFORMANCE or os.environ.get("ISAFORGE_ARM_FULL") == "1"
    quick = [] if full else ["--quick"]
    qemu = [toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", CPUS[cpu][0]]
    if kind == "q4":
        log = q4_trace_log(drivers, cpu)
        return [*qemu, *(["-d", "in_asm", "-D", str(log)] if log else []),
                str(drivers["aarch64"].parent / "q4_native_test-aarch64"), *quick]
    return [*qemu, str(drivers["aarch64"]), "conformance", *quick]


def conformance_run(toolchain, drivers, kind: str, cpu: str) -> subprocess.CompletedProcess:
    """The result of a conformance run: the background one if it was started, else run now."""
    job = _JOBS.pop((kind, cpu), None)
    if job is not None:
        return job.result()
    return subprocess.run(conformance_cmd(toolchain, drivers, kind, cpu), capture_output=True,
                          text=True, timeout=1800, env=_env())


@pytest.fixture(scope="module", autouse=True)
def _start_conformance_runs(request):
    import concurrent.futures

    wanted = []
    for item in request.session.items:
        cpu = getattr(item, "callspec", None) and item.callspec.params.get("cpu")
        if item.originalname == "test_conformance_under_emulation" and cpu:
            wanted.append(("q8", cpu))
        elif item.originalname == Q4_CONFORMANCE_TEST and cpu:
            wanted.append(("q4", cpu))
    if not FORCED and not (CACHE / "env.sh").is_file() or not wanted:
        yield
        return
    tc = request.getfixturevalue("toolchain")
    dr = request.getfixturevalue("drivers")
    wanted.sort(key=lambda j: (j[1] != FULL_CONFORMANCE, j[0] != "q8"))  # longest first
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1))
    for kind, cpu in wanted:
        _JOBS[(kind, cpu)] = pool.submit(
            subprocess.run, conformance_cmd(tc, dr, kind, cpu), capture_output=True,
            text=True, timeout=1800, env=_env())
    yield
    pool.shutdown(wait=False)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DISPATCH_VARS}
    env.update(extra)
    return env


def emu(toolchain, drivers, cpu: str, *args: str, timeout: float = 900,
        env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the aarch64 driver under qemu-aarch64 -cpu CPUS[cpu]."""
    cmd = [toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", CPUS[cpu][0], str(drivers["aarch64"]),
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=env or _env())


def host(drivers, target: str, *args: str, env: dict | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(drivers[target]), *args], capture_output=True, text=True,
                          timeout=timeout, env=env or _env())


def parse_info(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


# ---------------------------------------------------------------------------------------------
# info: features and dispatch


@pytest.mark.parametrize("cpu", list(CPUS))
def test_info_reports_the_cpu_models_features(toolchain, drivers, cpu):
    r = emu(toolchain, drivers, cpu, "info")
    assert r.returncode == 0, r.stderr
    info = parse_info(r.stdout)
    assert info["arch"] == "aarch64"
    assert set(filter(None, info["features"].split(","))) == CPUS[cpu][1], r.stdout
    svl = CPUS[cpu][2]
    if svl is None:
        assert "sme_svl_bytes" not in info
    else:
        assert int(info["sme_svl_bytes"]) == svl, r.stdout
    if cpu == "neoverse-n2":
        assert int(info["sve_vl_bytes"]) == 16  # Neoverse N2 has 128-bit SVE
    # dispatch picked the expected tier, supported here, for decode and for prefill
    assert info["tier.scalar"] == "supported"
    for op in ("decode", "prefill"):
        assert info[f"tier.{info[op]}"] == "supported", r.stdout
        assert info[op] == CPUS[cpu][3], r.stdout
    assert info["decode.q8_gemv"] and info["prefill.q8_gemm"]


def test_info_honours_disabled_features_under_emulation(toolchain, drivers):
    r = emu(toolchain, drivers, "max-sme512", "info",
            env=_env(ISAFORGE_DISABLE_FEATURES="sme,sme2"))
    assert r.returncode == 0, r.stderr
    info = parse_info(r.stdout)
    assert info["disabled"] == "sme,sme2"
    for op in ("decode", "prefill"):
        assert info[f"tier.{info[op]}"] == "supported", r.stdout
        assert info[op] == "i8mm", r.stdout
    r = emu(toolchain, drivers, "cortex-a53", "info", env=_env(ISAFORGE_KERNEL="no_such_tier"))
    assert r.returncode == 2 and "unknown kernel tier" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("tier,insn", [("q8_gemv_1x4_dotprod", "sdot"),
                                       ("q8_gemm_4x4_dotprod", "sdot"),
                                       ("q8_gemm_2x4_i8mm", "smmla"),
                                       ("q4k_gemm_2x2_i8mm", "smmla"),
                                       ("q5k_gemm_2x2_i8mm", "smmla"),
                                       ("q6k_gemm_2x2_i8mm", "smmla"),
                                       ("q40_gemm_8x2_i8mm", "smmla"),
                                       ("q41_gemm_8x2_i8mm", "smmla"),
                                       ("q50_gemm_8x2_i8mm", "smmla"),
                                       ("q51_gemm_8x2_i8mm", "smmla"),
                                       ("q8_gemm_vlxvl_sme2", "smopa"),
                                       ("q4k_gemm_vlxvl_sme2", "smopa"),
                                       ("q5k_gemm_vlxvl_sme2", "smopa"),
                                       ("q6k_gemm_vlxvl_sme2", "smopa"),
                                       ("q40_gemm_vlxvl_sme2", "smopa"),
                                       ("q41_gemm_vlxvl_sme2", "smopa"),
                                       ("q50_gemm_vlxvl_sme2", "smopa"),
                                       ("q51_gemm_vlxvl_sme2", "smopa")])
def test_arm_tier_objects_use_their_instructions(drivers, tier, insn):
    """The assembly of each Arm tier file (same compiler and flags as its object) contains
    its instruction; the neon and scalar files contain none of SDOT/SMMLA/SMOPA."""
    n = asm_count(drivers, tier, insn)
    print(f"{tier}.s: {n} x {insn}")
    assert n > 0, f"no {insn} in {tier}.s"
    kquant_neon = [*(f"{t}_{op}_1x1_neon" for t in ("q4k", "q5k", "q6k")
                     for op in ("gemv", "gemm")),
                   *(f"{t}_gemv_1x4_neon" for t in ("q40", "q41", "q50", "q51")),
                   *(f"{t}_gemm_4x4_neon" for t in ("q40", "q41", "q50", "q51"))]
    for name in ("q8_gemv_1x4_neon", "q8_gemm_4x4_neon", "q8_quantize_1x1_neon", *kquant_neon):
        for other in ("sdot", "smmla", "smopa", "usmmla"):
            k = asm_count(drivers, name, other)
            print(f"{name}.s: {k} x {other}")
            assert k == 0, name


# ---------------------------------------------------------------------------------------------
# conformance: every supported tier against the scalar kernels


def asm_count(drivers, name: str, insn: str) -> int:
    """The lines of asm-aarch64/<name>.s (an Arm kernel file's assembly, from its object's
    compiler and flags) whose mnemonic is insn."""
    text = (drivers["aarch64"].parent / "asm-aarch64" / f"{name}.s").read_text().lower()
    return sum(1 for ln in text.splitlines() if ln.split()[:1] == [insn])


def _digest(stdout: str) -> str:
    line = next((x for x in stdout.splitlines() if x.startswith("conformance ok")), "")
    assert line, stdout[-2000:]
    return line.split("digest ")[1].split()[0]


@pytest.fixture(scope="module")
def native_conformance_digest(drivers) -> str:
    r = host(drivers, "native", "conformance", "--quick")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return _digest(r.stdout)


@pytest.mark.parametrize("cpu", list(CPUS))
def test_conformance_under_emulation(toolchain, drivers, native_conformance_digest, cpu):
    r = conformance_run(toolchain, drivers, "q8", cpu)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # the scalar results themselves equal x86-64's: same digest over the same random shapes
    assert _digest(r.stdout) == native_conformance_digest, r.stdout[-500:]


# ---------------------------------------------------------------------------------------------
# forward: whole-model logits, aarch64 against x86-64


@pytest.fixture(scope="module")
def v2_model(tmp_path_factory) -> Path:
    if not (STORIES / "stories260K.bin").is_file():
        pytest.skip(f"test model not found at {STORIES}")
    if importlib.util.find_spec("isaforge") is None:
        pytest.skip("the isaforge package is not importable: cannot write a Q8 (v2) model")
    out = tmp_path_factory.mktemp("arm_q8") / "stories260K_q8.bin"
    r = subprocess.run([sys.executable, "-m", "isaforge", "quantize",
                        str(STORIES / "stories260K.bin"), "-o", str(out), "--group-size", "4"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module", params=["fp32-v0", "q8-v2"])
def model_logits(request, toolchain, drivers, tmp_path_factory) -> dict[str, np.ndarray]:
    """Logits of the same tokens from every build: 'aarch64:<cpu>', 'x86_64-musl', 'native'.
    The x86-64 builds run only the scalar tier; every aarch64 tier must give its bits."""
    if request.param == "fp32-v0":
        model = STORIES / "stories260K.bin"
        if not model.is_file():
            pytest.skip(f"test model not found at {STORIES}")
    else:
        model = request.getfixturevalue("v2_model")
    d = tmp_path_factory.mktemp("logits")
    out = {}
    for cpu in CPUS:
        f = d / f"aarch64-{cpu}.f32"
        r = emu(toolchain, drivers, cpu, "forward", str(model), str(f), str(N_TOKENS))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "prefill_equal=yes" in r.stdout, r.stdout
        out[f"aarch64:{cpu}"] = np.fromfile(f, dtype="<f4")
    for target in ("x86_64-musl", "native"):
        f = d / f"{target}.f32"
        r = host(drivers, target, "forward", str(model), str(f), str(N_TOKENS),
                 env=_env(ISAFORGE_KERNEL="scalar"))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "prefill_equal=yes" in r.stdout, r.stdout
        out[target] = np.fromfile(f, dtype="<f4")
    for k, v in out.items():
        assert v.size % N_TOKENS == 0 and v.size > 0, k
    out["_name"] = request.param  # type: ignore[assignment]
    return out


def describe_difference(a: np.ndarray, b: np.ndarray) -> str:
    """Where and by how much two (n_tokens * vocab) logit arrays differ."""
    a2, b2 = a.reshape(N_TOKENS, -1), b.reshape(N_TOKENS, -1)
    ia, ib = a2.view(np.int32).astype(np.int64), b2.view(np.int32).astype(np.int64)
    # ordered integer images of the floats, so the difference counts ulps across zero
    oa = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ob = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    diff = oa != ob
    pos = np.nonzero(diff.any(axis=1))[0]
    first = int(pos[0])
    err = np.abs(a2.astype(np.float64) - b2.astype(np.float64))
    same_argmax = int((a2.argmax(axis=1) == b2.argmax(axis=1)).sum())
    return (f"{int(diff.sum())} of {diff.size} logits differ, at {pos.size} of {N_TOKENS} "
            f"positions, the first at position {first}; max |diff| {err.max():.3g} (position "
            f"{int(err.max(axis=1).argmax())}), max {int(np.abs(oa - ob).max())} ulp; argmax "
            f"equal at {same_argmax}/{N_TOKENS} positions")


def _libm_tables(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    b, off, out = path.read_bytes(), 0, {}
    for name in ("expf", "sinf", "cosf", "powf", "sqrtf", "roundf"):
        (n,) = struct.unpack_from("<I", b, off)
        nin = 2 * n if name == "powf" else n
        x = np.frombuffer(b, "<f4", nin, off + 4)
        y = np.frombuffer(b, "<f4", n, off + 4 + 4 * nin)
        off += 4 + 4 * nin + 4 * n
        out[name] = (x, y)
    return out


def libm_comparison(toolchain, drivers, tmp_path) -> str:
    """Which math functions give different bits in the aarch64 build and the native one."""
    ta, tn = tmp_path / "libm-aarch64.bin", tmp_path / "libm-native.bin"
    r = emu(toolchain, drivers, "cortex-a53", "libm", str(ta))
    assert r.returncode == 0, r.stderr
    r = host(drivers, "native", "libm", str(tn))
    assert r.returncode == 0, r.stderr
    a, n = _libm_tables(ta), _libm_tables(tn)
    parts = []
    for name in a:
        ya, yn = a[name][1].view(np.int32), n[name][1].view(np.int32)
        d = ya != yn
        if d.any():
            ulp = int(np.abs(ya.astype(np.int64) - yn)[d].max())
            parts.append(f"{name}: {int(d.sum())}/{d.size} inputs differ (max {ulp} ulp)")
    return "; ".join(parts) or "no difference on the sampled inputs"


@pytest.mark.parametrize("cpu", ["max-sme128", "max-sme512"])
def test_sme2_hybrid_split_gives_the_single_tier_bits(toolchain, drivers, v2_model, tmp_path,
                                                      cpu):
    """The SME2 hybrid split (if_model_opts.sme2_workers = k): in every Q8 matmul, decode and
    prefill, workers 0..k-1 run the SME2 kernels and the rest dotprod's over the same row-major
    weights. Logits at 2 and 3 threads and k = 0, 1, 2, 3 equal one thread's SME2-only logits
    and the dotprod tier's bit for bit (par_min_work 1: every matmul is split)."""
    def run(name: str, **extra: str) -> tuple[str, np.ndarray]:
        f = tmp_path / f"{name}.f32"
        r = emu(toolchain, drivers, cpu, "forward", str(v2_model), str(f), str(N_TOKENS),
                env=_env(**extra))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "prefill_equal=yes" in r.stdout, r.stdout
        return r.stdout, np.fromfile(f, dtype="<f4")

    out, ref = run("sme2-1t")
    assert "decode=sme2 prefill=sme2" in out, out
    out, dot = run("dotprod-1t", ISAFORGE_KERNEL="dotprod")
    assert "decode=dotprod prefill=dotprod" in out, out
    assert ref.size == dot.size > 0 and ref.tobytes() == dot.tobytes()
    for threads in (2, 3):
        for k in (0, 1, 2, 3):
            out, got = run(f"t{threads}k{k}", IF_TEST_THREADS=str(threads),
                           IF_TEST_SME2_WORKERS=str(k), IF_TEST_PAR_MIN_WORK="1")
            assert "decode=sme2 prefill=sme2" in out, out
            assert got.tobytes() == ref.tobytes(), (
                f"threads={threads} sme2_workers={k}: " + describe_difference(got, ref))


def test_forward_aarch64_identical_on_every_cpu_model(model_logits):
    ref = model_logits["aarch64:cortex-a53"]
    for cpu in CPUS:
        got = model_logits[f"aarch64:{cpu}"]
        assert got.tobytes() == ref.tobytes(), f"{cpu}: {describe_difference(got, ref)}"


def test_forward_aarch64_equals_x86_64_with_the_same_libm(model_logits):
    """Same sources, same libm (Zig's musl), two architectures: bit for bit."""
    a, x = model_logits["aarch64:cortex-a53"], model_logits["x86_64-musl"]
    assert a.tobytes() == x.tobytes(), (
        f"{model_logits['_name']}: aarch64 vs x86_64 (both Zig musl): "
        f"{describe_difference(a, x)}")


def test_forward_aarch64_equals_x86_64_native(model_logits, toolchain, drivers, tmp_path):
    """aarch64 (Zig musl libm) against the native glibc build: bit for bit. The forward pass
    calls expf (softmax, SwiGLU), sinf/cosf/powf (RoPE) from the C library, so this holds only
    if the two libms agree on every input the model feeds them."""
    a, n = model_logits["aarch64:cortex-a53"], model_logits["native"]
    if a.tobytes() == n.tobytes():
        return
    if a.tobytes() == model_logits["x86_64-musl"].tobytes():
        cause = ("gives the aarch64 logits bit for bit, so the cause is the C library's math "
                 "functions, not the architecture or the compiler")
    else:
        cause = "differs from aarch64 too"
    pytest.fail(
        f"{model_logits['_name']}: aarch64 logits differ from x86-64 native (glibc): "
        f"{describe_difference(a, n)}. The x86_64 build linked against the same libm as "
        f"aarch64 (Zig's musl) {cause}. libm, aarch64 vs native on the forward pass's input "
        f"ranges: {libm_comparison(toolchain, drivers, tmp_path)}")


def test_libm_identical_across_architectures_with_the_same_libc(toolchain, drivers, tmp_path):
    """The aarch64 build's math library gives the x86_64 musl build's bits: the only
    arch-dependent piece would be libm, and it is not."""
    ta, tx = tmp_path / "a.bin", tmp_path / "x.bin"
    assert emu(toolchain, drivers, "cortex-a76", "libm", str(ta)).returncode == 0
    assert host(drivers, "x86_64-musl", "libm", str(tx)).returncode == 0
    assert ta.read_bytes() == tx.read_bytes()


def test_core_math_gives_the_recorded_glibc_bits_on_musl_and_aarch64(toolchain, drivers):
    """The core's expf/sinf/cosf (csrc/detmath.c) on aarch64 (under qemu) and on x86-64 with
    Zig's musl give the glibc results recorded in tests/data/detmath_glibc.bin: the C library
    and the architecture change nothing (tests/test_detmath.py checks the glibc build)."""
    rec = str(REPO / "tests" / "data" / "detmath_glibc.bin")
    aarch64 = drivers["aarch64"].with_name("detmath_test-aarch64")
    r = subprocess.run([toolchain["ISAFORGE_QEMU_AARCH64"], "-cpu", CPUS["cortex-a76"][0],
                        str(aarch64), "recorded", rec], capture_output=True, text=True,
                       timeout=900, env=_env())
    assert r.returncode == 0 and "mismatches 0 (musl aarch64)" in r.stdout, r.stdout + r.stderr
    musl = drivers["x86_64-musl"].with_name("detmath_test-x86_64-musl")
    r = subprocess.run([str(musl), "recorded", rec], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "mismatches 0 (musl x86_64)" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------
# the driver's own model reader: both classifier layouts, and files it must refuse


def _unshared(model: Path, out: Path) -> Path:
    """The same model with its classifier stored separately (a copy of the token table)."""
    b = bytearray(model.read_bytes())
    dim, _hidden, layers, _h, _kv, vocab, _seq = struct.unpack_from("<7i", b, 0)
    if struct.unpack_from("<I", b, 0)[0] == 0x616B3432:  # v2: flag byte 36, Q8 token table
        dim, _hidden, layers, _h, _kv, vocab, _seq = struct.unpack_from("<7i", b, 8)
        assert b[36] == 1
        (gs,) = struct.unpack_from("<i", b, 37)
        b[36] = 0
        start = 256 + 4 * (2 * layers * dim + dim)
        b += b[start:start + vocab * dim + 4 * (vocab * dim // gs)]
    else:  # v0: negative vocab_size, fp32 token table right after the header
        assert vocab > 0
        struct.pack_into("<i", b, 20, -vocab)
        b += b[28:28 + 4 * vocab * dim]
    out.write_bytes(bytes(b))
    return out


@pytest.mark.parametrize("fmt", ["fp32-v0", "q8-v2"])
def test_forward_reads_unshared_classifiers_and_refuses_bad_files(toolchain, drivers, tmp_path,
                                                                  request, fmt):
    if fmt == "fp32-v0":
        model = STORIES / "stories260K.bin"
        if not model.is_file():
            pytest.skip(f"test model not found at {STORIES}")
    else:
        model = request.getfixturevalue("v2_model")

    def run(path: Path, out: Path) -> subprocess.CompletedProcess:
        return emu(toolchain, drivers, "cortex-a53", "forward", str(path), str(out), "8")

    r = run(model, tmp_path / "shared.f32")
    assert r.returncode == 0, r.stderr
    r = run(_unshared(model, tmp_path / "unshared.bin"), tmp_path / "unshared.f32")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "unshared.f32").read_bytes() == (tmp_path / "shared.f32").read_bytes()

    data = model.read_bytes()
    for name, blob, message in [
        ("short.bin", data[:-4], "truncated"),
        ("header_only.bin", data[:256], "truncated"),
        ("tiny.bin", data[:10], "truncated"),
        ("garbage.bin", b"\xff" * 4096, "out of range"),
    ]:
        (tmp_path / name).write_bytes(blob)
        r = run(tmp_path / name, tmp_path / "bad.f32")
        assert r.returncode == 2 and message in r.stderr, (name, r.returncode, r.stderr)
    r = run(tmp_path / "does_not_exist.bin", tmp_path / "bad.f32")
    assert r.returncode == 2 and "No such file" in r.stderr, r.stderr
