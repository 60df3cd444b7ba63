"""What the tests of the GGML block types (K-quants, legacy blocks of 32, IQ4) share: for their
kernels (tests/test_*_kernels.py) the activations, block scales and runs of _bench.kq_gemm,
the tier-against-scalar loops, the guard-page script's operands and the x86 objects' assembly;
for whole models holding the blocks in place (tests/test_*_model.py) the tiny configuration,
the llama.cpp-quantized files, greedy decoding, the comparison across tiers, threads and
prefill chunks, and the files' own values read back by the gguf package; for the Arm kernels
under qemu (tests/test_*_arm.py) the cross compiler's flags."""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import GUARDED_PRELUDE, REPO, cli
from isaforge import _bench, _native
from isaforge.formats import with_context
from isaforge.formats.gguf import read_gguf
from isaforge.quant.ggml import KQTensor
from isaforge.reference import Reference, quantize_k8
from isaforge.runtime.engine import Engine, select_kernel
from isaforge.types import Config, Weights
from test_gguf import float_tensors, weights_from, write_gguf

# ---- kernels ----

# the tiers each kernel is compared with scalar on: every other one this CPU runs
SIMD_TIERS = [t["name"] for t in _native.info()["tiers"]
              if t["supported"] and t["name"] != "scalar"]
# f16 scales that are subnormal, zero, negative, infinite or NaN (0x7E00, 0x7C01), and the
# largest finite ones
SPECIAL_F16 = np.array([0x0001, 0x03FF, 0x0200, 0x8001, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00,
                        0x7C01, 0x0400, 0x7BFF, 0xBC00], np.uint16)


def f16_bits(v) -> np.ndarray:
    """The little-endian f16 bytes of v, two per value."""
    return np.asarray(v, np.float16).view(np.uint8).reshape(-1, 2)


def block_scales(rng, shape, pow2: bool, pow2_top: int) -> np.ndarray:
    """Random block scales that are finite in f16: powers of two from 2^-20 below 2^pow2_top
    when pow2 (every product order is then exact), else uniform in (-1, 1) times 10^-6 .. 1."""
    if pow2:
        return 2.0 ** rng.integers(-20, pow2_top, shape)
    return rng.uniform(-1, 1, shape) * 10.0 ** rng.integers(-6, 1, shape)


def sums16(xq: np.ndarray) -> np.ndarray:
    """The int16 sums of each 16 int8 activations of the rows xq (M, K), the kernels' xsum."""
    return xq.reshape(xq.shape[0], -1, 16).astype(np.int16).sum(axis=2).astype(np.int16)


def l8_rows(x: np.ndarray, qb: int):
    """The rows of x (M, K) quantized by reference.quantize_k8 at qb values per scale (32: L8,
    256: K8): (int8 values, float32 scales, int16 sums of 16)."""
    parts = [quantize_k8(r, qb) for r in x]
    return tuple(np.stack([p[i] for p in parts]) for i in range(3))


def activations(rng, M: int, K: int, qb: int, quantize, fill: int | None = None):
    """Random rows of M x K floats over six decades, quantized by quantize(x): row 0 opens with
    a zero block (scale 0, values 0) and, when K holds two blocks, one of +-1 (every value
    +-127). With fill every value is `fill` instead (the sums recomputed), the extreme case."""
    x = (rng.normal(size=(M, K)) * 10.0 ** rng.integers(-3, 3, (M, 1))).astype(np.float32)
    x[0, :qb] = 0.0
    if K >= 2 * qb:
        x[0, qb:2 * qb] = np.where(np.arange(qb) % 2, 1.0, -1.0)
    xq, xd, xsum = quantize(x)
    if fill is not None:
        xq[:] = fill
        xsum = sums16(xq)
    return xq, xd, xsum


