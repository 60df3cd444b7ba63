"""Every attention kernel (each tier available here, each KV cache type) against the float64
oracle reference.attention, on the cases that stress the bookkeeping: a global layer
mid-prefill, a sliding window over a rolled ring cache with sinks, a window at position 0,
and chunks with partial query tiles and partial key blocks.

Bounds, relative to the output's largest magnitude: fp32 caches 1e-5 (measured <= 7.6e-7);
fp16 caches 1e-3 (measured <= 8.5e-4); int8 caches 1% (measured <= 0.98%: the error of
the int8 storage itself, see test_int8_paths_add_little_to_the_int8_storage_error, which
is more than 5x fp16's for any int8 layout smaller than fp16, see
test_no_int8_cache_smaller_than_fp16_is_within_5x_of_fp16). Kernels of different tiers
equal the scalar kernel bit for bit, for every cache type."""

from __future__ import annotations

import numpy as np
import pytest

from isaforge import _bench, reference
from isaforge.runtime.engine import KV_CACHE_TYPES, runtime_info

B, TQ = 64, 16  # IF_ATTN_KEY_BLOCK, IF_ATTN_Q_TILE


def attention_kernels() -> list[str]:
    """One tier per distinct attention kernel this CPU supports (scalar first)."""
    seen, out = set(), []
    for t in runtime_info()["tiers"]:
        if t["supported"] and kernel_name(t["name"]) not in seen:
            seen.add(kernel_name(t["name"]))
            out.append(t["name"])
    return out


def kernel_name(tier: str) -> str:
    from isaforge.runtime.engine import select_kernel

    select_kernel(tier)
    try:
        return runtime_info()["prefill"]["attention"]
    finally:
        select_kernel(None)


def has_test_table(name: str) -> bool:
    z = np.zeros((1, 2), np.float32)
    try:
        _bench.attention(z, z, z, 0, 1, 1, 2, 0, 0, 1, 0, np.zeros((1, 2), np.float32), name)
    except ValueError:
        return False
    return True


TIERS = attention_kernels()
# int8 matrix-engine attention (int8 Q.K^T, u8 P.V) with emulated AMX tiles: used for int8
# caches only (f32/f16 caches run the tier's fp32 kernel)
MATRIX = ["amx_emulated"] if has_test_table("amx_emulated") else []

# (name, n_heads, n_kv_heads, head_size, pos0, n, window, n_sinks, cap)
CASES = [
    ("global_mid_prefill", 9, 3, 64, 100, 37, 0, 0, 200),
    ("window_rolled_sinks", 9, 3, 64, 300, 20, 48, 4, 4 + 48 + 20 - 1),
    ("window_at_pos0", 8, 4, 8, 0, 30, 12, 2, 2 + 12 + 30 - 1),
    ("window_no_sinks_rolled", 4, 1, 32, 150, 9, 70, 0, 70 + 9 - 1),
    ("partial_tiles_blocks", 8, 4, 8, 70, 21, 0, 0, 91),
    ("decode_row", 9, 3, 64, 130, 1, 0, 0, 131),
    ("mha_long_window_larger_than_context", 4, 4, 16, 5, 40, 1000, 3, 45),
    ("head6_groups_padded", 4, 2, 6, 5, 20, 0, 0, 25),
]


def case_data(case, seed: int = 0, q_scale: float = 1.0):
    """A case's q, k, v: standard normal (q times q_scale), float32."""
    _, nh, nkv, hs, pos0, n, *_ = case
    rng = np.random.default_rng(seed)
    q = (rng.normal(size=(n, nh * hs)) * q_scale).astype(np.float32)
    k = rng.normal(size=(pos0 + n, nkv * hs)).astype(np.float32)
    v = rng.normal(size=(pos0 + n, nkv * hs)).astype(np.float32)
    return q, k, v


