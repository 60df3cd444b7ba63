"""The K-quant kernels (q4k_*, q5k_*, q6k_*) on the file's GGUF Q4_K / Q5_K / Q6_K blocks and the
K8 activation quantizer: the scalar kernels against a numpy model of isaforge.h's arithmetic
(exact integer sums per 256-value block, then the float step in block order), the integers they
multiply against the GGUF dequantizer (gguf.quants.dequantize), and every other tier against the
scalar kernels bit for bit on a shape grid with row tails, extreme values and guard pages."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

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
    manifest_and_header,
    needs_cc_and_objdump,
    one_hot,
    run,
    sums16,
    tier_failures,
    x86_object_asm,
    x86_only,
)
from conftest import REPO
from isaforge import _bench, _native
from isaforge.quant import ggml

BLOCK_BYTES = {"q4_k": 144, "q5_k": 176, "q6_k": 210}
MINS = ("q4_k", "q5_k")  # the types with d, dmin at bytes 0-3 and Q4_K's scales and mins
TYPES = list(BLOCK_BYTES)
M_SET = [1, 2, 3, 17]
N_SET = [1, 3, 15, 16, 17, 33, 64]
K_SET = [256, 512, 2304]


X86_BUILD = "avx2" in [t["name"] for t in _native.info()["tiers"]]
# the features of the emulated AMX K-quant GEMMs' AVX-512 expansion and readout
EMU_FEATURES = {"avx512f", "avx512bw", "avx512vl", "fma", "avx512_vnni"}


def emulated() -> list[str]:
    """"amx_emulated" when its K-quant GEMMs run (the AMX bodies with the tiles emulated in C):
    an x86 build on a CPU with their AVX-512 features."""
    if X86_BUILD and _bench.kq_kernel("q4_k", "amx_emulated", True).endswith("_amx_emulated"):
        return ["amx_emulated"]
    return []


TIERS = SIMD_TIERS + emulated()
AMX_GEMMS = [t for t in ("amx", "amx_emulated") if t in TIERS]


def make_blocks(rng, typ, n_blocks, pow2=False, extreme=False) -> np.ndarray:
    """Random blocks of `typ` (every byte pattern is a valid block) with finite f16 scales:
    powers of two when pow2 (so every product order is exact), every value and scale at its
    largest magnitude when extreme."""
    nb = BLOCK_BYTES[typ]
    b = rng.integers(0, 256, (n_blocks, nb), dtype=np.uint8)
    if extreme:
        b[:] = 0xFF
        if typ == "q6_k":
            b[:, 192:208] = 0x80  # scale -128, values 63 (u - 32 = 31)
    d = block_scales(rng, (n_blocks, 2), pow2, -2)
    if typ in MINS:
        b[:, 0:2], b[:, 2:4] = f16_bits(d[:, 0]), f16_bits(np.abs(d[:, 1]))
    else:
        b[:, 208:210] = f16_bits(d[:, 0])
    return b


def decode(typ, blocks):
    """The integers the kernels multiply, per block: Q4_K (d, dmin, sc (8), m (8), q (8, 32));
    Q5_K likewise with q in 0..31 (bit j of qh[l] is bit 4 of value l of sub-block j); Q6_K (d,
    sc (16), u (16, 16)) with u = q + 32."""
    nb = blocks.shape[0]
    if typ in MINS:
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)[:, 0]
        dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)[:, 0]
        sc, mn = ggml._k4_scales(blocks[:, 4:16])
        qs = blocks[:, 48:176] if typ == "q5_k" else blocks[:, 16:144]
        qs = qs.reshape(nb, 4, 32)
        q = np.stack([qs & 15, qs >> 4], axis=2).reshape(nb, 8, 32)
        if typ == "q5_k":
            bits = (blocks[:, None, 16:48] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1
            q = q | (bits << 4)
        return d, dmin, sc.astype(np.int64), mn.astype(np.int64), q.astype(np.int64)
    ql = blocks[:, 0:128].reshape(nb, 2, 2, 32)
    qh = blocks[:, 128:192].reshape(nb, 2, 1, 32)
    lo = np.concatenate([ql & 15, ql >> 4], axis=2)
    hi = (qh >> np.array([0, 2, 4, 6], np.uint8)[None, None, :, None]) & 3
    u = (lo | (hi << 4)).astype(np.int64).reshape(nb, 16, 16)
    sc = blocks[:, 192:208].copy().view(np.int8).astype(np.int64)
    d = blocks[:, 208:210].copy().view(np.float16).astype(np.float32)[:, 0]
    return d, sc, u


def k8_model(x: np.ndarray):
    """The K8 form of float rows x (M, K) in numpy: the Q8 rule per 256 values, then int16 sums
    of each 16 int8 values."""
    M, K = x.shape
    g = x.reshape(M, -1, 256)
    d = (np.abs(g).max(axis=2) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = g / d[:, :, None]
    # roundf: half away from zero
    q = np.where(d[:, :, None] != 0, np.sign(r) * np.floor(np.abs(r) + 0.5), 0).astype(np.int8)
    q = q.reshape(M, K)
    return q, d, sums16(q)


def model(typ, xq, xd, xsum, blocks, N):
    """isaforge.h's K-quant arithmetic in numpy: exact int64 sums per block, then float32 steps
    in block order."""
    M, K = xq.shape
    nb = K // 256
    blocks = blocks.reshape(-1, BLOCK_BYTES[typ])
    x = xq.astype(np.int64).reshape(M, nb, -1)
    bs = xsum.astype(np.int64).reshape(M, nb, 16)
    acc = np.zeros((M, N), np.float32)
    if typ in MINS:
        d, dmin, sc, mn, q = decode(typ, blocks)
        q, sc, mn = q.reshape(N, nb, 8, 32), sc.reshape(N, nb, 8), mn.reshape(N, nb, 8)
        d, dmin = d.reshape(N, nb), dmin.reshape(N, nb)
        dots = np.einsum("mbjl,nbjl->mnbj", x.reshape(M, nb, 8, 32), q)
        sumi = (dots * sc[None]).sum(axis=3)
        bs32 = bs.reshape(M, nb, 8, 2).sum(axis=3)
        summ = np.einsum("mbj,nbj->mnb", bs32, mn)
        for b in range(nb):
            t1 = d[None, :, b] * xd[:, None, b]
            t2 = dmin[None, :, b] * xd[:, None, b]
            si, sm = sumi[:, :, b].astype(np.float32), summ[:, :, b].astype(np.float32)
            acc = (acc + t1 * si) - t2 * sm
        return acc
    d, sc, u = decode(typ, blocks)
    u, sc, d = u.reshape(N, nb, 16, 16), sc.reshape(N, nb, 16), d.reshape(N, nb)
    dots = np.einsum("mbjl,nbjl->mnbj", x.reshape(M, nb, 16, 16), u) - 32 * bs[:, None]
    sumi = (dots * sc[None]).sum(axis=3)
    for b in range(nb):
        acc = acc + (d[None, :, b] * xd[:, None, b]) * sumi[:, :, b].astype(np.float32)
    return acc


def quantize(x, tier="scalar"):
    M, K = x.shape
    q = np.empty((M, K), np.int8)
    d = np.empty((M, K // 256), np.float32)
    s = np.empty((M, K // 16), np.int16)
    for m in range(M):
        _bench.k8_quantize(np.ascontiguousarray(x[m]), q[m], d[m], s[m], tier)
    return q, d, s


def make_case(rng, typ, M, N, K, extreme=False):
    """K8 activations by the scalar C quantizer, at -127 when extreme, and N rows of blocks."""
    xq, xd, xsum = activations(rng, M, K, 256, quantize, -127 if extreme else None)
    blocks = make_blocks(rng, typ, N * K // 256, extreme=extreme)
    return xq, xd, xsum, blocks.reshape(N, -1)


def gguf_type(gguf, typ):
    return getattr(gguf.GGMLQuantizationType, typ.upper())


def test_some_tier_besides_scalar_is_tested():
    assert TIERS, "no SIMD tier available on this machine"


@pytest.mark.parametrize("typ", TYPES)
def test_dequantized_levels_equal_gguf(typ):
    """The integers the kernels multiply (decode) rebuild gguf.quants.dequantize exactly in its
    own order (Q4_K, Q5_K: (d sc) q - dmin m; Q6_K: (d sc) (u - 32))."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(1)
    blocks = make_blocks(rng, typ, 64)
    gtype = gguf_type(gguf, typ)
    want = gguf.quants.dequantize(blocks.reshape(-1), gtype).reshape(64, 256)
    if typ in MINS:
        d, dmin, sc, mn, q = decode(typ, blocks)
        scale = (d[:, None] * sc.astype(np.float32))[:, :, None]
        off = (dmin[:, None] * mn.astype(np.float32))[:, :, None]
        got = (scale * q.astype(np.float32) - off).reshape(64, 256)
    else:
        d, sc, u = decode(typ, blocks)
        got = ((d[:, None] * sc.astype(np.float32))[:, :, None] * (u - 32).astype(np.float32))
        got = got.reshape(64, 256)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("typ", TYPES)
