"""The 4-bit codebook kernels (q4_gemv, q4_gemm) and the activation rotation (hadamard): the
scalar kernels against a numpy oracle of the same arithmetic (int32 per group, then the float
chain in group order), and every other tier against the scalar kernels bit for bit on the Q8
shape grid restricted to the 4-bit group sizes (M x N x K x GS with tails), with codebooks at
the int8 range's ends."""

from __future__ import annotations

import numpy as np
import pytest

from blocks_helper import assert_guard_script_passes
from conftest import GUARDED_PRELUDE
from isaforge import _bench, _native

M_SET = [1, 2, 3, 15, 16, 17, 64, 129]
N_SET = [1, 3, 8, 17, 63, 64, 576]
GS_SET = [32, 64, 128, 256]


def k_set(gs: int) -> list[int]:
    return sorted({k for k in (gs, 3 * gs, 576, 1536) if k % gs == 0})


def tiers() -> list[str]:
    names = [t["name"] for t in _native.info()["tiers"] if t["supported"] and t["name"] != "scalar"]
    if "avx2" in [t["name"] for t in _native.info()["tiers"]]:  # x86 build: the AMX 4-bit GEMM
        names.append("amx_emulated")  # with tiles, expansion and readout emulated in C
    return names


TIERS = tiers()