def run(case, kv: str, tier: str, seed: int = 0, q_scale: float = 1.0):
    _, nh, nkv, hs, pos0, n, window, sinks, cap = case
    q, k, v = case_data(case, seed, q_scale)
    out = np.full((n, nh * hs), np.nan, np.float32)
    _bench.attention(q, k, v, pos0, nh, nkv, hs, window, sinks, cap, KV_CACHE_TYPES[kv], out,
                      tier)
    want = reference.attention(q, k, v, pos0, nh, nkv, window, sinks)
    return out, want


def rel_err(got, want) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


ERRORS: dict[tuple[str, str, str], float] = {}


@pytest.mark.parametrize("tier", TIERS + MATRIX)
@pytest.mark.parametrize("kv", list(KV_CACHE_TYPES))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_attention_matches_float64_oracle(case, kv, tier):
    out, want = run(case, kv, tier)
    err = rel_err(out, want)
    ERRORS[(case[0], kv, tier)] = err
    print(f"{case[0]:38s} {kv:5s} {tier:12s} worst rel err {err:.3g}")
    bound = {"f32": 1e-5, "f16": 1e-3, "int8": 1e-2}[kv]
    assert np.isfinite(out).all()
    assert err <= bound


def int8_storage(x: np.ndarray, g: int) -> np.ndarray:
    """x stored as int8 per group of g values with an exact float32 absmax/127 scale, read
    back in float64: what an int8 cache keeps, before any kernel arithmetic."""
    y = x.astype(np.float64).reshape(x.shape[0], -1, g)
    s = (np.abs(y).max(-1, keepdims=True) / 127).astype(np.float32).astype(np.float64)
    return (np.round(np.divide(y, s, out=np.zeros_like(y), where=s > 0)) * s).reshape(x.shape)


def storage_error(case, store) -> float:
    """Error of float64 attention over a cache whose K and V went through store()."""
    _, nh, nkv, hs, pos0, n, window, sinks, cap = case
    q, k, v = case_data(case)
    want = reference.attention(q, k, v, pos0, nh, nkv, window, sinks)
    return rel_err(reference.attention(q, store(k), store(v), pos0, nh, nkv, window, sinks), want)


def f16_storage(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float64)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_int8_paths_add_little_to_the_int8_storage_error(case):
    """The int8 kernels' own error, against float64 attention over the same int8-stored K and
    V (int8_storage reproduces the cache's quantizer), stays below a quarter of the fp16
    path's error (measured: scalar <= 0.003x, the int8 Q.K^T / u8 P.V matrix path <= 0.11x;
    this and the 1% bound are the int8 paths' bounds, not "within 5x of fp16", which no int8
    cache can meet: see the next test). The matrix path's
    two-plane q and P (hi + lo/254, hi + lo/255) keep its integer products at ~15 bits. So
    what the int8 cache costs is its storage."""
    _, nh, nkv, hs, pos0, n, window, sinks, cap = case
    g = 32
    while hs % g:
        g //= 2  # the kernels' group (ops.c)
    q, k, v = case_data(case)
    scale = np.abs(reference.attention(q, k, v, pos0, nh, nkv, window, sinks)).max()
    stored = reference.attention(
        q, int8_storage(k, g), int8_storage(v, g), pos0, nh, nkv, window, sinks
    )
    e16 = storage_error(case, f16_storage)
    for tier in ["scalar"] + MATRIX:
        out, _ = run(case, "int8", tier)
        own = float(np.abs(out - stored).max() / scale)
        print(f"{case[0]}: int8 ({tier}) own error {own:.3g} = {own / e16:.3f}x fp16 {e16:.3g}")
        assert own <= 0.25 * e16


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_no_int8_cache_smaller_than_fp16_is_within_5x_of_fp16(case):
    """Why "int8 paths never more than 5x the fp16 path's error" cannot hold: even with exact
    arithmetic, storing K and V as int8 with per-group scales costs more than 5x
    the fp16 cache's error for every group size whose cache is smaller than fp16's (g >= 3
    values per scale even with 16-bit scales; g >= 5 with float32 ones). Measured 6.0-29.7x
    here. (fp16 keeps ~12.2 bits of a Gaussian value: rms error 2^-12.2 sigma; Shannon's
    rate-distortion bound gives any 8-bit-per-value code at least 2^-8 sigma, ~19x.) The
    int8 cache's own bound is the 1% of test_attention_matches_float64_oracle."""
    hs = case[3]
    e16 = storage_error(case, f16_storage)
    assert rel_err(*run(case, "f16", "scalar")) <= 1.01 * e16  # the fp16 path is its storage
    for g in (g for g in range(3, hs + 1) if hs % g == 0):
        e8 = storage_error(case, lambda x, g=g: int8_storage(x, g))
        print(f"{case[0]}: g={g} int8 storage {e8:.3g} = {e8 / e16:.1f}x fp16 {e16:.3g}")
        assert e8 > 5 * e16


