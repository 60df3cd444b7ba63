"""Conformance of every kernel tier against the scalar tier: equal float bits, every shape.

Each compiled tier this machine supports (plus "amx_emulated": the AMX kernel's packed layout
and group bookkeeping with the tile ops emulated in C, so it runs anywhere) is compared with
the scalar kernels on a grid of shapes (M_SET x N_SET x GS_SET, k_set: tile edges +-1 and
SmolLM2-135M's 576 and 1536). Out-of-bounds reads are checked by running kernels on buffers
that end exactly at an inaccessible guard page, in a subprocess."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from blocks_helper import assert_guard_script_passes
from conftest import GUARDED_PRELUDE
from isaforge import _bench, _native

M_SET = [1, 2, 3, 15, 16, 17, 64, 129]
N_SET = [1, 3, 16, 17, 63, 64, 576, 1536]
GS_SET = [4, 8, 16, 32, 64, 128, 256]


def k_set(gs: int) -> list[int]:
    return sorted({k for k in (gs, 3 * gs, 576, 1536) if k % gs == 0})


def tiers() -> list[str]:
    names = [t["name"] for t in _native.info()["tiers"] if t["supported"] and t["name"] != "scalar"]
    if "avx2" in [t["name"] for t in _native.info()["tiers"]]:  # x86 build
        names.append("amx_emulated")
    return names


TIERS = tiers()


def test_some_tier_besides_scalar_is_tested():
    assert TIERS, "no SIMD tier available on this machine"


def make_case(rng, M, N, K, gs):
    """Random int8 in [-127, 127] with all-+127, all--127 and all-zero groups, and scales over a
    wide range (tiny, huge, negative products)."""
    w = rng.integers(-127, 128, size=(N, K), dtype=np.int8)
    x = rng.integers(-127, 128, size=(M, K), dtype=np.int8)
    w[0, :gs] = 127
    x[0, :gs] = -127
    if K > gs:
        w[-1, gs: 2 * gs] = 0
        x[-1, -gs:] = 127
    if M > 1:
        x[1, :gs] = 0
    ng = K // gs
    ws = (rng.uniform(-1, 1, size=(N, ng)) * 10.0 ** rng.integers(-30, 6, size=(N, ng)))
    xs = (rng.uniform(0, 1, size=(M, ng)) * 10.0 ** rng.integers(-30, 6, size=(M, ng)))
    return x, xs.astype(np.float32), w, ws.astype(np.float32)


def gemm(tier, x, xs, w, ws, gs):
    M, K = x.shape
    N = w.shape[0]
    out = np.full((M, N), np.nan, np.float32)
    _bench.q8_gemm(x, xs, M, w, ws, N, K, gs, out, tier)
    return out.view(np.uint32)


@pytest.mark.parametrize("gs", GS_SET)
def test_q8_gemv_gemm_equal_scalar_bits(gs):
    rng = np.random.default_rng(gs)
    failures = []
    for K in k_set(gs):
        for N in N_SET:
            for M in M_SET:
                x, xs, w, ws = make_case(rng, M, N, K, gs)
                want = gemm("scalar", x, xs, w, ws, gs)
                for tier in TIERS:
                    got = gemm(tier, x, xs, w, ws, gs)
                    if not np.array_equal(got, want):
                        bad = np.argwhere(got != want)[0]
                        failures.append(f"{tier} M={M} N={N} K={K} gs={gs} first diff at {bad}")
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize(("gs", "K"), [(4, 3072), (32, 4800), (64, 4608), (128, 3200)])
def test_q8_gemm_k_blocked_rows_equal_scalar_bits(gs, K):
    """Rows longer than the GEMMs' K blocks (AVX2: blocks of about 1536 bytes at M > 4, so a
    tile's weights stay in L1; 2-4 equal blocks here, and group counts that do not divide
    evenly), with M and N tails: every tier = scalar, bit for bit."""
    rng = np.random.default_rng(K + gs)
    failures = []
    for N in (17, 40):
        for M in (1, 5, 33):
            x, xs, w, ws = make_case(rng, M, N, K, gs)
            want = gemm("scalar", x, xs, w, ws, gs)
            for tier in TIERS:
                if not np.array_equal(gemm(tier, x, xs, w, ws, gs), want):
                    failures.append((tier, M, N, K, gs))
    assert not failures, failures


@pytest.mark.parametrize("gs", GS_SET + [1, 2, 12])
def test_quantize_equals_scalar_bits(gs):
    rng = np.random.default_rng(100 + gs)
    for K in sorted({gs * 3, 576 if 576 % gs == 0 else gs, 1536 if 1536 % gs == 0 else gs}):
        x = (rng.normal(size=K) * 10.0 ** rng.integers(-20, 20)).astype(np.float32)
        x[:gs] = 0
        if K > gs:  # exact halves after scaling: 2.5 * scale etc.
            g = x[gs: 2 * gs]
            g[:] = np.float32(1.0)
            g[0] = np.float32(127.0)
            g[-1] = np.float32(-0.5 * 127.0 / 127.0) if gs > 2 else g[-1]
        ref_q, ref_s = np.empty(K, np.int8), np.empty(K // gs, np.float32)
        _bench.quantize_q8(x, gs, ref_q, ref_s, "scalar")
        for tier in TIERS:
            q, s = np.empty(K, np.int8), np.empty(K // gs, np.float32)
            _bench.quantize_q8(x, gs, q, s, tier)
            assert np.array_equal(q, ref_q), (tier, gs, K)
            assert np.array_equal(s.view(np.uint32), ref_s.view(np.uint32)), (tier, gs, K)


def test_swiglu_equals_scalar_bits():
    """Every tier's SwiGLU (AVX-512: detmath's expf in double lanes) gives the scalar bits, on
    normal values over 8 decades, the expf cut-offs (88.8, -104), zeros, subnormals, huge and
    infinite values, and lengths with a tail; NaN stays NaN."""
    rng = np.random.default_rng(7)
    parts = [rng.normal(size=4096) * 10.0 ** e for e in range(-4, 4)]
    edges = [0.0, -0.0, 88.7, 88.8, 88.80001, 88.9, -88.8, -103.9, -104.0, -104.00001, 104.0,
             -200.0, 200.0, 1e30, -1e30, np.inf, -np.inf, 1e-40, -1e-40, 3.4e38, -3.4e38]
    x0 = np.concatenate(parts + [np.array(edges)]).astype(np.float32)
    g = rng.normal(size=x0.size).astype(np.float32)
    g[-5:] = [0.0, -0.0, np.inf, 1e-40, -3.0]
    for n in (x0.size, 1, 15, 16, 17, 33):
        ref = x0[-n:].copy()
        _bench.swiglu(ref, g[-n:].copy(), "scalar")
        for tier in TIERS:
            got = x0[-n:].copy()
            _bench.swiglu(got, g[-n:].copy(), tier)
            assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), (tier, n)
    nan = np.array([np.nan] * 17, np.float32)
    for tier in ["scalar", *TIERS]:
        out = nan.copy()
        _bench.swiglu(out, np.ones(17, np.float32), tier)
        assert np.isnan(out).all(), tier


GUARD_SCRIPT = GUARDED_PRELUDE + textwrap.dedent('''
    rng = np.random.default_rng(0)
    tiers = sys.argv[1].split(",")
    for (M, N, K, gs) in [(1, 17, 36, 4), (3, 63, 72, 8), (17, 17, 48, 16), (2, 3, 96, 32),
                          (15, 1, 64, 64), (129, 17, 384, 128), (5, 63, 768, 256),
                          (1, 1536, 576, 32), (16, 16, 576, 64), (1, 5, 24, 12)]:
        ng = K // gs
        x = guarded((M, K), np.int8); x[:] = rng.integers(-127, 128, (M, K))
        w = guarded((N, K), np.int8); w[:] = rng.integers(-127, 128, (N, K))
        xs = guarded((M, ng), np.float32); xs[:] = rng.uniform(0, 1, (M, ng))
        ws = guarded((N, ng), np.float32); ws[:] = rng.uniform(-1, 1, (N, ng))
        ref = np.empty((M, N), np.float32)
        _bench.q8_gemm(x, xs, M, w, ws, N, K, gs, ref, "scalar")
        for tier in tiers:
            out = guarded((M, N), np.float32)
            _bench.q8_gemm(x, xs, M, w, ws, N, K, gs, out, tier)
            assert np.array_equal(out.view(np.uint32), ref.view(np.uint32)), (tier, M, N, K, gs)
            xf = guarded((K,), np.float32); xf[:] = rng.normal(size=K)
            q = guarded((K,), np.int8); s = guarded((ng,), np.float32)
            _bench.quantize_q8(xf, gs, q, s, tier)
    print("ok")
''')


def test_no_out_of_bounds_reads_at_guard_pages():
    assert_guard_script_passes(GUARD_SCRIPT, TIERS)


def test_geglu_equals_scalar_bits_and_gelu_tanh():
    """Every tier's GeGLU gives the scalar bits on the same inputs as SwiGLU's test (expf
    cut-offs, zeros, subnormals, huge and infinite values, tails); NaN stays NaN; and the
    scalar kernel is gelu_tanh(x) * g within 1e-6 relative of float64 on normal values."""
    rng = np.random.default_rng(8)
    parts = [rng.normal(size=4096) * 10.0 ** e for e in range(-4, 4)]
    edges = [0.0, -0.0, 4.4, 5.0, -5.0, -9.0, -9.5, -10.0, 88.8, -88.8, 104.0, -104.0, -200.0,
             200.0, 1e19, -1e19, 1e30, -1e30, np.inf, -np.inf, 1e-40, -1e-40, 3.4e38, -3.4e38]
    x0 = np.concatenate(parts + [np.array(edges)]).astype(np.float32)
    g = rng.normal(size=x0.size).astype(np.float32)
    g[-5:] = [0.0, -0.0, np.inf, 1e-40, -3.0]
    for n in (x0.size, 1, 7, 8, 9, 15, 16, 17, 33):
        ref = x0[-n:].copy()
        _bench.geglu(ref, g[-n:].copy(), "scalar")
        for tier in TIERS:
            got = x0[-n:].copy()
            _bench.geglu(got, g[-n:].copy(), tier)
            assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), (tier, n)
    nan = np.array([np.nan] * 17, np.float32)
    for tier in ["scalar", *TIERS]:
        out = nan.copy()
        _bench.geglu(out, np.ones(17, np.float32), tier)
        assert np.isnan(out).all(), tier
    x = (rng.normal(size=10000) * 3).astype(np.float32)
    out = x.copy()
    _bench.geglu(out, np.ones_like(x), "scalar")
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)
