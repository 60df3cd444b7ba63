"""Row groups (isaforge.h: Q4_K and Q6_K in 8s, if_kq_pack_x8; Q4_K in 16s, if_kq_pack_x16;
Q8_0 in 16s, if_q80_pack_x16): each layout against a numpy model of it, and the grouped kernels
(q4kx8_*, q6kx8_* on the AVX2 tiers, q4kx16_* and q80x16_* on AVX-512) against the type's
scalar kernel on the file's rows, bit for bit, on a shape grid with several groups, extreme
values, special scales and guard pages."""

from __future__ import annotations

import numpy as np
import pytest

import test_kquant_kernels as kquant
import test_legacy_kernels as legacy
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

# grouped kernels' type name -> (the file's type, rows per group, K a multiple of, block bytes,
# values per block, the tiers that have the kernels, its test case maker, pack_groups' name)
GROUPS = {
    "q4_kx8": ("q4_k", 8, 256, 144, 256, ("avx2", "avx_vnni"), kquant.make_case, "q4_k"),
    "q6_kx8": ("q6_k", 8, 256, 210, 256, ("avx2", "avx_vnni"), kquant.make_case, "q6_k"),
    "q8_0x16": ("q8_0", 16, 64, 34, 32, ("avx512_vnni", "amx"), legacy.make_case, "q8_0"),
    "q4_kx16": ("q4_k", 16, 256, 144, 256, ("avx512_vnni", "amx"), kquant.make_case, "q4_kx16"),
    "q6_kx16": ("q6_k", 16, 256, 210, 256, ("avx512_vnni", "amx"), kquant.make_case, "q6_kx16"),
    "q4_0x16": ("q4_0", 16, 64, 18, 32, ("avx512_vnni", "amx"), legacy.make_case, "q4_0"),
}
TYPES = list(GROUPS)


def tiers_of(name: str) -> list[str]:
    """The tiers of this machine with the grouped kernels (the others run the file's rows),
    and amx_emulated where its AMX GEMMs on 16-row groups run (x86, AVX-512)."""
    emu = [] if "x16" not in name or "avx2" not in SIMD_TIERS else ["amx_emulated"]
    return [t for t in SIMD_TIERS + emu if _bench.kq_kernel(name, t)]


def pack(name, blocks: np.ndarray, N: int, K: int) -> np.ndarray:
    out = np.empty_like(blocks)
    _bench.pack_groups(GROUPS[name][7], out, blocks, N, K)
    return out


