"""The IQ4 kernels (iq4nl_*, iq4xs_*) on GGUF's IQ4_NL blocks of 32 (L8 activations) and IQ4_XS
super-blocks of 256 (K8 activations) as stored: the scalar kernels against a numpy model of
isaforge.h's arithmetic (exact integer sums per block, then the float step in block order),
the levels and scales they multiply against gguf.quants.dequantize, every other tier against
scalar bit for bit on a shape grid with row tails, extreme values, special f16 scales and
guard pages, the bench cases, and the instructions each x86 object is built from."""

from __future__ import annotations

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
from isaforge.quant.ggml import KVALUES_IQ4NL, KQTensor, _iq4_integers
from isaforge.reference import kq_matmul

# type -> (GGML id, block bytes, values per block)
TYPES = {"iq4_nl": (20, 18, 32), "iq4_xs": (23, 136, 256)}
M_SET = [1, 2, 3, 17]
N_SET = [1, 3, 7, 8, 9, 15, 16, 17, 33]
K_SET = {"iq4_nl": [32, 96, 640, 2048], "iq4_xs": [256, 768, 2048]}
TIERS = SIMD_TIERS


def make_blocks(rng, typ, n_blocks, pow2=False, extreme=False) -> np.ndarray:
    """Random blocks (every byte pattern is valid) with finite f16 d: powers of two when pow2
    (every product order exact), levels -127 and scales at their extreme when extreme."""
    _, bb, _ = TYPES[typ]
    b = rng.integers(0, 256, (n_blocks, bb), dtype=np.uint8)
    d = block_scales(rng, n_blocks, pow2, -6)
    if extreme:  # nibble 0 (-127) everywhere; IQ4_XS: every ls 0 (scale -32)
        b[:, 2:] = 0
        d[:] = 60000.0
    b[:, 0:2] = f16_bits(d)
    return b


def model(typ, xq, xd, blocks, N):
    """isaforge.h's IQ4 arithmetic in numpy: int64 dots and scaled sums, then float32 steps in
    block order."""
    M, K = xq.shape
    _, bb, qb = TYPES[typ]
    nb = K // qb
    x = xq.astype(np.int64)
    if typ == "iq4_nl":
        d, level = _iq4_integers(blocks.reshape(-1, bb), "IQ4_NL")
        sumi = np.einsum("mbj,nbj->mnb", x.reshape(M, nb, 32), level.reshape(N, nb, 32))
    else:
        d, s, level = _iq4_integers(blocks.reshape(-1, bb), "IQ4_XS")
        dots = np.einsum("mbsj,nbsj->mnbs", x.reshape(M, nb, 8, 32), level.reshape(N, nb, 8, 32))
        sumi = (dots * s.reshape(N, nb, 8)[None]).sum(axis=3)
    d = d.reshape(N, nb)
    acc = np.zeros((M, N), np.float32)
    for b in range(nb):
        acc = acc + (d[None, :, b] * xd[:, None, b]) * sumi[:, :, b].astype(np.float32)
    return acc