@pytest.mark.parametrize("kv", list(KV_CACHE_TYPES))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fp32_kernels_equal_scalar_bit_for_bit(case, kv):
    want, _ = run(case, kv, "scalar")
    for tier in TIERS[1:]:
        got, _ = run(case, kv, tier)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), tier


@pytest.mark.parametrize("q_scale", [0.01, 8.0, 60.0])
def test_fp32_kernels_equal_scalar_with_wide_scores(q_scale):
    """Scores from nearly flat to spanning hundreds (exp underflow, subnormal probabilities):
    the vectorized exp of the AVX-512 kernel still gives the scalar kernel's bits."""
    case = CASES[0]
    want, oracle = run(case, "f32", "scalar", q_scale=q_scale)
    assert rel_err(want, oracle) <= 1e-5
    for tier in TIERS[1:]:
        got, _ = run(case, "f32", tier, q_scale=q_scale)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), tier


# Shapes for the SIMD kernels' unrolled paths (attn_f32_simd_body.h): head_size 128, 80, 100,
# 56, 24, 2 give 8+8, 8+2, 8+4+tail, 4+2+1, 2+1 and tail-only head-dim vector groups at 8 lanes;
# 5 and 7 heads per kv group give 4+1 and 4+3 interleaved softmax chains; row counts and
# positions give 8, 4, 2 and 1 key chunks per block and chunks past a tile's keys.
MORE_CASES = [
    ("hs128_kvmul5", 10, 2, 128, 61, 20, 0, 0, 81),
    ("hs80_window", 7, 1, 80, 90, 33, 40, 3, 3 + 40 + 33 - 1),
    ("hs100_decode", 4, 1, 100, 200, 1, 0, 0, 201),
    ("hs56_kvmul7_rolled", 7, 1, 56, 130, 5, 61, 2, 2 + 61 + 5 - 1),
    ("hs24_mha", 3, 3, 24, 9, 50, 0, 0, 59),
    ("hs2_gqa", 6, 2, 2, 63, 3, 0, 0, 66),
]


@pytest.mark.parametrize("kv", ["f32", "f16"])
@pytest.mark.parametrize("case", MORE_CASES, ids=[c[0] for c in MORE_CASES])
def test_fp32_kernels_equal_scalar_on_unrolled_paths(case, kv):
    want, oracle = run(case, kv, "scalar")
    if kv == "f32":
        assert rel_err(want, oracle) <= 1e-5
    for tier in TIERS[1:]:
        got, _ = run(case, kv, tier)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), tier


