"""The legacy-block kernels (q40_*, q41_*, q50_*, q51_*, q80_*) on GGUF's Q4_0 / Q4_1 / Q5_0 /
Q5_1 / Q8_0 blocks of 32 as stored, with L8 activations (the Q8 rule per 32 values plus int16
sums of 16):
the scalar kernels against a numpy model of isaforge.h's arithmetic (exact integer sums per
block, then the float step in block order), the integers they multiply against
gguf.quants.dequantize, every other tier against scalar bit for bit on a shape grid with row
tails, extreme values, special f16 scales and guard pages, and the bench cases."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from blocks_helper import (
    KQ_GUARDED_PRELUDE,
    SIMD_TIERS,
    SPECIAL_F16,
    activations,
    assert_bench_case_gates,
    assert_bits_equal,
    assert_guard_script_passes,
    assert_special_scales_equal_scalar,
    block_scales,
    f16_bits,
    l8_rows,
    manifest_and_header,
    needs_cc_and_objdump,
    one_hot,
    run,
    tier_failures,
    x86_object_asm,
    x86_only,
)
from isaforge import _bench
from isaforge.quant.ggml import KQTensor, _legacy_integers
from isaforge.reference import kq_matmul

# type -> (GGML id, block bytes, offset of the minimum (None: a zero point instead))
TYPES = {"q4_0": (2, 18, None), "q4_1": (3, 20, 2), "q5_0": (6, 22, None), "q5_1": (7, 24, 2),
         "q8_0": (8, 34, None)}
ZERO = {"q4_0": 8, "q5_0": 16, "q8_0": 0}  # Q8_0's values are signed: no zero point
M_SET = [1, 2, 3, 17]
N_SET = [1, 3, 7, 8, 9, 15, 16, 17, 33]
K_SET = [32, 96, 640, 2048]
TIERS = SIMD_TIERS


def make_blocks(rng, typ, n_blocks, pow2=False, extreme=False) -> np.ndarray:
    """Random blocks (every byte pattern is valid) with finite f16 d (and m): powers of two
    when pow2 (every product order exact), every value and scale at its extreme when extreme
    (Q8_0: -128, the value VPDPBUSD's + 128 maps to 0 and VPSIGNB's |q| to 128)."""
    _, bb, mo = TYPES[typ]
    b = rng.integers(0, 256, (n_blocks, bb), dtype=np.uint8)
    if extreme:
        b[:] = 0x80 if typ == "q8_0" else 0xFF
    d = block_scales(rng, (n_blocks, 2), pow2, -2)
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


def quantize(x):
    """L8 rows of x (M, K): reference.quantize_k8 at 32 per row."""
    return l8_rows(x, 32)


def make_case(rng, typ, M, N, K, extreme=False):
    """L8 activations, at -127 when extreme, and N rows of blocks."""
    xq, xd, xsum = activations(rng, M, K, 32, quantize, -127 if extreme else None)
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
    xq, xd, xsum = one_hot(K, 32)
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
        assert_bits_equal(want, typ, xq, xd, xsum, blocks, N, ["scalar"], where=(M, N, K))


@pytest.mark.parametrize("typ", TYPES)
def test_extremes_fit_int32(typ):
    """Every value at its largest, activations at -127, scales at 60000: the int32 sums are
    exact (the model's are int64) on every tier."""
    rng = np.random.default_rng(5)
    xq, xd, xsum, blocks = make_case(rng, typ, 2, 17, 2048, extreme=True)
    want = model(typ, xq, xd, xsum, blocks, 17)
    assert_bits_equal(want, typ, xq, xd, xsum, blocks, 17, ["scalar", *TIERS])


@pytest.mark.parametrize("typ", TYPES)
def test_special_block_scales_equal_scalar_bits(typ):
    """f16 d and m that are subnormal, zero, negative, infinite or NaN: every tier's conversion
    gives the scalar kernel's floats (the result bits equal; a NaN's payload may differ)."""
    rng = np.random.default_rng(8)
    N, K = 19, 256
    _, bb, mo = TYPES[typ]
    blocks = make_blocks(rng, typ, N * K // 32)
    pick = SPECIAL_F16[rng.integers(0, len(SPECIAL_F16), (blocks.shape[0], 2))]
    some = rng.random(blocks.shape[0]) < 0.12  # a few blocks per row: some rows stay finite
    blocks[some, 0:2] = pick[some, :1].copy().view(np.uint8)
    if mo is not None:
        blocks[some, mo:mo + 2] = pick[some, 1:].copy().view(np.uint8)
    blocks = blocks.reshape(N, -1)
    xq, xd, xsum = quantize(rng.normal(size=(2, K)).astype(np.float32))
    assert_special_scales_equal_scalar(typ, xq, xd, xsum, blocks, N, TIERS)


@pytest.mark.parametrize("typ", TYPES)
def test_tiers_equal_scalar_bits(typ):
    rng = np.random.default_rng(6 + TYPES[typ][0])
    failures = tier_failures(make_case, rng, typ, K_SET, N_SET, M_SET, TIERS)
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
    assert_bits_equal(want, "q4_0", xq, xd, xsum, blocks, N, ["scalar", *TIERS], (False,),
                      where=(t.name,))


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


GUARD_SCRIPT = KQ_GUARDED_PRELUDE + '''
rng = np.random.default_rng(0)
for typ, bb in (("q4_0", 18), ("q4_1", 20), ("q5_0", 22), ("q5_1", 24), ("q8_0", 34)):
    for (M, N, K) in [(1, 17, 32), (3, 15, 96), (17, 1, 640), (1, 33, 2048), (2, 8, 32)]:
        x, xd, xs, w = guarded_operands(rng, M, N, K, 32, bb)
        blk = w.reshape(-1, bb)
        blk[:, 0:4] = np.frombuffer(np.float16([0.01, -0.02]).tobytes(), np.uint8)
        ref = scalar_out(typ, x, xd, xs, w, M, N, K)
        for tier in sys.argv[1].split(","):
            check_tier(typ, x, xd, xs, w, M, N, K, ref, tier)
print("ok")
'''


def test_no_out_of_bounds_reads_at_guard_pages():
    assert_guard_script_passes(GUARD_SCRIPT, TIERS)


def test_bench_cases_gate_and_count_the_file_bytes():
    """isaforge bench kernels' q40_gemv .. q51_gemv, q40_gemm .. q51_gemm, q80_gemv and q80_gemm
    cases: weight bytes are the blocks, every tier passes the bit-for-bit gate, a group size
    other than 32 is refused, and the model shapes take every matrix whose rows are whole blocks
    of 32."""
    for op, bb in (("q40_gemv", 18), ("q41_gemv", 20), ("q50_gemv", 22), ("q51_gemv", 24),
                   ("q80_gemv", 34)):
        case = _bench.Case(op, 1, 40, 640, 32, 2)
        assert case.weight_bytes == 40 * 20 * bb
        assert_bench_case_gates(case, op, TIERS)
        with pytest.raises(ValueError, match="gs = 32"):
            _bench.Case(op, 1, 40, 512, 256, 1)
    for op, bb in (("q40_gemm", 18), ("q41_gemm", 20), ("q50_gemm", 22), ("q51_gemm", 24),
                   ("q80_gemm", 34)):
        case = _bench.Case(op, 19, 40, 640, 32, 2)
        assert case.weight_bytes == 40 * 20 * bb
        assert_bench_case_gates(case, op, TIERS)
    from isaforge.bench.kernels import Shape, kquant_shapes

    ops = {s.op for s in kquant_shapes("smollm2-135m", [64])}
    assert {"q40_gemv", "q41_gemv", "q50_gemv", "q51_gemv", "q40_gemm", "q51_gemm",
            "q80_gemv", "q80_gemm"} <= ops
    assert Shape("q40_gemv", "w", 1, 40, 640).bytes(32) == 40 * 20 * 18 + 640 + 80 + 80 + 160


@needs_cc_and_objdump
@x86_only
@pytest.mark.parametrize("isa, tile, ins, reg", [("avx2", "1x8", "vpmaddubsw", "%ymm"),
                                                 ("avx_vnni", "1x8", "vpdpbusd", "%ymm"),
                                                 ("avx512_vnni", "1x4", "vpdpbusd", "%zmm")])
def test_simd_objects_use_the_designed_instructions(isa, tile, ins, reg, tmp_path):
    """Each x86 legacy GEMV, compiled with only its manifest group's flags, forms its products
    by its ISA's instruction on its vector width (512-bit under AVX512-VNNI, Q8_0's 4-row body
    too; Q8_0's 8-row body 256-bit on avx2 and avx_vnni), prefetches the tiles ahead, and the
    AVX2 body holds no VNNI instruction (Q8_0's applies q's sign to x by VPSIGNB: no
    saturation)."""
    m = manifest_and_header(tmp_path)
    for typ in ("q40", "q41", "q50", "q51", "q80"):
        t, r = ("1x8", "%ymm") if typ == "q80" and isa != "avx512_vnni" else (tile, reg)
        stem = f"{typ}_gemv_{t}_{isa}"
        asm = x86_object_asm(m, stem, tmp_path)
        assert any(ins in x and r in x for x in asm), stem
        assert any("prefetcht1" in x for x in asm), stem
        if isa == "avx2":
            assert not any("vpdp" in x for x in asm), stem
        if isa == "avx2" and typ == "q80":
            assert any("vpsignb" in x for x in asm), stem


@needs_cc_and_objdump
@x86_only
@pytest.mark.parametrize("stem, ins, reg", [("gemm_4x8_avx2", "vpmaddubsw", "%ymm"),
                                            ("gemm_4x8_avx_vnni", "vpdpbusd", "%ymm"),
                                            ("gemm_6x32_avx512_vnni", "vpdpbusd", "%zmm")])
def test_gemm_objects_use_the_outer_product_instructions(stem, ins, reg, tmp_path):
    """Each x86 legacy GEMM, compiled with only its manifest group's flags, forms its products
    by its ISA's instruction on the tile's full-width registers (16 rows per zmm on AVX-512),
    the AVX2 body holds no VNNI instruction, and AVX2's Q8_0 GEMM applies the signs by
    VPSIGNB."""
    m = manifest_and_header(tmp_path)
    for typ in ("q40", "q41", "q50", "q51", "q80"):
        name = f"{typ}_{stem}"
        asm = x86_object_asm(m, name, tmp_path)
        assert any(ins in x and reg in x for x in asm), name
        if stem.endswith("avx2"):
            assert not any("vpdp" in x for x in asm), name
        if stem.endswith("avx2") and typ == "q80":  # signed values: |q| times x with q's sign
            assert any("vpsignb" in x for x in asm), name