def test_kernel_weights_equal_gguf_dequantize(typ):
    """One-hot activations read the kernel's weights back: with power-of-two block scales (every
    float order exact) the scalar kernel's out[i, n] is gguf.quants.dequantize's value i of row
    n, bit for bit."""
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(2)
    N, K = 5, 512
    blocks = make_blocks(rng, typ, N * K // 256, pow2=True).reshape(N, -1)
    gtype = gguf_type(gguf, typ)
    want = gguf.quants.dequantize(blocks.reshape(-1), gtype).reshape(N, K)
    xq, xd, xsum = one_hot(K, 256)
    got = run(typ, xq, xd, xsum, blocks, N, "scalar")
    assert np.array_equal(got.T, want)


def test_k8_quantizer_equals_model_and_tiers():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 2304)).astype(np.float32) * np.float32(7.5)
    x[1, :256] = 0.0
    x[2, 300] = 1e30
    want = k8_model(x)
    got = quantize(x)
    for w, g in zip(want, got, strict=True):
        assert np.array_equal(w, g)
    for tier in TIERS:
        for w, g in zip(got, quantize(x, tier), strict=True):
            assert np.array_equal(w.view(np.uint8), g.view(np.uint8)), tier


@pytest.mark.parametrize("typ", TYPES)
def test_scalar_equals_model(typ):
    rng = np.random.default_rng(4)
    for M, N, K in [(1, 5, 256), (3, 17, 768), (2, 9, 2304)]:
        xq, xd, xsum, blocks = make_case(rng, typ, M, N, K)
        want = model(typ, xq, xd, xsum, blocks, N)
        assert_bits_equal(want, typ, xq, xd, xsum, blocks, N, ["scalar"], where=(M, N, K))


