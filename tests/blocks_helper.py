"""What the tests of the GGML block types (K-quants, legacy blocks of 32, IQ4) share: for their
kernels (tests/test_*_kernels.py) the activations, block scales and runs of _bench.kq_gemm,
the tier-against-scalar loops, the guard-page script's operands and the x86 objects' assembly;
for whole models holding the blocks in place (tests/test_*_model.py) the tiny configuration,
the llama.cpp-quantized files, greedy decoding, the comparison across tiers, threads and
prefill chunks, and the files' own values read back by the gguf package; for the Arm kernels
under qemu (tests/test_*_arm.py) the cross compiler's flags."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import GUARDED_PRELUDE, REPO
from isaforge import _bench, _native
from isaforge.reference import quantize_k8

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


def assert_guard_script_passes(script: str) -> None:
    """Run a guard-page script over scalar and every SIMD tier (a read past an operand's end
    faults the subprocess); it must print ok."""
    r = subprocess.run([sys.executable, "-c", script, ",".join(["scalar", *SIMD_TIERS])],
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


def x86_object_asm(m, stem: str, tmp: Path) -> list[str]:
    """The lower-case disassembly lines of kernel file `stem` compiled with only its manifest
    group's flags (m from manifest_and_header(tmp))."""
    group, src = next((g, p) for g, p, _ in m.kernels if Path(p).stem == stem)
    obj = tmp / f"{stem}.o"
    subprocess.run([CC, "-std=c11", "-O3", "-ffp-contract=off", "-DIF_X86_TIERS=1",
                    *m.groups[group].flags, f"-I{REPO / 'csrc/include'}", f"-I{tmp}", "-c",
                    str(REPO / src), "-o", str(obj)], check=True)
    return subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True,
                          check=True).stdout.lower().splitlines()