def make_case(rng, typ, M, N, K, extreme=False):
    """L8 (IQ4_NL) or K8 (IQ4_XS) activations, at 127 when extreme, and N rows of blocks."""
    qb = TYPES[typ][2]
    xq, xd, xsum = activations(rng, M, K, qb, lambda x: l8_rows(x, qb), 127 if extreme else None)
    return xq, xd, xsum, make_blocks(rng, typ, N * K // qb, extreme=extreme).reshape(N, -1)


def test_some_tier_besides_scalar_is_tested():
    assert TIERS, "no SIMD tier available on this machine"


@pytest.mark.parametrize("typ", TYPES)
def test_integers_rebuild_gguf_dequantize(typ):
    """The levels and scales the kernels multiply give gguf.quants.dequantize's values exactly
    (d * level, or (d * (ls - 32)) * level), and KQTensor.dequantize / rows are gguf's."""
    rng = np.random.default_rng(1)
    tid, bb, qb = TYPES[typ]
    blocks = make_blocks(rng, typ, 64)
    want = gguf.quants.dequantize(blocks.reshape(-1), gguf.GGMLQuantizationType(tid))
    want = want.reshape(64, qb)
    ints = _iq4_integers(blocks, typ.upper())
    assert set(np.unique(ints[-1])) <= set(KVALUES_IQ4NL.tolist())
    if typ == "iq4_nl":
        d, level = ints
        got = d[:, None] * level.astype(np.float32)
    else:
        d, s, level = ints
        assert s.min() >= -32 and s.max() <= 31
        got = ((d[:, None] * s.astype(np.float32))[:, :, None] * level.astype(np.float32))
        got = got.reshape(64, 256)
    assert np.array_equal(got, want)
    w = KQTensor(blocks.reshape(-1), tid, 4, 16 * qb)
    assert np.array_equal(w.dequantize(), want.reshape(4, -1))
    assert np.array_equal(w.rows([3, 0]), want.reshape(4, -1)[[3, 0]])


@pytest.mark.parametrize("typ", TYPES)
def test_kernel_weights_equal_gguf_dequantize(typ):
    """One-hot activations (xd = 1) read the kernels' weights back: with power-of-two scales
    every tier's out[i, n] is gguf's value i of row n, bit for bit."""
    rng = np.random.default_rng(2)
    tid, _, qb = TYPES[typ]
    N, K = 5, 2 * qb
    blocks = make_blocks(rng, typ, N * K // qb, pow2=True).reshape(N, -1)
    want = gguf.quants.dequantize(blocks.reshape(-1), gguf.GGMLQuantizationType(tid))
    xq, xd, xsum = one_hot(K, qb)
    for tier in ["scalar", *TIERS]:
        got = run(typ, xq, xd, xsum, blocks, N, tier, gemm=True)
        assert np.array_equal(got.T, want.reshape(N, K)), tier


@pytest.mark.parametrize("typ", TYPES)
def test_scalar_equals_model_and_reference(typ):
    rng = np.random.default_rng(4)
    tid, _, qb = TYPES[typ]
    for M, N, K in [(1, 5, qb), (3, 17, 5 * qb), (2, 9, 2048)]:
        xq, xd, xsum, blocks = make_case(rng, typ, M, N, K)
        want = model(typ, xq, xd, blocks, N)
        w = KQTensor(blocks.reshape(-1), tid, N, K)
        ref = np.stack([kq_matmul(xq[m], xd[m], xsum[m], w) for m in range(M)])
        assert np.array_equal(ref.view(np.uint32), want.view(np.uint32)), (M, N, K)
        assert_bits_equal(want, typ, xq, xd, xsum, blocks, N, ["scalar"], where=(M, N, K))


@pytest.mark.parametrize("typ", TYPES)
def test_extremes_fit_int32(typ):
    """Every level at -127 (and every IQ4_XS scale at -32), activations at 127, d at 60000: the
    int32 sums and int16 pairs are exact (the model's are int64) on every tier."""
    rng = np.random.default_rng(5)
    xq, xd, xsum, blocks = make_case(rng, typ, 2, 17, 2048, extreme=True)
    want = model(typ, xq, xd, blocks, 17)
    assert np.isfinite(want).all()
    assert_bits_equal(want, typ, xq, xd, xsum, blocks, 17, ["scalar", *TIERS])


@pytest.mark.parametrize("typ", TYPES)
def test_special_block_scales_equal_scalar_bits(typ):
    """f16 d that are subnormal, zero, negative, infinite or NaN: every tier's conversion gives
    the scalar kernel's floats (the result bits equal; a NaN's payload may differ)."""
    rng = np.random.default_rng(8)
    _, _, qb = TYPES[typ]
    N, K = 19, 2048
    blocks = make_blocks(rng, typ, N * K // qb)
    pick = SPECIAL_F16[rng.integers(0, len(SPECIAL_F16), blocks.shape[0])]
    some = rng.random(blocks.shape[0]) < (0.12 if qb == 32 else 0.2)
    blocks[some, 0:2] = pick[some, None].copy().view(np.uint8)
    blocks = blocks.reshape(N, -1)
    xq, xd, xsum = l8_rows(rng.normal(size=(2, K)).astype(np.float32), qb)
    assert_special_scales_equal_scalar(typ, xq, xd, xsum, blocks, N, TIERS)


@pytest.mark.parametrize("typ", TYPES)
def test_tiers_equal_scalar_bits(typ):
    rng = np.random.default_rng(6 + TYPES[typ][0])
    failures = tier_failures(make_case, rng, typ, K_SET[typ], N_SET, M_SET, TIERS)
    assert not failures, failures[:10]


def test_bad_shapes_refused():
    z = np.zeros(256, np.int8)
    with pytest.raises(ValueError, match="bad shape"):
        _bench.kq_gemm("iq4_xs", z[:32], np.ones(1, np.float32), np.zeros(2, np.int16), 1,
                       np.zeros(136, np.uint8), 1, 32, np.zeros(1, np.float32), "scalar")
    with pytest.raises(ValueError, match="too small"):
        _bench.kq_gemm("iq4_nl", z[:32], np.ones(1, np.float32), np.zeros(2, np.int16), 1,
                       np.zeros(17, np.uint8), 1, 32, np.zeros(1, np.float32), "scalar")
    with pytest.raises(ValueError, match="too small"):
        _bench.kq_gemm("iq4_xs", z, np.ones(1, np.float32), np.zeros(16, np.int16), 1,
                       np.zeros(135, np.uint8), 1, 256, np.zeros(1, np.float32), "scalar")


GUARD_SCRIPT = KQ_GUARDED_PRELUDE + '''
rng = np.random.default_rng(0)
for typ, bb, qb in (("iq4_nl", 18, 32), ("iq4_xs", 136, 256)):
    for (M, N, K) in [(1, 17, qb), (3, 15, 3 * qb), (17, 1, 2048), (1, 33, 2048), (2, 8, qb)]:
        x, xd, xs, w = guarded_operands(rng, M, N, K, qb, bb)
        w.reshape(-1, bb)[:, 0:2] = np.frombuffer(np.float16([0.01]).tobytes(), np.uint8)
        ref = scalar_out(typ, x, xd, xs, w, M, N, K)
        for tier in sys.argv[1].split(","):
            check_tier(typ, x, xd, xs, w, M, N, K, ref, tier)
print("ok")
'''


def test_no_out_of_bounds_reads_at_guard_pages():
    assert_guard_script_passes(GUARD_SCRIPT, TIERS)


def test_bench_cases_gate_and_count_the_file_bytes():
    """isaforge bench kernels' iq4nl_gemv / iq4xs_gemv cases: weight bytes are the blocks,
    every tier passes the bit-for-bit gate, a group size other than the type's is refused, and
    the model shapes take every matrix whose rows are whole blocks."""
    for op, bb, qb in (("iq4nl_gemv", 18, 32), ("iq4xs_gemv", 136, 256)):
        case = _bench.Case(op, 1, 40, 1280, qb, 2)
        assert case.weight_bytes == 40 * (1280 // qb) * bb
        assert_bench_case_gates(case, op, TIERS)
        with pytest.raises(ValueError, match=f"gs = {qb}"):
            _bench.Case(op, 1, 40, 512, 288 - qb, 1)
    from isaforge.bench.kernels import kquant_shapes

    ops = {s.op for s in kquant_shapes("smollm2-135m")}
    assert {"iq4nl_gemv", "iq4xs_gemv"} <= ops


@needs_cc_and_objdump
@x86_only
@pytest.mark.parametrize("isa, nl, xs", [("avx2", "vpmaddubsw", "vpmaddwd"),
                                         ("avx_vnni", "vpdpbusd", "vpmulld"),
                                         ("avx512_vnni", "vpdpbusd", "vpmulld")])
def test_simd_objects_use_the_designed_instructions(isa, nl, xs, tmp_path):
    """Each x86 IQ4 GEMV, compiled with only its manifest group's flags, looks the levels up by
    VPSHUFB and forms its products by its ISA's instruction on 256-bit registers (VPDPBUSD of
    level + 128 under VNNI, IQ4_XS's scales then by VPMULLD; VPMADDUBSW + VPMADDWD on AVX2),
    prefetches the tiles ahead, and the AVX2 body holds no VNNI instruction."""
    m = manifest_and_header(tmp_path)
    for typ, ins in (("iq4nl", nl), ("iq4xs", xs)):
        stem = f"{typ}_gemv_1x8_{isa}"
        asm = x86_object_asm(m, stem, tmp_path)
        assert any(ins in x and "%ymm" in x for x in asm), stem
        if isa != "avx2":
            assert any("vpdpbusd" in x and "%ymm" in x for x in asm), stem
        assert any("vpshufb" in x for x in asm), stem
        assert any("prefetcht1" in x for x in asm), stem
        if isa == "avx2":
            assert not any("vpdp" in x for x in asm), stem