@pytest.mark.parametrize("typ", TYPES)
def test_extremes_fit_int32(typ):
    """Every value, scale and activation at its largest magnitude: the int32 sums are exact
    (the model's are int64), and so are the GEMMs' int16 partial sums, through every
    activation-row step of their tiles (M = 13)."""
    rng = np.random.default_rng(5)
    xq, xd, xsum, blocks = make_case(rng, typ, 13, 17, 2304, extreme=True)
    want = model(typ, xq, xd, xsum, blocks, 17)
    assert_bits_equal(want, typ, xq, xd, xsum, blocks, 17, ["scalar", *TIERS])


@pytest.mark.parametrize("typ", TYPES)
def test_special_block_scales_equal_scalar_bits(typ):
    """f16 block scales that are subnormal, zero, negative, infinite or NaN: every tier's
    conversion gives the scalar kernel's floats: the result bits equal, except that a NaN's
    payload may differ (a NaN scale is a broken file either way)."""
    rng = np.random.default_rng(8)
    N, K = 19, 512
    blocks = make_blocks(rng, typ, N * K // 256).reshape(N * K // 256, -1)
    off = 0 if typ in MINS else 208
    pick = SPECIAL_F16[rng.integers(0, len(SPECIAL_F16), (blocks.shape[0], 2))]
    blocks[:, off:off + 2] = pick[:, :1].view(np.uint8)
    if typ in MINS:
        blocks[:, 2:4] = pick[:, 1:].view(np.uint8)
    blocks = blocks.reshape(N, -1)
    xq, xd, xsum = quantize(rng.normal(size=(2, K)).astype(np.float32))
    assert_special_scales_equal_scalar(typ, xq, xd, xsum, blocks, N, TIERS, (False,))


@pytest.mark.parametrize("typ", TYPES)
def test_tiers_equal_scalar_bits(typ):
    rng = np.random.default_rng(6 + len(typ))
    failures = tier_failures(make_case, rng, typ, K_SET, N_SET, M_SET, TIERS)
    assert not failures, failures[:10]


@pytest.mark.parametrize("typ", TYPES)
def test_tiers_equal_scalar_bits_across_gemm_chunks(typ):
    """Past the AVX-512 GEMM's chunks of 144 activation rows and 16 blocks (M = 147, 17 blocks)
    and through its 32-row tiles' tails (N = 49: a tile whose second half has 1 row; 80)."""
    rng = np.random.default_rng(16 + len(typ))
    failures = tier_failures(make_case, rng, typ, [17 * 256], [49, 80], [147], TIERS)
    assert not failures, failures[:10]


def test_amx_emulated_has_the_kquant_gemms_where_the_cpu_runs_them():
    """The amx_emulated table lists its K-quant GEMMs exactly when the CPU has their AVX-512
    features (elsewhere kq_gemm runs scalar), so on an AVX-512 machine the tests above cannot
    silently fall back to scalar against scalar."""
    if not X86_BUILD:
        pytest.skip("amx_emulated is in x86 builds only")
    want = EMU_FEATURES <= set(_native.info()["features"].split(","))
    for typ in TYPES:
        name = _bench.kq_kernel(typ, "amx_emulated", True)
        emu = f"q{typ[1]}k_gemm_16x16_amx_emulated"
        assert name == (emu if want else f"q{typ[1]}k_gemm_1x1_scalar"), (typ, name)
    assert bool(emulated()) == want


@pytest.mark.skipif(not AMX_GEMMS, reason="no AMX, and no AVX-512 for the emulated AMX")
@pytest.mark.parametrize("tier", AMX_GEMMS)
@pytest.mark.parametrize("typ", TYPES)
def test_amx_gemm_equals_scalar_bits_across_tiles(typ, tier):
    """The AMX GEMM (16 x 16 C tiles, weights expanded a chunk of blocks at a time; on a CPU
    without AMX its body with the tiles emulated in C) = scalar bit for bit where its tiling has
    tails: M and N not multiples of 16, several activation tiles with a short last one, K
    spanning several expansion chunks, and (147, 145, 768) past the Q4_K / Q5_K body's 128-row
    activation pieces and 128-row output chunks with a pair of a full and a 3-row tile."""
    rng = np.random.default_rng(40 + len(typ))
    failures = []
    for M, N, K in [(16, 16, 256), (31, 17, 1024), (64, 48, 2304), (70, 33, 768),
                    (33, 130, 4352), (5, 1, 512), (147, 145, 768)]:
        xq, xd, xsum, blocks = make_case(rng, typ, M, N, K)
        want = run(typ, xq, xd, xsum, blocks, N, "scalar").view(np.uint32)
        got = run(typ, xq, xd, xsum, blocks, N, tier, gemm=True).view(np.uint32)
        if not np.array_equal(got, want):
            failures.append((M, N, K, int((got != want).sum())))
    assert not failures, failures


@pytest.mark.parametrize("typ", TYPES)
def test_real_file_blocks(typ):
    """Blocks llama.cpp's quantizer wrote (a Q4_K_M file: Q4_K and Q6_K matrices, Q5_K where it
    chose one), when the measurement model is present: every tier = the numpy model, bit for
    bit."""
    gguf = pytest.importorskip("gguf")
    path = Path.home() / ".cache/isaforge/scale/llama-3.2-1b-random-q4_k_m.gguf"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    r = gguf.GGUFReader(str(path))
    want_type = gguf_type(gguf, typ)
    t = next((t for t in r.tensors if t.tensor_type == want_type and "blk.0." in t.name), None)
    if t is None:
        pytest.skip(f"{path.name} has no {typ.upper()} matrix")
    K = int(t.shape[0])
    N = 40
    blocks = np.ascontiguousarray(np.asarray(t.data).reshape(-1)[: N * K // 256 * BLOCK_BYTES[typ]])
    blocks = blocks.view(np.uint8).reshape(N, -1)
    rng = np.random.default_rng(7)
    xq, xd, xsum = quantize(rng.normal(size=(2, K)).astype(np.float32))
    want = model(typ, xq, xd, xsum, blocks, N)
    assert_bits_equal(want, typ, xq, xd, xsum, blocks, N, ["scalar", *TIERS], (False,),
                      where=(t.name,))


def test_bad_shapes_refused():
    z = np.zeros(256, np.int8)
    with pytest.raises(ValueError, match="bad shape"):
        _bench.kq_gemm("q4_k", z, np.ones(1, np.float32), np.zeros(16, np.int16), 1,
                       np.zeros(144, np.uint8), 1, 100, np.zeros(1, np.float32), "scalar")
    with pytest.raises(ValueError, match="too small"):
        _bench.kq_gemm("q6_k", z, np.ones(1, np.float32), np.zeros(16, np.int16), 1,
                       np.zeros(209, np.uint8), 1, 256, np.zeros(1, np.float32), "scalar")
    with pytest.raises(ValueError, match="unknown K-quant type"):
        _bench.kq_gemm("q3_k", z, np.ones(1, np.float32), np.zeros(16, np.int16), 1,
                       np.zeros(210, np.uint8), 1, 256, np.zeros(1, np.float32), "scalar")
    with pytest.raises(ValueError, match="multiple of 256"):
        _bench.k8_quantize(np.zeros(100, np.float32), np.zeros(100, np.int8),
                           np.zeros(1, np.float32), np.zeros(7, np.int16), "scalar")


GUARD_SCRIPT = KQ_GUARDED_PRELUDE + '''
rng = np.random.default_rng(0)
for typ, bb in (("q4_k", 144), ("q5_k", 176), ("q6_k", 210)):
    for (M, N, K) in [(1, 17, 256), (3, 15, 512), (17, 1, 768), (1, 33, 2304), (2, 16, 256)]:
        nb = K // 256
        x, xd, xs, w = guarded_operands(rng, M, N, K, 256, bb)
        for r in range(N * nb):  # finite f16 scales
            o = r * bb + (208 if typ == "q6_k" else 0)
            w.reshape(-1)[o:o + 2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)
        ref = scalar_out(typ, x, xd, xs, w, M, N, K)
        for tier in sys.argv[1].split(","):
            check_tier(typ, x, xd, xs, w, M, N, K, ref, tier)
            xf = guarded((K,), np.float32); xf[:] = rng.normal(size=K)
            q = guarded((K,), np.int8); d = guarded((nb,), np.float32)
            s = guarded((K // 16,), np.int16)
            _bench.k8_quantize(xf, q, d, s, tier)
print("ok")
'''


def test_no_out_of_bounds_reads_at_guard_pages():
    assert_guard_script_passes(GUARD_SCRIPT, TIERS)


def test_bench_cases_gate_and_count_the_file_bytes():
    """isaforge bench kernels' K-quant GEMV and GEMM cases: weight bytes are the
    blocks, every tier passes the bit-for-bit gate, and a group size other than 256 is
    refused."""
    for op, bb in (("q4k_gemv", 144), ("q5k_gemv", 176), ("q6k_gemv", 210),
                   ("q4k_gemm", 144), ("q5k_gemm", 176), ("q6k_gemm", 210)):
        case = _bench.Case(op, 19 if op.endswith("gemm") else 1, 40, 512, 256, 2)
        assert case.weight_bytes == 40 * 2 * bb
        assert_bench_case_gates(case, op, TIERS)
        with pytest.raises(ValueError, match="gs = 256"):
            _bench.Case(op, 1, 40, 512, 32, 1)
    from isaforge.bench.kernels import Shape, kquant_shapes

    shapes = kquant_shapes("smollm2-135m")
    kq = [s for s in shapes if s.op in ("q4k_gemv", "q5k_gemv", "q6k_gemv")]
    assert {s.op for s in kq} == {"q4k_gemv", "q5k_gemv", "q6k_gemv"}
    assert all(s.K % 256 == 0 for s in kq)
    gemms = kquant_shapes("smollm2-135m", [64])
    assert {(s.op, s.M) for s in gemms if s.M > 1} == {(op, 64) for op in (
        "q4k_gemm", "q5k_gemm", "q6k_gemm", "q40_gemm", "q41_gemm", "q50_gemm", "q51_gemm",
        "q80_gemm")}
    assert Shape("q4k_gemv", "w", 1, 40, 512).bytes(256) == 40 * 2 * 144 + 512 + 8 + 64 + 160


KQ_SIMD = {  # kernel file stem -> instructions its design rests on (register width)
    "q4k_gemv_1x4_avx512_vnni": ("vpdpbusd", "vpackssdw", "vpdpwssd", "vpermw"),
    "q5k_gemv_1x4_avx512_vnni": ("vpdpbusd", "vpackssdw", "vpdpwssd", "vpermw", "vptestmb"),
    "q5k_gemm_6x32_avx512_vnni": ("vpdpbusd", "vpmulld", "vpunpckldq"),
    "q5k_gemv_1x8_avx_vnni": ("vpdpwssd", "vpshufb", "vpmaddubsw"),
    "q5k_gemv_1x8_avx2": ("vpmaddwd", "vpshufb", "vpmaddubsw"),
    "q6k_gemv_1x4_avx512_vnni": ("vpdpwssd", "vpermw", "vpmaddubsw"),
    "q4k_gemm_6x32_avx512_vnni": ("vpdpbusd", "vpmulld", "vpunpckldq"),
    "q6k_gemm_8x16_avx512_vnni": ("vpdpbusd", "vpdpwssd", "vpmulld", "vpunpckldq"),
    "q4k_gemm_4x8_avx_vnni": ("vpdpbusd", "vpdpwssd", "vpmulld", "vpunpckldq"),
    "q6k_gemm_4x8_avx_vnni": ("vpdpbusd", "vpdpwssd", "vpmulld", "vpunpckldq"),
    "q4k_gemm_4x8_avx2": ("vpmaddubsw", "vpaddw", "vpmaddwd", "vpunpckldq"),
    "q6k_gemm_4x8_avx2": ("vpmaddubsw", "vpaddw", "vpmaddwd", "vpunpckldq"),
    "q4k_gemv_1x8_avx_vnni": ("vpdpwssd", "vpshufb", "vpmaddubsw"),
    "q6k_gemv_1x8_avx_vnni": ("vpdpwssd", "vpshufb", "vpmaddubsw"),
    "q4k_gemv_1x8_avx2": ("vpmaddwd", "vpshufb", "vpmaddubsw"),
    "q6k_gemv_1x8_avx2": ("vpmaddwd", "vpshufb", "vpmaddubsw"),
    "q4k_gemm_16x16_amx": ("tdpbsud", "vpgatherdd", "vpmullw", "vpdpwssd"),
    "q5k_gemm_16x16_amx": ("tdpbsud", "vpgatherdd", "vpmullw", "vpdpwssd"),
    "q6k_gemm_16x16_amx": ("tdpbsud", "tdpbssd", "vpgatherdd", "vpmullw"),
}


@needs_cc_and_objdump
@x86_only
@pytest.mark.parametrize("stem", list(KQ_SIMD))
def test_simd_objects_use_the_designed_instructions(stem, tmp_path):
    """Each x86 K-quant kernel compiled with only its manifest group's flags contains its
    product instructions on its own register width (zmm for AVX-512, ymm otherwise), the AVX2
    body no VNNI instruction, the AVX2 GEMMs no VPMULLD (VPMADDWD applies the scales), the
    AVX-512 Q4_K / Q5_K GEMMs no VPDPWSSD (their mins go through VPDPBUSD), the AMX ones
    VPDPWSSD (their mins on the vector units, not a third set of tiles)."""
    asm = x86_object_asm(manifest_and_header(tmp_path), stem, tmp_path)
    reg = "%zmm" if "avx512" in stem or "amx" in stem else "%ymm"
    for ins in KQ_SIMD[stem]:  # tile products name tile registers
        r = "%tmm" if ins.startswith("tdp") else reg
        assert any(ins in x and r in x for x in asm), (stem, ins)
    if stem.endswith("_avx2"):
        assert not any("vpdp" in x for x in asm), stem
    if stem.endswith("_avx2") and "_gemm_" in stem:
        assert not any("vpmulld" in x for x in asm), stem
    if stem.startswith(("q4k_gemm", "q5k_gemm")) and stem.endswith("_avx512_vnni"):
        assert not any("vpdpwssd" in x for x in asm), stem  # the mins by VPDPBUSD of bytes


EMU_DRIVER = r"""
#include <stdio.h>
#include "amx_emu.h"

int main(int argc, char **argv) {
    int bad = argv[1][0] - '0';
    amx_emu_cfg c;
    memset(&c, 0, sizeof c);
    c.palette_id = 1;
    c.rows[0] = 1, c.colsb[0] = 64; /* C: 1 row x 16 dwords */
    c.rows[1] = 1, c.colsb[1] = 4;  /* A: 1 row x 4 bytes */
    c.rows[2] = 1, c.colsb[2] = 64; /* B: 1 row (a.colsb / 4) x 64 bytes */
    if (bad == 1) c.reserved[3] = 1;
    if (bad == 2) c.rows[2] = 2;     /* b.rows != a.colsb / 4 */
    if (bad == 3) c.rows[9] = 1, c.colsb[9] = 4;
    if (bad == 4) c.colsb[1] = 0;    /* rows without colsb */
    int8_t a[4] = {-1, 2, -3, 4};
    uint8_t b[128] = {255, 1, 128, 0};
    int32_t out[2][16];
    AMX_TILE_STATE;
    if (bad != 5) AMX_TILE_CONFIG(&c); /* 5: a tile op on the INIT state */
    AMX_TILE_ZERO(0);
    AMX_TILE_LOAD(1, a, 4);
    AMX_TILE_LOAD(2, b, 64);
    AMX_TILE_DPBSUD(0, 1, bad == 6 ? 1 : 2); /* 6: b is a */
    AMX_TILE_STORE(0, out[0], 64);
    AMX_TILE_ZERO(0);
    AMX_TILE_DPBSSD(0, 1, 2);
    AMX_TILE_STORE(0, out[1], 64);
    AMX_TILE_RELEASE();
    printf("%d %d %d %d\n", (int)out[0][0], (int)out[0][1], (int)out[1][0], (int)out[1][1]);
    return 0;
}
"""


@pytest.mark.skipif(not shutil.which(os.environ.get("CC", "cc")), reason="needs a C compiler")
def test_tile_emulator_computes_tdpbsud_and_faults_where_hardware_would(tmp_path):
    """amx_emu.h, the tile machine of every emulated AMX twin: TDPBSUD takes B's bytes unsigned
    and TDPBSSD signed (-255 + 2 - 384 = -637 against 1 + 2 + 384 = 387), and a configuration or
    operand the hardware refuses (#GP / #UD: a reserved byte, a B tile whose rows do not match
    A's width, a tile above 7, half a tile, no configuration, a repeated tile) aborts with the
    reason instead of computing."""
    src = tmp_path / "emu.c"
    src.write_text(EMU_DRIVER)
    exe = tmp_path / "emu"
    subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-O1", "-Wall", "-Werror",
                    f"-I{REPO / 'csrc/kernels'}", str(src), "-o", str(exe)], check=True)
    ok = subprocess.run([str(exe), "0"], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.split() == ["-637", "0", "387", "0"], ok
    reasons = {1: "reserved byte set", 2: "TDPBSUD: a.colsb/4 != b.rows", 3: "tile >= 8",
               4: "rows/colsb half configured", 5: "without a configuration",
               6: "TDPBSUD: tiles not distinct"}
    for case, why in reasons.items():
        r = subprocess.run([str(exe), str(case)], capture_output=True, text=True)
        assert r.returncode != 0 and r.stdout == "", (case, r)
        assert why in r.stderr and "would fault on hardware" in r.stderr, (case, r.stderr)