def one_hot(K: int, qb: int):
    """Activations that read a kernel's weights back: row i is value i at 1, scales 1, so
    out[i, n] is row n's weight i."""
    xq = np.eye(K, dtype=np.int8)
    return xq, np.ones((K, K // qb), np.float32), sums16(xq)


def run(typ, xq, xd, xsum, blocks, N, tier, gemm=False) -> np.ndarray:
    """out (M, N) of _bench.kq_gemm on `tier` (the GEMM body when gemm), NaN before the call so
    an output left unwritten cannot pass."""
    M, K = xq.shape
    out = np.full((M, N), np.nan, np.float32)
    _bench.kq_gemm(typ, xq, xd, xsum, M, blocks, N, K, out, tier, gemm)
    return out


def assert_bits_equal(want, typ, xq, xd, xsum, blocks, N, tiers, gemms=(False, True),
                      where=()) -> None:
    """Every tier's output (each of gemms) equals want bit for bit."""
    for tier in tiers:
        for gemm in gemms:
            got = run(typ, xq, xd, xsum, blocks, N, tier, gemm)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (*where, tier, gemm)


def assert_special_scales_equal_scalar(typ, xq, xd, xsum, blocks, N, tiers,
                                       gemms=(False, True)) -> None:
    """Blocks with special scales: the scalar output has NaNs, infinities and finite values, and
    every tier gives the scalar kernel's floats (the bits equal; a NaN's payload may differ:
    which NaN operand x86 passes on depends on the compiler's operand order)."""
    want = run(typ, xq, xd, xsum, blocks, N, "scalar")
    nan = np.isnan(want)
    assert nan.any() and np.isinf(want).any() and np.isfinite(want).any()
    for tier in tiers:
        for gemm in gemms:
            got = run(typ, xq, xd, xsum, blocks, N, tier, gemm)
            assert np.array_equal(np.isnan(got), nan), tier
            assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), tier


def tier_failures(make_case, rng, typ, k_set, n_set, m_set, tiers) -> list[tuple]:
    """(tier, gemm, M, N, K) of every case of the grid where a tier's GEMV or GEMM differs from
    scalar in a bit; make_case(rng, typ, M, N, K) gives (xq, xd, xsum, blocks)."""
    failures = []
    for K in k_set:
        for N in n_set:
            for M in m_set:
                xq, xd, xsum, blocks = make_case(rng, typ, M, N, K)
                want = run(typ, xq, xd, xsum, blocks, N, "scalar").view(np.uint32)
                for tier in tiers:
                    for gemm in (False, True):
                        got = run(typ, xq, xd, xsum, blocks, N, tier, gemm).view(np.uint32)
                        if not np.array_equal(got, want):
                            failures.append((tier, gemm, M, N, K))
    return failures


# The guard-page script's start for kq_gemm: GUARDED_PRELUDE, then each operand ending at an
# inaccessible page and the check of one tier against the scalar output.
KQ_GUARDED_PRELUDE = GUARDED_PRELUDE + '''
def guarded_operands(rng, M, N, K, qb, bb):
    """Random activations (M, K) with their scales per qb and int16 sums of 16, and N rows of
    random blocks of bb bytes per qb values, each ending at a guard page."""
    nb = K // qb
    x = guarded((M, K), np.int8); x[:] = rng.integers(-127, 128, (M, K))
    xd = guarded((M, nb), np.float32); xd[:] = rng.uniform(0, 1, (M, nb))
    xs = guarded((M, K // 16), np.int16)
    xs[:] = x.reshape(M, -1, 16).astype(np.int16).sum(axis=2)
    w = guarded((N, nb * bb), np.uint8); w[:] = rng.integers(0, 256, (N, nb * bb))
    return x, xd, xs, w
def scalar_out(typ, x, xd, xs, w, M, N, K):
    ref = np.empty((M, N), np.float32)
    _bench.kq_gemm(typ, x, xd, xs, M, w, N, K, ref, "scalar")
    return ref
def check_tier(typ, x, xd, xs, w, M, N, K, ref, tier):
    for gemm in (False, True):
        out = guarded((M, N), np.float32)
        _bench.kq_gemm(typ, x, xd, xs, M, w, N, K, out, tier, gemm)
        assert np.array_equal(out.view(np.uint32), ref.view(np.uint32)), (tier, M, N, K)
'''


def assert_guard_script_passes(script: str, tiers) -> None:
    """Run a guard-page script over scalar and tiers (a read past an operand's end faults the
    subprocess); it must print ok."""
    r = subprocess.run([sys.executable, "-c", script, ",".join(["scalar", *tiers])],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def assert_bench_case_gates(case, op, tiers) -> None:
    """The bench case passes its bit-for-bit gate and times on scalar and every tier."""
    for tier in ["scalar", *tiers]:
        assert case.check(tier) is None, (op, tier)
        assert case.time(tier, 1) > 0


def manifest_and_header(tmp: Path):
    """csrc/manifest.py's manifest, its kernel declarations written to tmp/if_kernel_decls.h
    (the header each kernel includes)."""
    sys.path.insert(0, str(REPO / "csrc"))
    import manifest

    m = manifest.read()
    (tmp / "if_kernel_decls.h").write_text(manifest.header(m))
    return m


CC = os.environ.get("CC", "cc")
needs_cc_and_objdump = pytest.mark.skipif(not (shutil.which("objdump") and shutil.which(CC)),
                                          reason="needs a C compiler and objdump")
x86_only = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                              reason="x86-64 only")


def kernel_file(m, stem: str) -> tuple[str, str]:
    """(manifest group, source path) of the kernel file named `stem`."""
    return next((g, p) for g, p, _ in m.kernels if Path(p).stem == stem)


def x86_object_asm(m, stem: str, tmp: Path) -> list[str]:
    """The lower-case disassembly lines of kernel file `stem` compiled with only its manifest
    group's flags (m from manifest_and_header(tmp))."""
    group, src = kernel_file(m, stem)
    obj = tmp / f"{stem}.o"
    subprocess.run([CC, "-std=c11", "-O3", "-ffp-contract=off", "-DIF_X86_TIERS=1",
                    *m.groups[group].flags, f"-I{REPO / 'csrc/include'}", f"-I{tmp}", "-c",
                    str(REPO / src), "-o", str(obj)], check=True)
    return subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True,
                          check=True).stdout.lower().splitlines()