# float32 caches whose cap is a multiple of B, as a model stores keys block-transposed
# (if_kv_layer.keys_t): plain arrays (decode, prefill, partial tiles), a rolled ring without
# sinks (the SIMD kernels read the transposed blocks in place, slots wrapping) and a rolled
# ring with sinks (every kernel gathers the rows back)
KEYS_T_CASES = [
    ("decode_row_keys_t", 9, 3, 64, 130, 1, 0, 0, 192),
    ("global_mid_prefill_keys_t", 9, 3, 64, 100, 37, 0, 0, 192),
    ("partial_tiles_keys_t", 8, 4, 8, 70, 21, 0, 0, 128),
    ("head6_keys_t", 4, 2, 6, 5, 20, 0, 0, 64),
    ("ring_no_sinks_keys_t", 4, 1, 32, 150, 9, 70, 0, 128),
    ("ring_sinks_keys_t", 9, 3, 64, 300, 20, 48, 4, 128),
]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", KEYS_T_CASES, ids=[c[0] for c in KEYS_T_CASES])
def test_block_transposed_keys_equal_row_keys_bit_for_bit(case, tier):
    _, nh, nkv, hs, pos0, n, window, sinks, cap = case
    q, k, v = case_data(case, seed=3)
    rows = np.full((n, nh * hs), np.nan, np.float32)
    _bench.attention(q, k, v, pos0, nh, nkv, hs, window, sinks, cap, 0, rows, "scalar")
    got = np.full_like(rows, np.nan)
    _bench.attention(q, k, v, pos0, nh, nkv, hs, window, sinks, cap, 0, got, tier, True)
    assert np.isfinite(rows).all()
    assert np.array_equal(got.view(np.uint32), rows.view(np.uint32))


def test_block_transposed_keys_need_a_float32_cache_of_whole_blocks():
    q, k, v = case_data(KEYS_T_CASES[0])
    out = np.zeros_like(q)
    with pytest.raises(ValueError, match="keys_t"):
        _bench.attention(q, k, v, 130, 9, 3, 64, 0, 0, 191, 0, out, None, True)
    with pytest.raises(ValueError, match="keys_t"):
        _bench.attention(q, k, v, 130, 9, 3, 64, 0, 0, 192, 1, out, None, True)


def test_window_changes_the_answer():
    """The window and the sinks matter (a test that ignored them would still pass above if the
    oracle ignored them too): dropping either changes the oracle's output."""
    _, nh, nkv, hs, pos0, n, window, sinks, cap = CASES[1]
    rng = np.random.default_rng(0)
    q = rng.normal(size=(n, nh * hs))
    k = rng.normal(size=(pos0 + n, nkv * hs))
    v = rng.normal(size=(pos0 + n, nkv * hs))
    base = reference.attention(q, k, v, pos0, nh, nkv, window, sinks)
    assert not np.allclose(base, reference.attention(q, k, v, pos0, nh, nkv, window, 0))
    assert not np.allclose(base, reference.attention(q, k, v, pos0, nh, nkv, 0, 0))


def test_bad_arguments_are_errors():
    q = np.zeros((2, 16), np.float32)
    kv = np.zeros((2, 8), np.float32)
    out = np.zeros((2, 16), np.float32)
    long = np.zeros((10, 8), np.float32)
    with pytest.raises(ValueError, match="cap"):  # ring too small for sinks + window + chunk
        _bench.attention(q, long, long, 8, 2, 1, 8, 4, 1, 5, 0, out)
    _bench.attention(q, long, long, 8, 2, 1, 8, 4, 1, 6, 0, out)  # just large enough
    with pytest.raises(ValueError, match="shapes"):
        _bench.attention(q, kv[:1], kv[:1], 0, 2, 1, 8, 0, 0, 2, 0, out)
    with pytest.raises(ValueError):  # kv type
        _bench.attention(q, kv, kv, 0, 2, 1, 8, 0, 0, 2, 7, out)
    with pytest.raises(ValueError):  # sinks without a window
        _bench.attention(q, kv, kv, 0, 2, 1, 8, 0, 2, 2, 0, out)


@pytest.mark.skipif(not MATRIX, reason="no emulated matrix-engine table in this build")
def test_matrix_engine_path_is_not_the_fp32_kernel():
    """amx_emulated's int8 path really runs (its quantized Q and P change the bits) and is
    deterministic."""
    case = CASES[0]
    a, _ = run(case, "int8", "amx_emulated")
    b, _ = run(case, "int8", "amx_emulated")
    s, _ = run(case, "int8", "scalar")
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert not np.array_equal(a.view(np.uint32), s.view(np.uint32))


