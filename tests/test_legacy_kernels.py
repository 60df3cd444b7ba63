"""The legacy-block kernels (q40_*, q41_*, q50_*, q51_*, q80_*) on GGUF's Q4_0 / Q4_1 / Q5_0 /
Q5_1 / Q8_0 blocks of 32 as stored, with L8 activations (the Q8 rule per 32 values plus int16
sums of 16):
the scalar kernels against a numpy model of isaforge.h's arithmetic (exact integer sums per
block, then the float step in block order), the integers they multiply against
gguf.quants.dequantize, every other tier against scalar bit for bit on a shape grid with row
tails, extreme values, special f16 scales and guard pages, and the bench cases."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import GUARDED_PRELUDE
from isaforge import _bench, _native
from isaforge.quant.ggml import KQTensor, _legacy_integers
from isaforge.reference import kq_matmul, quantize_k8

# type -> (GGML id, block bytes, offset of the minimum (None: a zero point instead))
TYPES = {"q4_0": (2, 18, None), "q4_1": (3, 20, 2), "q5_0": (6, 22, None), "q5_1": (7, 24, 2),
         "q8_0": (8, 34, None)}
ZERO = {"q4_0": 8, "q5_0": 16, "q8_0": 0}  # Q8_0's values are signed: no zero point
M_SET = [1, 2, 3, 17]
N_SET = [1, 3, 7, 8, 9, 15, 16, 17, 33]
K_SET = [32, 96, 640, 2048]
TIERS = [t["name"] for t in _native.info()["tiers"] if t["supported"] and t["name"] != "scalar"]


def f16_bits(v) -> np.ndarray:
    return np.asarray(v, np.float16).view(np.uint8).reshape(-1, 2)


def make_blocks(rng, typ, n_blocks, pow2=False, extreme=False) -> np.ndarray:
    """Random blocks (every byte pattern is valid) with finite f16 d (and m): powers of two
    when pow2 (every product order exact), every value and scale at its extreme when extreme
    (Q8_0: -128, the value VPDPBUSD's + 128 maps to 0 and VPSIGNB's |q| to 128)."""
    _, bb, mo = TYPES[typ]
    b = rng.integers(0, 256, (n_blocks, bb), dtype=np.uint8)
    if extreme:
        b[:] = 0x80 if typ == "q8_0" else 0xFF
    if pow2:
        d = 2.0 ** rng.integers(-20, -2, (n_blocks, 2))
    else:
        d = rng.uniform(-1, 1, (n_blocks, 2)) * 10.0 ** rng.integers(-6, 1, (n_blocks, 2))
    if extreme:
        d[:] = 60000.0
    b[:, 0:2] = f16_bits(d[:, 0])
    if mo is not None:
        b[:, mo:mo + 2] = f16_bits(d[:, 1])
    return b


def model(typ, xq, xd, xsum, blocks, N):
    """isaforge.h's legacy arithmetic in numpy: int64 dots and block sums, then float32 steps in
    block order."""
    M, K = xq.shape
    nb = K // 32
    d, m, u = _legacy_integers(blocks.reshape(-1, TYPES[typ][1]), typ.upper())
    u, d = u.reshape(N, nb, 32), d.reshape(N, nb)
    dots = np.einsum("mbj,nbj->mnb", xq.astype(np.int64).reshape(M, nb, 32), u)
    xs = xsum.astype(np.int64).reshape(M, nb, 2).sum(axis=2)
    acc = np.zeros((M, N), np.float32)
    for b in range(nb):
        t1 = d[None, :, b] * xd[:, None, b]
        if m is None:
            acc = acc + t1 * (dots[:, :, b] - ZERO[typ] * xs[:, None, b]).astype(np.float32)
        else:
            t2 = m.reshape(N, nb)[None, :, b] * xd[:, None, b]
            acc = (acc + t1 * dots[:, :, b].astype(np.float32)) + t2 * xs[:, None, b].astype(
                np.float32)
    return acc


def run(typ, xq, xd, xsum, blocks, N, tier, gemm=False):
    M, K = xq.shape
    out = np.full((M, N), np.nan, np.float32)
    _bench.kq_gemm(typ, xq, xd, xsum, M, blocks, N, K, out, tier, gemm)
    return out


def quantize(x):
    """L8 rows of x (M, K): reference.quantize_k8 at 32 per row."""
    parts = [quantize_k8(r, 32) for r in x]
    return tuple(np.stack([p[i] for p in parts]) for i in range(3))


def make_case(rng, typ, M, N, K, extreme=False):
    x = (rng.normal(size=(M, K)) * 10.0 ** rng.integers(-3, 3, (M, 1))).astype(np.float32)
    x[0, :32] = 0.0  # a zero block: scale 0, q 0
    if K >= 64:
        x[0, 32:64] = np.where(np.arange(32) % 2, 1.0, -1.0)  # all +-127
    xq, xd, xsum = quantize(x)
    if extreme:
        xq[:] = -127
        xsum = xq.reshape(M, -1, 16).astype(np.int16).sum(axis=2).astype(np.int16)
    return xq, xd, xsum, make_blocks(rng, typ, N * K // 32, extreme=extreme).reshape(N, -1)


def test_some_tier_besides_scalar_is_tested():
    assert TIERS, "no SIMD tier available on this machine"


@pytest.mark.parametrize("typ", TYPES)
def test_integers_rebuild_gguf_dequantize(typ):
    """The integers the kernels multiply give gguf.quants.dequantize's values exactly (d (u -
    z), or d u + m), and KQTensor.dequantize is gguf's."""
    rng = np.random.default_rng(1)
    tid, bb, _ = TYPES[typ]
    blocks = make_blocks(rng, typ, 64)
    want = gguf.quants.dequantize(blocks.reshape(-1), gguf.GGMLQuantizationType(tid))
    want = want.reshape(64, 32)
    d, m, u = _legacy_integers(blocks, typ.upper())
    if typ == "q8_0":
        assert u.min() >= -128 and u.max() <= 127 and (u < 0).any()
    if m is None:
        got = d[:, None] * (u - ZERO[typ]).astype(np.float32)
    else:
        got = d[:, None] * u.astype(np.float32) + m[:, None]
    assert np.array_equal(got, want)
    w = KQTensor(blocks.reshape(-1), tid, 4, 512)
    assert np.array_equal(w.dequantize(), want.reshape(4, 512))
    assert np.array_equal(w.rows([3, 0]), want.reshape(4, 512)[[3, 0]])