def arm_cc(toolchain, tmp: Path) -> list[str]:
    """Zig's clang for static aarch64 musl with the kernels' C standard, float contract,
    define and include folders (tmp: the one holding if_kernel_decls.h)."""
    return [*shlex.split(toolchain["ISAFORGE_ZIG_CC"]), "-std=c11", "-O3", "-ffp-contract=off",
            "-DIF_ARM_TIERS=1", "-target", "aarch64-linux-musl", f"-I{REPO / 'csrc/include'}",
            f"-I{tmp}", f"-I{REPO / 'csrc/kernels'}"]


def arm_flags(m, group: str) -> list[str]:
    """A manifest group's flags for Zig's clang (its own where they differ from gcc's)."""
    return m.groups[group].zigflags or m.groups[group].flags


def arm_compile(cc: list[str], flags: list[str], m, stem: str, tmp: Path,
                asm: bool = False) -> str:
    """Kernel file `stem` compiled by cc with flags to tmp/<stem>.o (and, when asm, its
    assembly to tmp/<stem>.s); the object's path."""
    src = REPO / kernel_file(m, stem)[1]
    obj = tmp / f"{stem}.o"
    subprocess.run([*cc, *flags, "-c", str(src), "-o", str(obj)], check=True)
    if asm:
        subprocess.run([*cc, *flags, "-S", str(src), "-o", str(tmp / f"{stem}.s")], check=True)
    return str(obj)


def assert_driver_clean(r: subprocess.CompletedProcess, runs: int) -> None:
    """A tests/native driver's run under qemu exited 0 and printed `runs <runs> bad 0` last."""
    assert r.returncode == 0 and r.stdout.strip().endswith("bad 0"), r.stdout[-2000:]
    assert int(r.stdout.split()[-3]) == runs, r.stdout


# ---- whole models ----