def pack_nibbles(idx: np.ndarray) -> np.ndarray:
    """(N, K) indices 0..15 -> (N, K/2) bytes in the kernels' layout (per block of 32: byte j =
    value j low, value j + 16 high)."""
    N, K = idx.shape
    b = idx.reshape(N, K // 32, 2, 16).astype(np.uint8)
    return (b[:, :, 0] | (b[:, :, 1] << 4)).reshape(N, K // 2)


def make_case(rng, M, N, K, gs):
    cb = rng.integers(-127, 128, 16).astype(np.int8)
    cb[0], cb[15] = -127, 127
    idx = rng.integers(0, 16, (N, K))
    idx[0, :gs] = 15
    if K > gs:
        idx[-1, gs:2 * gs] = 0
    x = rng.integers(-127, 128, (M, K), dtype=np.int8)
    x[0, :gs] = -127
    if M > 1:
        x[1, :gs] = 0
    ng = K // gs
    ws = (rng.uniform(-1, 1, (N, ng)) * 10.0 ** rng.integers(-30, 6, (N, ng))).astype(np.float32)
    xs = (rng.uniform(0, 1, (M, ng)) * 10.0 ** rng.integers(-30, 6, (M, ng))).astype(np.float32)
    return x, xs, idx, pack_nibbles(idx), ws, cb


def run(tier, x, xs, w, ws, cb, N, gs, gemm=False):
    M, K = x.shape
    out = np.full((M, N), np.nan, np.float32)
    _bench.q4_gemm(x, xs, M, w, ws, cb, N, K, gs, out, tier, gemm)
    return out


def oracle(x, xs, idx, ws, cb, gs):
    """The contract in numpy: isum per group exactly, then acc += (isum * ws) * xs in float32,
    groups in order."""
    M, K = x.shape
    N = idx.shape[0]
    wv = cb[idx].astype(np.int64)
    isum = np.einsum("mgk,ngk->mng", x.astype(np.int64).reshape(M, -1, gs), wv.reshape(N, -1, gs))
    acc = np.zeros((M, N), np.float32)
    for g in range(K // gs):
        acc = acc + (isum[:, :, g].astype(np.float32) * ws[None, :, g]) * xs[:, None, g]
    return acc


def test_some_tier_besides_scalar_is_tested():
    assert TIERS, "no SIMD tier available on this machine"


def test_scalar_equals_oracle():
    rng = np.random.default_rng(1)
    for M, N, K, gs in [(1, 5, 64, 32), (3, 17, 192, 64), (2, 9, 256, 128), (1, 3, 512, 256)]:
        x, xs, idx, w, ws, cb = make_case(rng, M, N, K, gs)
        got = run("scalar", x, xs, w, ws, cb, N, gs)
        assert np.array_equal(got.view(np.uint32), oracle(x, xs, idx, ws, cb, gs).view(np.uint32))


def test_file_nibbles_used_unchanged():
    """Q4_0's codebook -8..7 over nibbles 0..15: the integer partial is sum x * (nibble - 8)."""
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 16, (4, 64))
    x = rng.integers(-127, 128, (1, 64), dtype=np.int8)
    cb = np.arange(-8, 8, dtype=np.int8)
    out = run("scalar", x, np.ones((1, 2), np.float32), pack_nibbles(idx),
              np.ones((4, 2), np.float32), cb, 4, 32)
    want = (x.astype(np.int64) * (idx - 8)).sum(axis=1)
    assert np.array_equal(out[0], want.astype(np.float32))


@pytest.mark.parametrize("gs", GS_SET)
def test_q4_gemv_gemm_equal_scalar_bits(gs):
    rng = np.random.default_rng(gs)
    failures = []
    for K in k_set(gs):
        for N in N_SET:
            for M in M_SET:
                x, xs, _idx, w, ws, cb = make_case(rng, M, N, K, gs)
                want = run("scalar", x, xs, w, ws, cb, N, gs).view(np.uint32)
                for tier in TIERS:
                    got = run(tier, x, xs, w, ws, cb, N, gs).view(np.uint32)
                    if not np.array_equal(got, want):
                        failures.append((tier, M, N, K, gs))
    assert not failures, failures[:10]


# codebooks of each product mode of the x86 kernels (q4_avx2_common.h): a span over 127 (the
# sign trick), CQ4's +-63 (offset, 126), a span of 63 (offset2) and Q4_0's -8..7 (linear)
MODE_CBS = {
    "sign": None,  # make_case's -127..127
    "offset": np.array([-63, -55, -46, -38, -30, -22, -14, -5, 5, 14, 22, 30, 38, 46, 55, 63]),
    "offset2": np.array([-31, -27, -23, -19, -15, -11, -7, -3, 1, 5, 9, 13, 17, 21, 25, 32]),
    "linear": np.arange(-8, 8),
}


@pytest.mark.parametrize("mode", list(MODE_CBS))
@pytest.mark.parametrize("gs", GS_SET)
def test_q4_gemm_at_m1_and_every_mode_equal_scalar_bits(mode, gs):
    """The GEMM at M = 1 over its packed copy (a decode_packed tier's decode path: AVX2's
    row-interleaved tiles, i8mm's pairs) and at M > 1, for each product mode's codebook: every
    tier = scalar, bit for bit, with N tails (partial last tiles)."""
    rng = np.random.default_rng(100 + gs)
    failures = []
    for K in k_set(gs):
        for N in (1, 8, 9, 17, 64, 576):
            for M in (1, 2, 17):
                x, xs, _idx, w, ws, cb = make_case(rng, M, N, K, gs)
                if MODE_CBS[mode] is not None:
                    cb = MODE_CBS[mode].astype(np.int8)
                want = run("scalar", x, xs, w, ws, cb, N, gs).view(np.uint32)
                for tier in TIERS:
                    got = run(tier, x, xs, w, ws, cb, N, gs, gemm=True).view(np.uint32)
                    if not np.array_equal(got, want):
                        failures.append((tier, M, N, K, gs))
    assert not failures, failures[:10]


@pytest.mark.parametrize(("gs", "K"), [(32, 4800), (96, 4800), (160, 4800), (256, 4864)])
def test_q4_gemm_long_rows_equal_scalar_bits(gs, K):
    """Rows longer than the AMX 4-bit GEMM's 2048-value expansion chunk (two whole chunks and a
    partial one; each chunk's accumulators go through out and the next chunk continues their
    float chains), group sizes with a tail window past 64 bytes (96, 160) or not dividing 2048,
    and M / N tails: every tier (amx_emulated on x86) = scalar, bit for bit."""
    rng = np.random.default_rng(K + gs)
    failures = []
    for N in (17, 40):
        for M in (2, 17, 33):
            x, xs, _idx, w, ws, cb = make_case(rng, M, N, K, gs)
            want = run("scalar", x, xs, w, ws, cb, N, gs).view(np.uint32)
            for tier in TIERS:
                if not np.array_equal(run(tier, x, xs, w, ws, cb, N, gs).view(np.uint32), want):
                    failures.append((tier, M, N, K, gs))
    assert not failures, failures


def hadamard_ref(x, signs, kpad, gs):
    """float64 normalized-free Walsh-Hadamard of the padded, sign-flipped row (the oracle)."""
    y = np.zeros(kpad)
    y[: len(x)] = x
    if signs is None:
        return y
    y = y * signs
    H = np.array([[1.0]])
    while H.shape[0] < gs:
        H = np.block([[H, H], [H, -H]])
    return (y.reshape(-1, gs) @ H.T).reshape(-1)


@pytest.mark.parametrize("gs", [8, 16, 32, 64, 128, 256])
def test_hadamard_equals_scalar_and_float64(gs):
    rng = np.random.default_rng(gs)
    for K in sorted({gs, 3 * gs - 5, 576 - 576 % gs, 172}):
        if K <= 0:
            continue
        kpad = -(-K // gs) * gs
        x = rng.normal(size=K).astype(np.float32)
        signs = rng.choice([-1.0, 1.0], kpad).astype(np.float32)
        for sg in (signs, None):
            want = np.full(kpad, np.nan, np.float32)
            _bench.hadamard(x, sg, kpad, gs, want, "scalar")
            ref = hadamard_ref(x.astype(np.float64), sg, kpad, gs)
            # log2(gs) rounding steps of values below sqrt(gs) * max|x|
            bound = np.log2(gs) * np.sqrt(gs) * np.abs(x).max() * 2.0 ** -23
            assert np.abs(want - ref).max() <= bound, (gs, K)
            for tier in TIERS:
                got = np.full(kpad, np.nan, np.float32)
                _bench.hadamard(x, sg, kpad, gs, got, tier)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (tier, gs, K)


def test_bad_shapes_refused():
    x = np.zeros((1, 64), np.int8)
    with pytest.raises(ValueError, match="bad shape"):
        _bench.q4_gemm(x, np.ones(4, np.float32), 1, np.zeros(32, np.uint8), np.ones(4, np.float32),
                       np.zeros(16, np.int8), 1, 64, 16, np.zeros(1, np.float32), "scalar")
    with pytest.raises(ValueError, match="too small"):
        _bench.q4_gemm(x, np.ones(2, np.float32), 1, np.zeros(31, np.uint8),
                       np.ones(2, np.float32), np.zeros(16, np.int8), 1, 64, 32,
                       np.zeros(1, np.float32), "scalar")


GUARD_SCRIPT = GUARDED_PRELUDE + '''
rng = np.random.default_rng(0)
for (M, N, K, gs) in [(1, 17, 64, 32), (3, 63, 192, 64), (17, 9, 384, 128), (1, 1, 256, 256),
                      (2, 3, 96, 32)]:
    ng = K // gs
    x = guarded((M, K), np.int8); x[:] = rng.integers(-127, 128, (M, K))
    w = guarded((N, K // 2), np.uint8); w[:] = rng.integers(0, 256, (N, K // 2))
    xs = guarded((M, ng), np.float32); xs[:] = rng.uniform(0, 1, (M, ng))
    ws = guarded((N, ng), np.float32); ws[:] = rng.uniform(-1, 1, (N, ng))
    cb = guarded((16,), np.int8); cb[:] = rng.integers(-127, 128, 16)
    ref = np.empty((M, N), np.float32)
    _bench.q4_gemm(x, xs, M, w, ws, cb, N, K, gs, ref, "scalar")
    for tier in sys.argv[1].split(","):
        out = guarded((M, N), np.float32)
        _bench.q4_gemm(x, xs, M, w, ws, cb, N, K, gs, out, tier)
        assert np.array_equal(out.view(np.uint32), ref.view(np.uint32)), (tier, M, N, K, gs)
        xf = guarded((K - 3,), np.float32); xf[:] = rng.normal(size=K - 3)
        sg = guarded((K,), np.float32); sg[:] = 1.0
        y = guarded((K,), np.float32)
        _bench.hadamard(xf, sg if gs & (gs - 1) == 0 else None, K, gs, y, tier)
print("ok")
'''


def test_no_out_of_bounds_reads_at_guard_pages():
    assert_guard_script_passes(GUARD_SCRIPT, TIERS)


# ---- the AVX2 kernels' product modes (csrc/kernels/q4_avx2_common.h), each chosen from the
# codebook: sign trick (span max - min > 127), offset trick with a lookup of cb - min
# (span <= 127; span <= 63 adds two int16 products before widening), and the raw nibbles
# (cb[i] = cb[0] + i, GGUF Q4_0). Each kind below lands in one mode, at its bounds.
IQ4_NL = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]


def _spread(rng, lo, hi):
    """16 values in [lo, hi] with both ends present (unsorted, repeats allowed)."""
    cb = rng.integers(lo, hi + 1, 16)
    cb[rng.permutation(16)[:2]] = lo, hi
    return cb.astype(np.int8)


CODEBOOKS = {
    "wide_span254": lambda rng: _spread(rng, -127, 127),          # sign
    "wide_span128": lambda rng: _spread(rng, -64, 64),            # sign (one past offset)
    "wide_span129": lambda rng: _spread(rng, -64, 65),            # sign (u = 129 would saturate)
    "iq4_nl": lambda rng: np.array(IQ4_NL, np.int8),              # sign
    "narrow_span127": lambda rng: _spread(rng, -127, 0),          # offset
    "narrow_span127_pos": lambda rng: _spread(rng, 0, 127),       # offset, min 0
    "narrow_span64": lambda rng: _spread(rng, -40, 24),           # offset (one past offset2)
    "narrow_span65": lambda rng: _spread(rng, -33, 32),           # offset (offset2 would saturate)
    "narrow_span63": lambda rng: _spread(rng, -31, 32),           # offset2
    "cq4_narrow": lambda rng: np.rint(np.linspace(-31, 31, 16)).astype(np.int8),  # offset2
    "q4_0": lambda rng: np.arange(-8, 8, dtype=np.int8),          # raw nibbles
    "linear_top": lambda rng: np.arange(112, 128, dtype=np.int8),  # raw nibbles, min 112
    "linear_bottom": lambda rng: np.arange(-127, -111, dtype=np.int8),
    "linear_but_one": lambda rng: np.array([*range(-8, 7), 8], np.int8),  # not linear: offset2
}


def mode_case(rng, M, N, K, gs, cb):
    """Random operands plus each mode's worst cases: a group of the largest u = cb - min (and
    of the largest |cb|) against x = -128, and one of the smallest against x = 127."""
    idx = rng.integers(0, 16, (N, K))
    idx[0, :gs] = int(np.argmax(cb))
    idx[-1, -gs:] = int(np.argmin(cb))
    if N > 2:
        idx[1, :gs] = int(np.argmax(np.abs(cb.astype(int))))
    x = rng.integers(-128, 128, (M, K), dtype=np.int8)
    x[0, :gs] = -128
    x[0, -gs:] = 127
    if M > 1:
        x[1, :] = -128
    ng = K // gs
    ws = (rng.uniform(-1, 1, (N, ng)) * 10.0 ** rng.integers(-20, 6, (N, ng))).astype(np.float32)
    xs = (rng.uniform(0, 1, (M, ng)) * 10.0 ** rng.integers(-20, 6, (M, ng))).astype(np.float32)
    return x, xs, idx, pack_nibbles(idx), ws


MODE_SHAPES = [(M, N, K, gs) for gs in (32, 64, 96, 128, 256, 512)
               for K in sorted({gs, 3 * gs, 1536 if 1536 % gs == 0 else 2 * gs})
               for N in (1, 8, 17, 63) for M in (1, 2, 17)]
MODE_SHAPES += [(1, 3, 96, 32), (2, 9, 608, 32), (3, 9, 224, 32),  # K % 64 == 32, odd groups
                (1, 9, 32 * 520, 32), (17, 9, 32 * 70, 32)]  # more groups than one pass


@pytest.mark.parametrize("kind", sorted(CODEBOOKS))
def test_q4_product_modes_equal_oracle_and_scalar_bits(kind):
    """Every tier = scalar = the numpy oracle bit for bit, per codebook kind, on a grid with
    tails in N and K, odd group counts, group sizes 32..512 and the saturation worst cases."""
    rng = np.random.default_rng(sum(map(ord, kind)))
    failures = []
    for M, N, K, gs in MODE_SHAPES:
        cb = CODEBOOKS[kind](rng)
        x, xs, idx, w, ws = mode_case(rng, M, N, K, gs, cb)
        want = oracle(x, xs, idx, ws, cb, gs).view(np.uint32)
        if M * N * K <= 1 << 18 and not np.array_equal(run("scalar", x, xs, w, ws, cb, N, gs)
                                                        .view(np.uint32), want):
            failures.append(("scalar", M, N, K, gs))
        for tier in TIERS:
            if not np.array_equal(run(tier, x, xs, w, ws, cb, N, gs).view(np.uint32), want):
                failures.append((tier, M, N, K, gs))
    assert not failures, failures[:10]


@pytest.mark.parametrize("gs", [32, 64])
def test_q4_gemv_long_rows_equal_oracle_across_passes(gs):
    """Rows of 515 groups: more than the AVX2 GEMV's 512 groups per pass (a second pass
    continues every row's float chain from out) and an odd group count at GS 32, over full
    8-row tiles and a tail (N = 17), for the codebooks people run (CQ4 +-63 as --quant cq4
    writes it, Q4_0, the +-127 sign-trick one, a span-63 one) at the saturation worst cases."""
    from isaforge.quant.cq4 import NARROW_AMAX, codebook

    rng = np.random.default_rng(gs + 515)
    cbs = {"cq4": codebook(gs, NARROW_AMAX)[0], "wide": codebook(gs, 127)[0],
           "q4_0": CODEBOOKS["q4_0"](rng), "span63": CODEBOOKS["narrow_span63"](rng)}
    failures = []
    for name, cb in cbs.items():
        x, xs, idx, w, ws = mode_case(rng, 1, 17, 515 * gs, gs, cb)
        want = oracle(x, xs, idx, ws, cb, gs).view(np.uint32)
        for tier in ["scalar", *TIERS]:
            if not np.array_equal(run(tier, x, xs, w, ws, cb, 17, gs).view(np.uint32), want):
                failures.append((name, tier))
    assert not failures, failures


MODE_GUARD_SCRIPT = GUARDED_PRELUDE + '''
rng = np.random.default_rng(1)
cbs = [np.arange(-8, 8), np.linspace(-31, 31, 16).round(), np.arange(-127, 1, 8)[:16],
       np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113])]
for (M, N, K, gs) in [(1, 17, 64, 32), (1, 9, 96, 32), (3, 63, 192, 64), (17, 9, 384, 128),
                      (1, 1, 256, 256), (2, 3, 96, 32), (1, 5, 480, 96), (2, 3, 1024, 512)]:
    ng = K // gs
    for c in cbs:
        x = guarded((M, K), np.int8); x[:] = rng.integers(-128, 128, (M, K))
        w = guarded((N, K // 2), np.uint8); w[:] = rng.integers(0, 256, (N, K // 2))
        xs = guarded((M, ng), np.float32); xs[:] = rng.uniform(0, 1, (M, ng))
        ws = guarded((N, ng), np.float32); ws[:] = rng.uniform(-1, 1, (N, ng))
        cb = guarded((16,), np.int8); cb[:] = c
        ref = np.empty((M, N), np.float32)
        _bench.q4_gemm(x, xs, M, w, ws, cb, N, K, gs, ref, "scalar")
        for tier in sys.argv[1].split(","):
            out = guarded((M, N), np.float32)
            _bench.q4_gemm(x, xs, M, w, ws, cb, N, K, gs, out, tier)
            assert np.array_equal(out.view(np.uint32), ref.view(np.uint32)), (tier, M, N, K, gs)
print("ok")
'''


def test_product_modes_read_nothing_past_their_buffers():
    """Each mode's loads (32-byte weight loads, the activation sums, the tails) at guard pages."""
    assert_guard_script_passes(MODE_GUARD_SCRIPT, TIERS)