# ---------------------------------------------------------------------------------------------
# SME2 under qemu-aarch64 (opt-in like tests/test_arm_emulated.py: ISAFORGE_ARM_TESTS=1, with
# the toolchain cached by scripts/arm_toolchain.sh)


def _sme_cpu(vl: int) -> str:
    props = ",".join(f"sme{v}={'on' if v <= vl else 'off'}" for v in (128, 256, 512, 1024, 2048))
    return f"max,{props},sme-default-vector-length={vl // 8}"


@pytest.fixture(scope="module")
def arm_driver(tmp_path_factory):
    import os
    import shlex
    import subprocess
    from pathlib import Path

    if os.environ.get("ISAFORGE_ARM_TESTS") != "1":
        pytest.skip("set ISAFORGE_ARM_TESTS=1 to run the SME2 attention under qemu-aarch64")
    env_sh = Path.home() / ".cache" / "isaforge" / "toolchain" / "env.sh"
    if not env_sh.is_file():
        pytest.fail(f"{env_sh} missing: run scripts/arm_toolchain.sh")
    env = dict(os.environ)
    for line in env_sh.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, val = line[len("export "):].partition("=")
            words = shlex.split(val)
            env[key] = words[0] if words else ""
    out = tmp_path_factory.mktemp("attn_arm")
    repo = Path(__file__).resolve().parents[1]
    r = subprocess.run(["bash", str(repo / "tests" / "native" / "build.sh"), str(out), "aarch64"],
                       env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return env["ISAFORGE_QEMU_AARCH64"], out / "attn_native_test-aarch64", out


def run_arm(arm_driver, tier: str, vl: int, case, kv: str, seed: int = 0) -> np.ndarray:
    import struct
    import subprocess

    qemu, drv, tmp = arm_driver
    _, nh, nkv, hs, pos0, n, window, sinks, cap = case
    rng = np.random.default_rng(seed)  # the same arrays as run()
    q = rng.normal(size=(n, nh * hs)).astype(np.float32)
    k = rng.normal(size=(pos0 + n, nkv * hs)).astype(np.float32)
    v = rng.normal(size=(pos0 + n, nkv * hs)).astype(np.float32)
    src, dst = tmp / "in.bin", tmp / "out.bin"
    src.write_bytes(struct.pack("<9Q", nh, nkv, hs, pos0, n, window, sinks, cap,
                                KV_CACHE_TYPES[kv]) + q.tobytes() + k.tobytes() + v.tobytes())
    r = subprocess.run([qemu, "-cpu", _sme_cpu(vl), str(drv), tier, str(src), str(dst)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    print(r.stdout.strip(), f"(SVL {vl})")
    return np.fromfile(dst, np.float32).reshape(n, nh * hs)


@pytest.mark.skipif(not MATRIX, reason="the reference bits come from x86's amx_emulated")
@pytest.mark.parametrize("vl", [128, 256, 512])
def test_sme2_attention_under_qemu_equals_emulated_amx_bits(arm_driver, vl):
    """SMOPA/USMOPA (any streaming vector length) give exactly the bits of the emulated AMX
    kernel: same contract, exact integer sums. So the SME2 path meets the same oracle bounds
    as test_attention_matches_float64_oracle's amx_emulated rows."""
    for case in CASES:
        want, oracle = run(case, "int8", "amx_emulated")
        got = run_arm(arm_driver, "sme2", vl, case, "int8")
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), case[0]
        assert rel_err(got, oracle) <= 1e-2


def test_aarch64_fp32_attention_equals_x86_bits(arm_driver):
    """The fp32 kernel on aarch64 (sme2 tier: scalar fp32 for f32/f16 caches) equals x86's."""
    for case in CASES[:3]:
        for kv in ("f32", "f16"):
            want, _ = run(case, kv, "scalar")
            got = run_arm(arm_driver, "sme2", 512, case, kv)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (case[0], kv)