SUPPORTED = [t["name"] for t in _native.info()["tiers"] if t["supported"]]
# rows of whole 256-value blocks, so every block type fits every matrix
C = Config(dim=256, hidden_dim=512, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=40,
           seq_len=64, shared_classifier=True, rope_theta=5000.0,
           norm_eps=float(np.float32(1e-5)))
KV = {"llama.embedding_length": C.dim, "llama.feed_forward_length": C.hidden_dim,
      "llama.context_length": C.seq_len, "llama.rope.dimension_count": C.head_size}
TOKS = [3, 17, 5, 38, 0, 22, 9, 9, 31, 2, 14]
ROW_IDS = [0, 39, 5, 5, 17]  # token table rows read back: the last, and one twice
# Weights' matrix fields and their GGUF tensor names
NAMES = {"wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output", "w1": "ffn_gate",
         "w2": "ffn_down", "w3": "ffn_up"}


@pytest.fixture(autouse=True)
def restore_dispatch():
    """Automatic kernel choice again after each test that selects a tier."""
    yield
    select_kernel(None)


def layer_shapes(c: Config) -> dict[str, tuple[int, int]]:
    """Each layer matrix's GGUF name and (rows, columns) under c."""
    return {"attn_q": (c.dim, c.dim), "attn_k": (c.kv_dim, c.dim), "attn_v": (c.kv_dim, c.dim),
            "attn_output": (c.dim, c.dim), "ffn_gate": (c.hidden_dim, c.dim),
            "ffn_down": (c.dim, c.hidden_dim), "ffn_up": (c.hidden_dim, c.dim)}


def kq_blocks(rng, typ: str, rows: int, cols: int) -> np.ndarray:
    """Random (rows, cols / 256 blocks) of `typ` (every byte pattern is a valid block) with
    f16 scales that give weights of about 1 / sqrt(cols)."""
    nb = rows * cols // 256
    if typ in ("Q4_K", "Q5_K"):  # Q5_K: values up to 31, so half Q4_K's d
        b = rng.integers(0, 256, (nb, 144 if typ == "Q4_K" else 176), dtype=np.uint8)
        lo, hi = (0.5e-4, 2e-4) if typ == "Q4_K" else (0.25e-4, 1e-4)
        b[:, 0:2] = rng.uniform(lo, hi, (nb, 1)).astype("<f2").view(np.uint8)
        b[:, 2:4] = rng.uniform(0, 2e-4, (nb, 1)).astype("<f2").view(np.uint8)
    else:
        b = rng.integers(0, 256, (nb, 210), dtype=np.uint8)
        b[:, 208:210] = rng.uniform(1e-5, 5e-5, (nb, 1)).astype("<f2").view(np.uint8)
    return b.reshape(rows, -1)  # the writer reads the shape from the bytes per row


def llama_cpp_quantized(d: Path, ftype: str) -> Path:
    """The float model of test_gguf's kind at C's shapes quantized by llama.cpp
    (llama-cpp-python of the system python3) to LLAMA_FTYPE_MOSTLY_<ftype>."""
    src = write_gguf(d / "f32.gguf", float_tensors(C), kv=KV)
    out = d / f"{ftype.lower()}.gguf"
    code = ("import ctypes, sys, llama_cpp as l; p = l.llama_model_quantize_default_params(); "
            f"p.ftype = l.LLAMA_FTYPE_MOSTLY_{ftype}; "
            "sys.exit(l.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), "
            "ctypes.byref(p)))")
    try:
        r = subprocess.run(["python3", "-c", code, str(src), str(out)], capture_output=True,
                           timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"llama-cpp-python's quantizer not runnable: {e}")
    if r.returncode != 0 or not out.is_file():
        pytest.skip(f"llama-cpp-python's quantizer unavailable: {r.stderr[-300:]!r}")
    return out


def in_place(w: Weights) -> set[str]:
    """The GGML types of the matrices (the classifier too) held as the file's blocks."""
    return {t.type_name for f in NAMES for t in getattr(w, f) if isinstance(t, KQTensor)} | (
        {w.wcls.type_name} if isinstance(w.wcls, KQTensor) else set())