def pack_model(name, blocks: np.ndarray, N: int, K: int) -> np.ndarray:
    """The layouts in numpy. Q4_K, Q6_K: per g-row group (8 or 16) and block, dword k of row r
    at 4 g k + 4 r, then (Q6_K) each row's 2 bytes past its last dword (its d) at 208 g + 2 r;
    Q6_K in 16s by pairs of blocks: both blocks' d, then each block's dword rows in the GEMV's
    order (an odd last block alone, d last). Q8_0, Q4_0: per 16-row group and pair of blocks,
    the 16 rows' d of each block, then each block's qs dword k of row r at 64 + 64 nq e + 64 k
    + 4 r (nq = 8 or 4 qs dwords)."""
    if name not in ("q8_0x16", "q4_0x16"):
        _, g, _, bb, *_ = GROUPS[name]
        b = blocks.reshape(N // g, g, K // 256, bb)  # group, row, block, byte
        dw = b[..., :bb // 4 * 4].reshape(N // g, g, K // 256, bb // 4, 4)
        dw = dw.transpose(0, 2, 3, 1, 4).reshape(N // g, K // 256, -1)
        tail = b[..., bb // 4 * 4:].transpose(0, 2, 1, 3).reshape(N // g, K // 256, -1)
        if name == "q6_kx16":  # dword rows reordered, d's first in a pair of blocks
            order = [*range(48, 52)] + [k for h in (0, 1) for q in range(8)
                                        for k in (16 * h + q, 16 * h + 8 + q, 32 + 8 * h + q)]
            rows = dw.reshape(N // g, K // 256, 52, 64)[:, :, order].reshape(N // g, K // 256, -1)
            parts, nb = [], K // 256
            for p in range(0, nb, 2):
                if p + 1 == nb:
                    parts += [rows[:, p], tail[:, p]]
                else:
                    parts += [tail[:, p], tail[:, p + 1], rows[:, p], rows[:, p + 1]]
            return np.ascontiguousarray(np.concatenate(parts, axis=1)).reshape(N, -1)
        return np.ascontiguousarray(np.concatenate([dw, tail], axis=2)).reshape(N, -1)
    bb = GROUPS[name][3]
    nq = (bb - 2) // 4
    b = blocks.reshape(N // 16, 16, K // 64, 2, bb)  # group, row, pair, block of it, byte
    d = b[..., :2].transpose(0, 2, 3, 1, 4).reshape(N // 16, K // 64, 64)
    q = b[..., 2:].reshape(N // 16, 16, K // 64, 2, nq, 4).transpose(0, 2, 3, 4, 1, 5)
    q = q.reshape(N // 16, K // 64, 128 * nq)
    return np.ascontiguousarray(np.concatenate([d, q], axis=2)).reshape(N, -1)


def run_grouped(name, xq, xd, xsum, blocks, N, tier, gemm) -> np.ndarray:
    M, K = xq.shape
    out = np.zeros((M, N), np.float32)
    _bench.kq_gemm(name, xq, xd, xsum, M, pack(name, blocks, N, K), N, K, out, tier, gemm)
    return out


def scalar(name, xq, xd, xsum, blocks, N) -> np.ndarray:
    M, K = xq.shape
    out = np.zeros((M, N), np.float32)
    _bench.kq_gemm(GROUPS[name][0], xq, xd, xsum, M, blocks, N, K, out, "scalar")
    return out


@pytest.mark.parametrize("typ", TYPES)
def test_the_tiers_that_have_the_kernels(typ):
    want = GROUPS[typ][5]
    for tier in ["scalar", *SIMD_TIERS]:
        assert (tier in tiers_of(typ)) == (tier in want), (typ, tier)


@pytest.mark.parametrize("typ", TYPES)
def test_pack_equals_the_numpy_layout(typ):
    _, g, kq, bb, qb, *_ = GROUPS[typ]
    rng = np.random.default_rng(0)
    for N, K in [(g, kq), (3 * g, 3 * kq), (2 * g, 2304)]:
        blocks = rng.integers(0, 256, (N, K // qb * bb), dtype=np.uint8)
        assert np.array_equal(pack(typ, blocks, N, K), pack_model(typ, blocks, N, K))
    bad = np.empty((g + 4) * 2304 // qb * bb, np.uint8)
    with pytest.raises(ValueError, match=f"bad shape N={g + 4}"):
        _bench.pack_groups(GROUPS[typ][7], bad, bad, g + 4, 2304)
    with pytest.raises(ValueError, match="no row groups for type 'q5_k'"):
        _bench.pack_groups("q5_k", bad, bad, 8, 256)


@pytest.mark.parametrize("typ", TYPES)
def test_a_row_comes_back_as_the_file_gave_it(typ):
    """if_group_row, a grouped token table's lookup: every row of several groups."""
    _, g, _, bb, qb, *_ = GROUPS[typ]
    rng = np.random.default_rng(3)
    N, K = 3 * g, 2304
    blocks = rng.integers(0, 256, (N, K // qb * bb), dtype=np.uint8)
    grouped = pack(typ, blocks, N, K)
    row = np.empty(K // qb * bb, np.uint8)
    for r in range(N):
        _bench.group_row(GROUPS[typ][7], row, grouped, r, N, K)
        assert np.array_equal(row, blocks[r]), r
    with pytest.raises(ValueError, match="bad shape"):
        _bench.group_row(GROUPS[typ][7], row, grouped, N, N, K)


@pytest.mark.parametrize("typ", TYPES)
def test_kernels_equal_scalar_bits(typ):
    """GEMV at M = 1, GEMM at every M (its full passes and the tails), several groups, K of
    one to several blocks' worth; then every value, scale and activation at its largest."""
    tiers = tiers_of(typ)
    if not tiers:
        pytest.skip(f"no tier with {typ}'s grouped kernels on this machine")
    ftype, g, kq, _, _, _, make_case, _ = GROUPS[typ]
    rng = np.random.default_rng(1)
    failures = []
    for M, n, K, extreme in [(1, 1, kq, False), (1, 8, 2304, False), (2, 2, 2 * kq, False),
                             (3, 3, 3 * kq, False), (7, 5, 2304, False), (17, 1, kq, False),
                             (1, 2, 2304, True), (9, 3, 2304, True)]:
        N = n * g
        xq, xd, xsum, blocks = make_case(rng, ftype, M, N, K, extreme=extreme)
        want = scalar(typ, xq, xd, xsum, blocks, N).view(np.uint32)
        for tier in tiers:
            for gemm in (False, True) if M == 1 else (True,):
                got = run_grouped(typ, xq, xd, xsum, blocks, N, tier, gemm).view(np.uint32)
                if not np.array_equal(got, want):
                    failures.append((tier, gemm, M, N, K, extreme))
    assert not failures, failures


@pytest.mark.parametrize("typ", TYPES)
def test_special_block_scales_equal_scalar_bits(typ):
    """Subnormal, zero, negative, infinite and NaN scales (Q4_K: d and dmin) read from the
    grouped layout as from the file's rows (a NaN's payload may differ)."""
    tiers = tiers_of(typ)
    if not tiers:
        pytest.skip(f"no tier with {typ}'s grouped kernels on this machine")
    ftype, g, _, bb, qb, _, make_case, _ = GROUPS[typ]
    rng = np.random.default_rng(2)
    N, K = 3 * g, 512
    xq, xd, xsum, blocks = make_case(rng, ftype, 3, N, K)
    blocks = blocks.reshape(-1, bb)
    # d (and Q4_K's dmin)
    nd, off = {"q4_k": (2, 0), "q6_k": (1, 208), "q8_0": (1, 0), "q4_0": (1, 0)}[ftype]
    pick = SPECIAL_F16[rng.integers(0, len(SPECIAL_F16), (blocks.shape[0], nd))]
    blocks[:, off:off + 2 * nd] = pick.view(np.uint8)
    blocks = blocks.reshape(N, -1)
    for M in (1, 3):
        want = scalar(typ, xq[:M], xd[:M], xsum[:M], blocks, N)
        nan = np.isnan(want)
        for tier in tiers:
            got = run_grouped(typ, xq[:M], xd[:M], xsum[:M], blocks, N, tier, M > 1)
            assert np.array_equal(np.isnan(got), nan), tier
            assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), tier


@pytest.mark.parametrize("typ", TYPES)
def test_refusals(typ):
    name = typ
    _, g, kq, bb, qb, *_ = GROUPS[typ]
    K = 256
    z = np.zeros(K, np.int8)
    args = (z, np.ones(K // qb, np.float32), np.zeros(K // 16, np.int16), 1,
            np.zeros(2 * g * K // qb * bb, np.uint8))
    with pytest.raises(ValueError, match="bad shape"):  # not whole groups
        _bench.kq_gemm(name, *args, g + 4, K, np.zeros(g + 4, np.float32), "scalar")
    with pytest.raises(ValueError, match=f"tier scalar has no {name} kernels"):
        _bench.kq_gemm(name, *args, g, K, np.zeros(g, np.float32), "scalar")


GUARD_SCRIPT = KQ_GUARDED_PRELUDE + '''
rng = np.random.default_rng(0)
for typ, name, g, qb, bb, off, scale in (("q4_k", "q4_kx8", 8, 256, 144, 0, [0.01, 0.02]),
                                         ("q6_k", "q6_kx8", 8, 256, 210, 208, [0.01]),
                                         ("q8_0", "q8_0x16", 16, 32, 34, 0, [0.01]),
                                         ("q4_k", "q4_kx16", 16, 256, 144, 0, [0.01, 0.02]),
                                         ("q6_k", "q6_kx16", 16, 256, 210, 208, [0.01]),
                                         ("q4_0", "q4_0x16", 16, 32, 18, 0, [0.01])):
    for (M, n, K) in [(1, 1, 256), (3, 2, 512), (5, 1, 768), (1, 3, 2304)]:
        N = n * g
        x, xd, xs, w = guarded_operands(rng, M, N, K, qb, bb)
        w.reshape(-1, bb)[:, off:off + 2 * len(scale)] = np.frombuffer(
            np.float16(scale).tobytes(), np.uint8)
        ref = scalar_out(typ, x, xd, xs, w, M, N, K)
        p = guarded(w.shape, np.uint8)
        _bench.pack_groups(name if name in ("q4_kx16", "q6_kx16") else typ, p, w, N, K)
        for tier in sys.argv[1].split(","):
            if _bench.kq_kernel(name, tier):
                check_tier(name, x, xd, xs, p, M, N, K, ref, tier)
print("ok")
'''


def test_no_out_of_bounds_reads_at_guard_pages():
    tiers = sorted({t for typ in TYPES for t in tiers_of(typ)})
    if not tiers:
        pytest.skip("no tier with grouped kernels on this machine")
    assert_guard_script_passes(GUARD_SCRIPT, tiers)


X8_SIMD = {  # kernel file stem -> instructions its design rests on
    "q4kx8_gemv_1x8_avx2": ("vpmaddubsw", "vpmaddwd", "vpshufb"),
    "q4kx8_gemv_1x8_avx_vnni": ("vpmaddubsw", "vpdpwssd", "vpshufb"),
    "q4kx8_gemm_4x8_avx2": ("vpmaddubsw", "vpaddw", "vpmaddwd"),
    "q4kx8_gemm_4x8_avx_vnni": ("vpdpbusd", "vpdpwssd", "vpmulld"),
    "q6kx8_gemv_1x8_avx2": ("vpmaddubsw", "vpmaddwd", "vpshufb", "vpsraw"),
    "q6kx8_gemv_1x8_avx_vnni": ("vpmaddubsw", "vpdpwssd", "vpshufb", "vpsraw"),
    "q6kx8_gemm_4x8_avx2": ("vpmaddubsw", "vpaddw", "vpmaddwd"),
    "q6kx8_gemm_4x8_avx_vnni": ("vpdpbusd", "vpdpwssd", "vpmulld"),
    "q80x16_gemv_1x16_avx512_vnni": ("vpdpbusd", "vcvtph2ps"),
    "q80x16_gemm_6x32_avx512_vnni": ("vpdpbusd", "vcvtph2ps"),
    "q4kx16_gemv_1x16_avx512_vnni": ("vpdpbusd", "vpdpwssd", "vpmulld", "vpshufb"),
    "q6kx16_gemv_1x16_avx512_vnni": ("vpdpbusd", "vpdpwssd", "vpmulld", "vpshufb"),
    "q4kx16_gemm_6x32_avx512_vnni": ("vpdpbusd", "vpmulld"),
    "q6kx16_gemm_8x16_avx512_vnni": ("vpdpbusd", "vpdpwssd", "vpmulld"),
    "q40x16_gemv_1x16_avx512_vnni": ("vpdpbusd", "vcvtph2ps"),
    "q40x16_gemm_6x32_avx512_vnni": ("vpdpbusd", "vcvtph2ps"),
}


@needs_cc_and_objdump
@x86_only
@pytest.mark.parametrize("stem", list(X8_SIMD))
def test_objects_use_the_designed_instructions_and_no_transpose(stem, tmp_path):
    """Compiled with only its group's flags: its products on its width's registers (zmm for
    AVX-512, ymm otherwise), no VNNI instruction in the AVX2 ones, and none of the file-layout
    kernels' row transposes or reductions across lanes (lane r is row r from the load on)."""
    asm = x86_object_asm(manifest_and_header(tmp_path), stem, tmp_path)
    reg = "%zmm" if "avx512" in stem else "%ymm"
    for ins in X8_SIMD[stem]:
        assert any(ins in x and reg in x for x in asm), (stem, ins)
    if stem.endswith("_avx2"):
        assert not any("vpdp" in x for x in asm), stem
    if stem.endswith("_avx2") and "_gemm_" in stem:  # VPMADDWD applies the scales
        assert not any("vpmulld" in x for x in asm), stem
    for ins in ("vpunpckldq", "vpunpckhdq", "vpunpcklqdq", "vphaddd", "vperm2i128",
                "vinserti32x4"):  # (the AVX-512 GEMMs' activation sums use one on xmm)
        assert not any(ins in x and not ("avx512" in stem and "%xmm" in x) for x in asm), (
            stem, ins)