@pytest.mark.parametrize("typ", TYPES)
def test_kernel_weights_equal_gguf_dequantize(typ):
    """One-hot activations (xd = 1) read the kernel's weights back: with power-of-two scales
    the scalar kernel's out[i, n] is gguf's value i of row n, bit for bit (the zero point or
    the minimum through the block's activation sum)."""
    rng = np.random.default_rng(2)
    N, K = 5, 128
    tid = TYPES[typ][0]
    blocks = make_blocks(rng, typ, N * K // 32, pow2=True).reshape(N, -1)
    want = gguf.quants.dequantize(blocks.reshape(-1), gguf.GGMLQuantizationType(tid))
    xq = np.eye(K, dtype=np.int8)
    xd = np.ones((K, K // 32), np.float32)
    xsum = xq.reshape(K, -1, 16).astype(np.int16).sum(axis=2).astype(np.int16)
    for tier in ["scalar", *TIERS]:
        got = run(typ, xq, xd, xsum, blocks, N, tier, gemm=True)
        assert np.array_equal(got.T, want.reshape(N, K)), tier


@pytest.mark.parametrize("typ", TYPES)
def test_scalar_equals_model_and_reference(typ):
    rng = np.random.default_rng(4)
    for M, N, K in [(1, 5, 32), (3, 17, 640), (2, 9, 2048)]:
        xq, xd, xsum, blocks = make_case(rng, typ, M, N, K)
        want = model(typ, xq, xd, xsum, blocks, N)
        w = KQTensor(blocks.reshape(-1), TYPES[typ][0], N, K)
        ref = np.stack([kq_matmul(xq[m], xd[m], xsum[m], w) for m in range(M)])
        assert np.array_equal(ref.view(np.uint32), want.view(np.uint32)), (M, N, K)
        for gemm in (False, True):
            got = run(typ, xq, xd, xsum, blocks, N, "scalar", gemm)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (M, N, K, gemm)


@pytest.mark.parametrize("typ", TYPES)
def test_extremes_fit_int32(typ):
    """Every value at its largest, activations at -127, scales at 60000: the int32 sums are
    exact (the model's are int64) on every tier."""
    rng = np.random.default_rng(5)
    xq, xd, xsum, blocks = make_case(rng, typ, 2, 17, 2048, extreme=True)
    want = model(typ, xq, xd, xsum, blocks, 17)
    for tier in ["scalar", *TIERS]:
        for gemm in (False, True):
            got = run(typ, xq, xd, xsum, blocks, 17, tier, gemm)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (tier, gemm)


@pytest.mark.parametrize("typ", TYPES)
def test_special_block_scales_equal_scalar_bits(typ):
    """f16 d and m that are subnormal, zero, negative, infinite or NaN: every tier's conversion
    gives the scalar kernel's floats (the result bits equal; a NaN's payload may differ)."""
    rng = np.random.default_rng(8)
    N, K = 19, 256
    specials = np.array([0x0001, 0x03FF, 0x0200, 0x8001, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00,
                         0x7C01, 0x0400, 0x7BFF, 0xBC00], np.uint16)
    _, bb, mo = TYPES[typ]
    blocks = make_blocks(rng, typ, N * K // 32)
    pick = specials[rng.integers(0, len(specials), (blocks.shape[0], 2))]
    some = rng.random(blocks.shape[0]) < 0.12  # a few blocks per row: some rows stay finite
    blocks[some, 0:2] = pick[some, :1].copy().view(np.uint8)
    if mo is not None:
        blocks[some, mo:mo + 2] = pick[some, 1:].copy().view(np.uint8)
    blocks = blocks.reshape(N, -1)
    xq, xd, xsum = quantize(rng.normal(size=(2, K)).astype(np.float32))
    want = run(typ, xq, xd, xsum, blocks, N, "scalar")
    nan = np.isnan(want)
    assert nan.any() and np.isinf(want).any() and np.isfinite(want).any()
    for tier in TIERS:
        for gemm in (False, True):
            got = run(typ, xq, xd, xsum, blocks, N, tier, gemm)
            assert np.array_equal(np.isnan(got), nan), tier
            assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), tier


@pytest.mark.parametrize("typ", TYPES)
def test_tiers_equal_scalar_bits(typ):
    rng = np.random.default_rng(6 + TYPES[typ][0])
    failures = []
    for K in K_SET:
        for N in N_SET:
            for M in M_SET:
                xq, xd, xsum, blocks = make_case(rng, typ, M, N, K)
                want = run(typ, xq, xd, xsum, blocks, N, "scalar").view(np.uint32)
                for tier in TIERS:
                    for gemm in (False, True):
                        got = run(typ, xq, xd, xsum, blocks, N, tier, gemm).view(np.uint32)
                        if not np.array_equal(got, want):
                            failures.append((tier, gemm, M, N, K))
    assert not failures, failures[:10]


def test_real_q4_0_file_blocks():
    """Blocks llama.cpp's quantizer wrote (the 1B Q4_0 measurement file, when present): every
    tier = the numpy model, bit for bit, on a layer matrix's first 40 rows."""
    path = Path.home() / ".cache/isaforge/scale/llama-3.2-1b-random-q4_0.gguf"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    r = gguf.GGUFReader(str(path))
    t = next(t for t in r.tensors if t.tensor_type == gguf.GGMLQuantizationType.Q4_0
             and "blk.0." in t.name)
    K, N = int(t.shape[0]), 40
    blocks = np.ascontiguousarray(np.asarray(t.data).reshape(-1)[: N * K // 32 * 18])
    blocks = blocks.view(np.uint8).reshape(N, -1)
    xq, xd, xsum = quantize(np.random.default_rng(7).normal(size=(2, K)).astype(np.float32))
    want = model("q4_0", xq, xd, xsum, blocks, N)
    for tier in ["scalar", *TIERS]:
        got = run("q4_0", xq, xd, xsum, blocks, N, tier)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (tier, t.name)


def test_bad_shapes_refused():
    z = np.zeros(32, np.int8)
    with pytest.raises(ValueError, match="bad shape"):
        _bench.kq_gemm("q4_0", z, np.ones(1, np.float32), np.zeros(2, np.int16), 1,
                       np.zeros(18, np.uint8), 1, 48, np.zeros(1, np.float32), "scalar")
    with pytest.raises(ValueError, match="too small"):
        _bench.kq_gemm("q5_1", z, np.ones(1, np.float32), np.zeros(2, np.int16), 1,
                       np.zeros(23, np.uint8), 1, 32, np.zeros(1, np.float32), "scalar")
    with pytest.raises(ValueError, match="too small"):
        _bench.kq_gemm("q8_0", z, np.ones(1, np.float32), np.zeros(2, np.int16), 1,
                       np.zeros(33, np.uint8), 1, 32, np.zeros(1, np.float32), "scalar")
    with pytest.raises(ValueError, match="unknown K-quant type"):
        _bench.kq_gemm("q8_1", z, np.ones(1, np.float32), np.zeros(2, np.int16), 1,
                       np.zeros(34, np.uint8), 1, 32, np.zeros(1, np.float32), "scalar")


GUARD_SCRIPT = GUARDED_PRELUDE + '''
rng = np.random.default_rng(0)
for typ, bb in (("q4_0", 18), ("q4_1", 20), ("q5_0", 22), ("q5_1", 24), ("q8_0", 34)):
    for (M, N, K) in [(1, 17, 32), (3, 15, 96), (17, 1, 640), (1, 33, 2048), (2, 8, 32)]:
        nb = K // 32
        x = guarded((M, K), np.int8); x[:] = rng.integers(-127, 128, (M, K))
        xd = guarded((M, nb), np.float32); xd[:] = rng.uniform(0, 1, (M, nb))
        xs = guarded((M, K // 16), np.int16)
        xs[:] = x.reshape(M, -1, 16).astype(np.int16).sum(axis=2)
        w = guarded((N, nb * bb), np.uint8); w[:] = rng.integers(0, 256, (N, nb * bb))
        blk = w.reshape(-1, bb)
        blk[:, 0:4] = np.frombuffer(np.float16([0.01, -0.02]).tobytes(), np.uint8)
        ref = np.empty((M, N), np.float32)
        _bench.kq_gemm(typ, x, xd, xs, M, w, N, K, ref, "scalar")
        for tier in sys.argv[1].split(","):
            for gemm in (False, True):
                out = guarded((M, N), np.float32)
                _bench.kq_gemm(typ, x, xd, xs, M, w, N, K, out, tier, gemm)
                assert np.array_equal(out.view(np.uint32), ref.view(np.uint32)), (tier, M, N, K)
print("ok")
'''


def test_no_out_of_bounds_reads_at_guard_pages():
    r = subprocess.run([sys.executable, "-c", GUARD_SCRIPT, ",".join(["scalar", *TIERS])],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def test_bench_cases_gate_and_count_the_file_bytes():
    """isaforge bench kernels' q40_gemv .. q51_gemv, q40_gemm .. q51_gemm, q80_gemv and q80_gemm
    cases: weight bytes are the blocks, every tier passes the bit-for-bit gate, a group size
    other than 32 is refused, and the model shapes take every matrix whose rows are whole blocks
    of 32."""
    for op, bb in (("q40_gemv", 18), ("q41_gemv", 20), ("q50_gemv", 22), ("q51_gemv", 24),
                   ("q80_gemv", 34)):
        case = _bench.Case(op, 1, 40, 640, 32, 2)
        assert case.weight_bytes == 40 * 20 * bb
        for tier in ["scalar", *TIERS]:
            assert case.check(tier) is None, (op, tier)
            assert case.time(tier, 1) > 0
        with pytest.raises(ValueError, match="gs = 32"):
            _bench.Case(op, 1, 40, 512, 256, 1)
    for op, bb in (("q40_gemm", 18), ("q41_gemm", 20), ("q50_gemm", 22), ("q51_gemm", 24),
                   ("q80_gemm", 34)):
        case = _bench.Case(op, 19, 40, 640, 32, 2)
        assert case.weight_bytes == 40 * 20 * bb
        for tier in ["scalar", *TIERS]:
            assert case.check(tier) is None, (op, tier)
            assert case.time(tier, 1) > 0
    from isaforge.bench.kernels import Shape, kquant_shapes

    ops = {s.op for s in kquant_shapes("smollm2-135m", [64])}
    assert {"q40_gemv", "q41_gemv", "q50_gemv", "q51_gemv", "q40_gemm", "q51_gemm",
            "q80_gemv", "q80_gemm"} <= ops
    assert Shape("q40_gemv", "w", 1, 40, 640).bytes(32) == 40 * 20 * 18 + 640 + 80 + 80 + 160


@pytest.mark.skipif(not (shutil.which("objdump") and shutil.which(os.environ.get("CC", "cc"))),
                    reason="needs a C compiler and objdump")
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")
@pytest.mark.parametrize("isa, tile, ins, reg", [("avx2", "1x8", "vpmaddubsw", "%ymm"),
                                                 ("avx_vnni", "1x8", "vpdpbusd", "%ymm"),
                                                 ("avx512_vnni", "1x16", "vpdpbusd", "%zmm")])
def test_simd_objects_use_the_designed_instructions(isa, tile, ins, reg, tmp_path):
    """Each x86 legacy GEMV, compiled with only its manifest group's flags, forms its products
    by its ISA's instruction on its vector width (512-bit under AVX512-VNNI; Q8_0's 8-row body
    256-bit on every tier), prefetches the tiles ahead, and the AVX2 body holds no VNNI
    instruction (Q8_0's applies q's sign to x by VPSIGNB: no saturation)."""
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo / "csrc"))
    import manifest

    m = manifest.read()
    (tmp_path / "if_kernel_decls.h").write_text(manifest.header(m))
    for typ in ("q40", "q41", "q50", "q51", "q80"):
        t, r = ("1x8", "%ymm") if typ == "q80" else (tile, reg)
        stem = f"{typ}_gemv_{t}_{isa}"
        group, src = next((g, p) for g, p, _ in m.kernels if Path(p).stem == stem)
        obj = tmp_path / f"{stem}.o"
        subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-O3", "-ffp-contract=off",
                        "-DIF_X86_TIERS=1", *m.groups[group].flags,
                        f"-I{repo / 'csrc/include'}", f"-I{tmp_path}", "-c", str(repo / src),
                        "-o", str(obj)], check=True)
        asm = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True,
                             check=True).stdout.lower().splitlines()
        assert any(ins in x and r in x for x in asm), stem
        assert any("prefetcht1" in x for x in asm), stem
        if isa == "avx2":
            assert not any("vpdp" in x for x in asm), stem
        if isa == "avx2" and typ == "q80":
            assert any("vpsignb" in x for x in asm), stem


@pytest.mark.skipif(not (shutil.which("objdump") and shutil.which(os.environ.get("CC", "cc"))),
                    reason="needs a C compiler and objdump")
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 only")
@pytest.mark.parametrize("stem, ins, reg", [("gemm_4x8_avx2", "vpmaddubsw", "%ymm"),
                                            ("gemm_4x8_avx_vnni", "vpdpbusd", "%ymm"),
                                            ("gemm_8x16_avx512_vnni", "vpdpbusd", "%zmm")])
def test_gemm_objects_use_the_outer_product_instructions(stem, ins, reg, tmp_path):
    """Each x86 legacy GEMM, compiled with only its manifest group's flags, forms its products
    by its ISA's instruction on the tile's full-width registers (16 rows per zmm on AVX-512),
    the AVX2 body holds no VNNI instruction, and AVX2's Q8_0 GEMM applies the signs by
    VPSIGNB."""
    repo = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(repo / "csrc"))
    import manifest

    m = manifest.read()
    (tmp_path / "if_kernel_decls.h").write_text(manifest.header(m))
    for typ in ("q40", "q41", "q50", "q51", "q80"):
        name = f"{typ}_{stem}"
        group, src = next((g, p) for g, p, _ in m.kernels if Path(p).stem == name)
        obj = tmp_path / f"{name}.o"
        subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-O3", "-ffp-contract=off",
                        "-DIF_X86_TIERS=1", *m.groups[group].flags,
                        f"-I{repo / 'csrc/include'}", f"-I{tmp_path}", "-c", str(repo / src),
                        "-o", str(obj)], check=True)
        asm = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True,
                             check=True).stdout.lower().splitlines()
        assert any(ins in x and reg in x for x in asm), name
        if stem.endswith("avx2"):
            assert not any("vpdp" in x for x in asm), name
        if stem.endswith("avx2") and typ == "q80":  # signed values: |q| times x with q's sign
            assert any("vpsignb" in x for x in asm), name