def greedy(eng: Engine, prompt: list[int], n: int) -> tuple[list[int], np.ndarray]:
    """n T = 0 tokens after prompt, and the prompt's logits at every position."""
    logits = eng.prefill(prompt, 0, all_logits=True).copy()
    last, toks = logits[-1].copy(), []
    for i in range(n):
        toks.append(int(np.argmax(last)))
        last = eng.forward(toks[-1], len(prompt) + i).copy()
    return toks, logits


def assert_identical_across_tiers(m) -> None:
    """T = 0 tokens and every position's logits of TOKS, bit for bit: every supported tier, 1
    and 2 threads, prefill in one chunk, in chunks of 3, and token by token."""
    base = None
    for tier in SUPPORTED:
        select_kernel(tier)
        for threads in (1, 2):
            eng = Engine(m, threads=threads)
            assert eng.kernels["prefill"]["tier"] == tier
            toks, logits = greedy(eng, TOKS, 8)
            chunked = Engine(m, threads=threads, ubatch=3).prefill(TOKS, all_logits=True)
            single = Engine(m, threads=threads)
            steps = np.stack([single.forward(t, i).copy() for i, t in enumerate(TOKS)])
            assert np.array_equal(chunked, logits), (tier, threads)
            assert np.array_equal(steps, logits), (tier, threads)
            if base is None:
                base = (toks, logits)
            assert toks == base[0], (tier, threads)
            assert np.array_equal(logits, base[1]), (tier, threads)
    assert np.isfinite(base[1]).all() and np.abs(base[1]).max() > 0


def all_logits(path: Path, quant: str):
    """The file loaded under quant with a context of len(TOKS), and its logits at every
    position of TOKS (2 threads)."""
    m = with_context(read_gguf(path, quant=quant), len(TOKS))
    return m, Engine(m, threads=2).prefill(TOKS, all_logits=True)


def dequantized(path: Path, c: Config) -> Weights:
    """The file's weights as gguf.quants.dequantize gives them (float32), laid out for
    Reference."""
    r = gguf.GGUFReader(str(path))
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float32).reshape(
        [int(d) for d in reversed(x.shape)]) for x in r.tensors}
    return weights_from(t, c)


def spec_gap(got: np.ndarray, m) -> np.ndarray:
    """Per position, the largest |got - spec| against the nearer of reference.py's models of
    the same arithmetic run in float32 and in float64."""
    specs = [Reference(m.config, m.weights, dt).logits(TOKS) for dt in (np.float32, np.float64)]
    # each spec sums the norms and attention in its own float order (float32 through numpy's
    # BLAS, whose order differs between CPUs), so an activation within rounding of a
    # quantization boundary can round the other way in one of them and move every later
    # logit of its position; each position must match one of the two
    return np.minimum(*(np.abs(got - s).max(axis=1) for s in specs))


def gguf_token_rows(path: Path, c: Config) -> np.ndarray:
    """Rows ROW_IDS of the file's token table as gguf.quants.dequantize gives them."""
    r = gguf.GGUFReader(str(path))
    t = next(x for x in r.tensors if x.name == "token_embd.weight")
    want = gguf.quants.dequantize(t.data, t.tensor_type).reshape(c.vocab_size, c.dim)
    return want[ROW_IDS].astype(np.float32)


def assert_refused(m, field: str, cases) -> None:
    """Each (matrix, pattern) of cases as layer 0's `field`: the engine refuses the model with
    a ValueError matching pattern; with the file's matrix back it builds."""
    mats = getattr(m.weights, field)
    good = mats[0]
    try:
        for t, pattern in cases:
            mats[0] = t
            with pytest.raises(ValueError, match=pattern):
                Engine(m, threads=1)
    finally:
        mats[0] = good
    Engine(m, threads=1)


def info_matrices(path: Path) -> dict[str, dict]:
    """`isaforge info --quant auto --json`'s matrices of the file, by name."""
    r = cli("info", str(path), "--quant", "auto", "--json")
    assert r.returncode == 0, r.stderr
    return {x["name"]: x for x in json.loads(r.stdout)["model"]["matrices"]}
