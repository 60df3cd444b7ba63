"""Q4_K on 8-row groups (isaforge.h, if_q4k_pack_x8): the layout against a numpy model of it,
and the q4kx8_* kernels of the AVX2 tiers against the scalar Q4_K kernel on the file's rows, bit
for bit, on a shape grid with row tails, extreme values, special scales and guard pages."""

from __future__ import annotations

import numpy as np
import pytest

from blocks_helper import (
    KQ_GUARDED_PRELUDE,
    SIMD_TIERS,
    SPECIAL_F16,
    assert_guard_script_passes,
    manifest_and_header,
    needs_cc_and_objdump,
    x86_object_asm,
    x86_only,
)
from isaforge import _bench
from test_kquant_kernels import make_case, quantize

# the tiers with kernels on the layout (the AVX2 ones; the others run the file's rows)
X8_TIERS = [t for t in SIMD_TIERS if _bench.kq_kernel("q4_kx8", t)]


def pack(blocks: np.ndarray, N: int, K: int) -> np.ndarray:
    out = np.empty_like(blocks)
    _bench.q4k_pack_x8(out, blocks, N, K)
    return out


def pack_model(blocks: np.ndarray, N: int, K: int) -> np.ndarray:
    """The layout in numpy: per 8-row group and block, dword k of row r at 32 k + 4 r."""
    nb = K // 256
    d = blocks.reshape(N // 8, 8, nb, 36, 4)  # group, row, block, dword, byte
    return np.ascontiguousarray(d.transpose(0, 2, 3, 1, 4)).reshape(N, -1)


def run_x8(xq, xd, xsum, blocks, N, tier, gemm) -> np.ndarray:
    M, K = xq.shape
    out = np.zeros((M, N), np.float32)
    _bench.kq_gemm("q4_kx8", xq, xd, xsum, M, pack(blocks, N, K), N, K, out, tier, gemm)
    return out


def scalar(xq, xd, xsum, blocks, N) -> np.ndarray:
    M, K = xq.shape
    out = np.zeros((M, N), np.float32)
    _bench.kq_gemm("q4_k", xq, xd, xsum, M, blocks, N, K, out, "scalar")
    return out


def test_the_avx2_tiers_have_the_kernels_and_no_other():
    for tier in ["scalar", *SIMD_TIERS]:
        want = tier in ("avx2", "avx_vnni")
        assert (tier in X8_TIERS) == want, tier
    if not X8_TIERS:
        pytest.skip("no AVX2 tier on this machine")


def test_pack_equals_the_numpy_layout():
    rng = np.random.default_rng(0)
    for N, K in [(8, 256), (24, 768), (16, 2304)]:
        blocks = rng.integers(0, 256, (N, K // 256 * 144), dtype=np.uint8)
        assert np.array_equal(pack(blocks, N, K), pack_model(blocks, N, K))
    with pytest.raises(ValueError, match="bad shape N=12"):
        _bench.q4k_pack_x8(np.empty(12 * 144, np.uint8), np.empty(12 * 144, np.uint8), 12, 256)


@pytest.mark.skipif(not X8_TIERS, reason="no AVX2 tier on this machine")
def test_kernels_equal_scalar_bits():
    """GEMV at M = 1, GEMM at every M (its 4-row passes and the 2- and 1-row tails), several
    groups, K of 1 to 9 blocks; then every value, scale and activation at its largest."""
    rng = np.random.default_rng(1)
    failures = []
    for M, N, K, extreme in [(1, 8, 256, False), (1, 64, 2304, False), (2, 16, 512, False),
                             (3, 24, 768, False), (7, 40, 2304, False), (17, 8, 256, False),
                             (1, 16, 2304, True), (5, 24, 2304, True)]:
        xq, xd, xsum, blocks = make_case(rng, "q4_k", M, N, K, extreme=extreme)
        want = scalar(xq, xd, xsum, blocks, N).view(np.uint32)
        for tier in X8_TIERS:
            for gemm in (False, True) if M == 1 else (True,):
                got = run_x8(xq, xd, xsum, blocks, N, tier, gemm).view(np.uint32)
                if not np.array_equal(got, want):
                    failures.append((tier, gemm, M, N, K, extreme))
    assert not failures, failures


@pytest.mark.skipif(not X8_TIERS, reason="no AVX2 tier on this machine")
def test_special_block_scales_equal_scalar_bits():
    """Subnormal, zero, negative, infinite and NaN d and dmin read from the grouped header as
    from the file's (a NaN's payload may differ)."""
    rng = np.random.default_rng(2)
    N, K = 24, 512
    blocks = make_case(rng, "q4_k", 1, N, K)[3].reshape(-1, 144)
    pick = SPECIAL_F16[rng.integers(0, len(SPECIAL_F16), (blocks.shape[0], 2))]
    blocks[:, 0:4] = pick.view(np.uint8)
    blocks = blocks.reshape(N, -1)
    xq, xd, xsum = quantize(rng.normal(size=(3, K)).astype(np.float32))
    for M in (1, 3):
        want = scalar(xq[:M], xd[:M], xsum[:M], blocks, N)
        nan = np.isnan(want)
        for tier in X8_TIERS:
            got = run_x8(xq[:M], xd[:M], xsum[:M], blocks, N, tier, M > 1)
            assert np.array_equal(np.isnan(got), nan), tier
            assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), tier


def test_refusals():
    z = np.zeros(256, np.int8)
    args = (z, np.ones(1, np.float32), np.zeros(16, np.int16), 1, np.zeros(144 * 12, np.uint8))
    with pytest.raises(ValueError, match="bad shape"):  # not whole groups
        _bench.kq_gemm("q4_kx8", *args, 12, 256, np.zeros(12, np.float32), "scalar")
    with pytest.raises(ValueError, match="tier scalar has no q4_kx8 kernels"):
        _bench.kq_gemm("q4_kx8", *args, 8, 256, np.zeros(8, np.float32), "scalar")


GUARD_SCRIPT = KQ_GUARDED_PRELUDE + '''
rng = np.random.default_rng(0)
for (M, N, K) in [(1, 8, 256), (3, 16, 512), (5, 8, 768), (1, 24, 2304)]:
    x, xd, xs, w = guarded_operands(rng, M, N, K, 256, 144)
    w.reshape(-1, 144)[:, 0:4] = np.frombuffer(np.float16([0.01, 0.02]).tobytes(), np.uint8)
    ref = scalar_out("q4_k", x, xd, xs, w, M, N, K)
    g = guarded(w.shape, np.uint8)
    _bench.q4k_pack_x8(g, w, N, K)
    for tier in sys.argv[1].split(","):
        if _bench.kq_kernel("q4_kx8", tier):
            check_tier("q4_kx8", x, xd, xs, g, M, N, K, ref, tier)
print("ok")
'''


@pytest.mark.skipif(not X8_TIERS, reason="no AVX2 tier on this machine")
def test_no_out_of_bounds_reads_at_guard_pages():
    assert_guard_script_passes(GUARD_SCRIPT, X8_TIERS)


X8_SIMD = {  # kernel file stem -> instructions its design rests on
    "q4kx8_gemv_1x8_avx2": ("vpmaddubsw", "vpmaddwd", "vpshufb"),
    "q4kx8_gemv_1x8_avx_vnni": ("vpmaddubsw", "vpdpwssd", "vpshufb"),
    "q4kx8_gemm_4x8_avx2": ("vpmaddubsw", "vpmaddwd", "vpmulld"),
    "q4kx8_gemm_4x8_avx_vnni": ("vpdpbusd", "vpdpwssd", "vpmulld"),
}


@needs_cc_and_objdump
@x86_only
@pytest.mark.parametrize("stem", list(X8_SIMD))
def test_objects_use_the_designed_instructions_and_no_transpose(stem, tmp_path):
    """Compiled with only its group's flags: its products on ymm registers, no VNNI
    instruction in the AVX2 ones, and none of the file-layout kernels' row transposes or
    reductions across lanes (lane r is row r from the load on)."""
    asm = x86_object_asm(manifest_and_header(tmp_path), stem, tmp_path)
    for ins in X8_SIMD[stem]:
        assert any(ins in x and "%ymm" in x for x in asm), (stem, ins)
    if stem.endswith("_avx2"):
        assert not any("vpdp" in x for x in asm), stem
    for ins in ("vpunpckldq", "vpunpckhdq", "vpunpcklqdq", "vphaddd", "vperm2i128"):
        assert not any(ins in x for x in asm), (stem, ins)
