"""The C core against the numpy reference model (src/isaforge/reference.py).

Kernels: Q8 activation quantization and Q8 GEMV/GEMM equal the reference bit for bit.
Forward pass: fp32 within a stated bound of the float64 reference; Q8 within a bound of the
float32 reference (the non-matmul float ops may round differently in numpy), with the
integer parts checked exactly at kernel level."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import isaforge
from isaforge import _bench, _native, reference
from isaforge.formats.llama2c import read_llama2c
from isaforge.runtime.engine import Engine
from isaforge.types import Q8Tensor


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def random_q8(rng, rows, cols, gs) -> Q8Tensor:
    q = rng.integers(-127, 128, size=(rows, cols), dtype=np.int8)
    q[0, :gs] = 127  # an all +127 group
    if rows > 1:
        q[1, :gs] = 0  # an all-zero group
    s = rng.uniform(1e-4, 1e-1, size=(rows, cols // gs)).astype(np.float32)
    return Q8Tensor(q, s, gs)


@pytest.mark.parametrize("gs", [1, 2, 4, 8, 32, 64])
def test_quantize_activations_equal_reference(gs):
    rng = np.random.default_rng(gs)
    x = (rng.normal(size=256 * gs // gs * 4) * 3).astype(np.float32)
    x[:gs] = 0.0  # zero group: scale 0, q 0
    x[gs: 2 * gs] = np.float32(127.0)
    if gs >= 2:
        x[2 * gs] = np.float32(2.5) * (np.abs(x[2 * gs: 3 * gs]).max() / np.float32(127))
    q = np.empty(x.size, np.int8)
    s = np.empty(x.size // gs, np.float32)
    _bench.quantize_q8(x, gs, q, s)
    rq, rs = reference.quantize_activations(x, gs)
    assert np.array_equal(q, rq)
    assert np.array_equal(bits(s), bits(rs))


@pytest.mark.parametrize("M", [1, 2, 3, 17])
@pytest.mark.parametrize("N,K,gs", [(1, 4, 4), (3, 12, 4), (17, 64, 8), (64, 576, 32),
                                    (33, 1536, 64), (5, 256, 256)])
def test_q8_gemm_equals_reference_bitwise(M, N, K, gs):
    rng = np.random.default_rng(M * 1000 + N + K)
    w = random_q8(rng, N, K, gs)
    xq = rng.integers(-127, 128, size=(M, K), dtype=np.int8)
    xs = rng.uniform(1e-3, 1.0, size=(M, K // gs)).astype(np.float32)
    out = np.empty((M, N), np.float32)
    _bench.q8_gemm(xq, xs, M, w.q, w.s, N, K, gs, out)
    for m in range(M):
        ref = reference.q8_matmul(xq[m], xs[m], w)
        assert np.array_equal(bits(out[m]), bits(ref)), m


def test_q8_gemm_rejects_bad_shapes():
    z = np.zeros(16, np.int8)
    with pytest.raises(ValueError):
        _bench.q8_gemm(z, np.zeros(4, np.float32), 1, z, np.zeros(4, np.float32), 1, 16, 5,
                        np.zeros(1, np.float32))
    with pytest.raises(ValueError):  # buffers shorter than the shapes claim
        _bench.q8_gemm(z, np.zeros(4, np.float32), 1, z, np.zeros(4, np.float32), 4, 16, 4,
                        np.zeros(1, np.float32))


def write_v0(path, dim, hidden, layers, heads, kv_heads, vocab, seq, shared, seed=0):
    """A random llama2.c v0 file (run.c's layout) for shapes stories260K does not have."""
    rng = np.random.default_rng(seed)
    hs = dim // heads
    kv = hs * kv_heads
    sizes = [vocab * dim, layers * dim, layers * dim * dim, layers * kv * dim,
             layers * kv * dim, layers * dim * dim, layers * dim, layers * hidden * dim,
             layers * dim * hidden, layers * hidden * dim, dim, seq * hs]
    if not shared:
        sizes.append(vocab * dim)
    with open(path, "wb") as f:
        f.write(struct.pack("<7i", dim, hidden, layers, heads, kv_heads,
                            vocab if shared else -vocab, seq))
        for i, n in enumerate(sizes):
            norm = i in (1, 6, 10)
            a = rng.uniform(0.5, 1.5, n) if norm else rng.normal(0, 0.2, n)
            f.write(a.astype("<f4").tobytes())


def rel_err(a, b) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))


def test_fp32_forward_matches_float64_reference(stories):
    m = read_llama2c(stories / "stories260K.bin")
    eng, ref = Engine(m, threads=2), reference.Reference(m.config, m.weights)
    tokens = [1, 403, 407, 261, 378, 30, 100, 200, 300, 5, 9, 44]
    got = eng.prefill(tokens, 0, all_logits=True)
    err = rel_err(got, ref.logits(tokens))
    print(f"fp32 C vs float64 reference: max error / max |logit| = {err:.2e}")
    assert err < 1e-5


def test_gqa_unshared_classifier_model(tmp_path):
    p = tmp_path / "gqa.bin"
    write_v0(p, dim=48, hidden=80, layers=2, heads=6, kv_heads=2, vocab=97, seq=40, shared=False)
    m = read_llama2c(p)
    assert not m.config.shared_classifier and m.config.n_kv_heads == 2
    eng, ref = Engine(m, threads=2), reference.Reference(m.config, m.weights)
    tokens = list(range(3, 40, 2))
    assert rel_err(eng.prefill(tokens, 0, all_logits=True), ref.logits(tokens)) < 1e-5


def test_q8_forward_matches_float32_reference(stories_q8):
    """The integer parts are exact (kernel tests above); over a whole forward pass numpy's
    float order in the non-matmul ops differs, and an activation that lands on the other side
    of a rounding boundary flips one int8 step, so the bound here is loose: measured worst
    1.4e-2 of the max |logit| with group size 4, median ~4e-3."""
    m = read_llama2c(stories_q8)
    assert m.weights.group_size == 4
    eng = Engine(m, threads=2)
    ref = reference.Reference(m.config, m.weights, dtype=np.float32)
    rng = np.random.default_rng(0)
    tokens = [1, *rng.integers(3, 512, 60).tolist()]
    got, want = eng.prefill(tokens, 0, all_logits=True), ref.logits(tokens).astype(np.float64)
    errs = np.max(np.abs(got - want), axis=1) / np.max(np.abs(want), axis=1)
    print(f"Q8 C vs float32 reference: worst {errs.max():.2e}, median {np.median(errs):.2e}")
    assert errs.max() < 3e-2 and np.median(errs) < 1e-2
    assert np.mean(got.argmax(1) == want.argmax(1)) >= 0.9


@pytest.mark.parametrize("which", ["fp32", "q8"])
def test_threads_and_prefill_do_not_change_a_bit(stories, stories_q8, which):
    path = stories / "stories260K.bin" if which == "fp32" else stories_q8
    m = read_llama2c(path)
    tokens = [1, 403, 407, 261, 378, 30, 100, 7, 8]
    one = Engine(m, threads=1)
    stepwise = np.stack([one.forward(t, pos).copy() for pos, t in enumerate(tokens)])
    batched = Engine(m, threads=2).prefill(tokens, 0, all_logits=True)
    assert np.array_equal(bits(stepwise), bits(batched))


def test_engine_errors_are_exceptions(stories):
    m = isaforge.load(stories / "stories260K.bin", stories / "tok512.bin")
    with pytest.raises(ValueError, match="out of range"):
        m.engine.forward(512, 0)
    with pytest.raises(ValueError, match="context"):
        m.engine.forward(1, 512)
    with pytest.raises(ValueError):
        m.logits([])
    with pytest.raises(ValueError):
        m.logits([1] * 513)
    with pytest.raises(ValueError, match="temperature"):
        m.generate("Once", temperature=-1)
    with pytest.raises(ValueError, match="top-p"):
        m.generate("Once", top_p=2)
    with pytest.raises(ValueError, match="unknown kernel tier"):
        isaforge.load(stories / "stories260K.bin", stories / "tok512.bin", kernel="nope")


def test_python_api_generate_and_stream(stories):
    m = isaforge.load(stories / "stories260K.bin", stories / "tok512.bin", threads=1)
    golden = (stories / "golden_t0_n200.txt").read_text()
    text = m.generate("Once upon a time", max_new_tokens=196, temperature=0)
    assert "Once upon a time" + text == golden.rstrip("\n")[: len("Once upon a time" + text)]
    pieces = list(m.generate("Once upon a time", max_new_tokens=50, temperature=1.0, seed=3,
                             stream=True))
    again = m.generate("Once upon a time", max_new_tokens=50, temperature=1.0, seed=3)
    assert "".join(pieces) == again and len(pieces) > 1
    assert m.logits([1, 403]).shape == (2, 512)


def test_the_core_exports_its_constants_and_python_mirrors_none():
    """The layer matrices' order, the dtypes and the KV cache types come from the C module
    (isaforge.h), and the readers, writers and the engine use those values."""
    from conftest import MATS
    from isaforge import types
    from isaforge.formats import isaf, llama2c
    from isaforge.runtime import engine

    assert _native.LAYER_MATRICES == MATS  # llama2.c's order, as the files store it
    assert types.LAYER_MATRICES is _native.LAYER_MATRICES
    assert isaf.MATS is _native.LAYER_MATRICES and llama2c._MATS is _native.LAYER_MATRICES
    assert engine.KV_CACHE_TYPES == {"f32": 0, "f16": 1, "int8": 2} == _native.KV_CACHE_TYPES
    assert (engine.F32, engine.Q8) == (_native.F32, _native.Q8) == (0, 1)


def test_the_config_crosses_by_name():
    """The core takes the model config as named fields (the names it exports, CONFIG_FIELDS),
    and an unknown, missing or non-positive field is an error that names it."""
    from isaforge.runtime.engine import _config_fields
    from isaforge.types import Config

    c = Config(64, 128, 1, 4, 2, 32, 16, sliding_window=8, n_sinks=2)
    d = _config_fields(c)
    assert tuple(d) == _native.CONFIG_FIELDS and d["sliding_window"] == 8 and d["n_sinks"] == 2
    assert _native.kv_cache_bytes(d, 0, 0) > 0
    del d["n_sinks"], d["sliding_window"]  # optional: 0
    assert _native.kv_cache_bytes(d, 0, 0) == 2 * 4 * 16 * 32
    with pytest.raises(ValueError, match="unknown field 'n_kv'"):
        _native.kv_cache_bytes(dict(d, n_kv=2), 0, 0)
    with pytest.raises(ValueError, match="missing field 'seq_len'"):
        _native.kv_cache_bytes({k: v for k, v in d.items() if k != "seq_len"}, 0, 0)
    with pytest.raises(ValueError, match="dim must be positive"):
        _native.kv_cache_bytes(dict(d, dim=0), 0, 0)
    with pytest.raises(TypeError, match="dict"):
        _native.kv_cache_bytes(tuple(d.values()), 0, 0)


def test_row_major_matrices_go_one_by_one_while_packing(stories_q8, monkeypatch):
    """The two copies of the weights never coexist: where decode reads the packed copy, each
    in-memory row-major matrix is freed right after it is packed, before the next one is
    (the C core calls back per matrix; weakrefs show which arrays are gone at each call)."""
    import weakref

    from isaforge.runtime import engine as engine_mod
    from isaforge.types import LAYER_MATRICES

    tiers = [t for t in ("avx2", "avx_vnni", "amx") if any(
        i["name"] == t and i["supported"] for i in _native.info()["tiers"])]
    if not tiers:
        pytest.skip("no tier here decodes from the packed copy")
    m = read_llama2c(stories_q8)
    w = m.weights
    for name in LAYER_MATRICES:  # in-memory copies, as a requantized GGUF's
        getattr(w, name)[:] = [Q8Tensor(t.q.copy(), t.s, t.group_size) for t in getattr(w, name)]
    w.wcls = Q8Tensor(w.wcls.q.copy(), w.wcls.s, w.wcls.group_size)
    refs = [weakref.ref(getattr(w, name)[layer].q) for layer in range(m.config.n_layers)
            for name in LAYER_MATRICES] + [weakref.ref(w.wcls.q)]
    seen = []
    make = engine_mod._releaser

    def spying(*args):
        released = make(*args)

        def wrapped(idx):
            released(idx)
            seen.append((idx, [r() is None for r in refs]))
        return wrapped

    monkeypatch.setattr(engine_mod, "_releaser", spying)
    eng = Engine(m, threads=1, kernel=tiers[0])
    assert not eng._m.reads_rowmajor
    assert [i for i, _ in seen] == list(range(len(refs)))
    for idx, gone in seen:  # freed: this one and all before it; alive: all after it
        assert gone == [j <= idx for j in range(len(refs))], idx
    scalar = Engine(read_llama2c(stories_q8), threads=1, kernel="scalar")
    assert np.array_equal(bits(eng.forward(403, 0)), bits(scalar.forward(403, 0)))



def test_released_4bit_matrices_are_read_from_the_packed_copy(tmp_path):
    """Where 4-bit decode reads the GEMM's packed copy (i8mm's decode_packed: an Arm tier, so
    here _releaser is driven as the core drives it, with a stand-in for the C model's unpack):
    each in-memory 4-bit matrix's nibbles go as soon as the core says the matrix is packed
    (the array is freed), the model then holds a _PackedQ4 whose nibbles are the C model's
    unpack and whose scales, codebook and signs are the original ones; a file-backed (mmapped)
    matrix stays as it is; and the released matrices still run (an engine made from them)."""
    import weakref
    from dataclasses import replace

    from isaforge.formats.gguf import read_gguf
    from isaforge.quant.q4 import Q4Tensor
    from isaforge.runtime import engine as engine_mod
    from isaforge.types import LAYER_MATRICES
    from test_gguf import float_tensors, write_gguf

    t = float_tensors()
    types = {n: "Q4_0" for n in t if n.startswith("blk.") and "norm" not in n}
    m = read_gguf(write_gguf(tmp_path / "q4_0.gguf", t, types=types), "cq4")
    w = m.weights
    for name in LAYER_MATRICES:  # in-memory nibbles (a requantized model's)
        getattr(w, name)[:] = [replace(x, nibbles=x.nibbles.copy()) for x in getattr(w, name)]
    mapped = tmp_path / "wo0.bin"  # one file-backed matrix: layer 0's wo
    w.wo[0].nibbles.tofile(mapped)
    w.wo[0] = replace(w.wo[0], nibbles=np.memmap(mapped, np.uint8, "r",
                                                 shape=w.wo[0].nibbles.shape))
    ref = Engine(m, threads=1, kernel="scalar").prefill([1, 5, 9, 3], all_logits=True).copy()
    n = len(LAYER_MATRICES)
    def at(idx):
        layer, i = divmod(idx, n)
        return getattr(w, LAYER_MATRICES[i])[layer]

    q4 = range(m.config.n_layers * n)
    assert all(type(at(idx)) is Q4Tensor for idx in q4)
    want = {idx: at(idx).nibbles.copy() for idx in q4}
    old = {idx: (at(idx).s, at(idx).codebook, at(idx).signs) for idx in q4}

    class Unpacks:  # the C model's unpack(idx): the matrix's nibbles from its packed copy
        def unpack(self, idx, nbytes=0):
            assert nbytes in (0, want[idx].size)
            return want[idx].tobytes()

    mats = [engine_mod._matrix_spec(at(idx)) for idx in q4] + [engine_mod._matrix_spec(w.wcls)]
    released = engine_mod._releaser(w, mats, [Unpacks()], [])
    for idx in q4:
        ref_nib = weakref.ref(at(idx).nibbles)
        released(idx)
        x = at(idx)
        if idx == LAYER_MATRICES.index("wo"):  # layer 0's wo
            assert type(x) is Q4Tensor and isinstance(x.nibbles, np.memmap)
            continue
        assert type(x) is engine_mod._PackedQ4 and ref_nib() is None, idx
        assert np.array_equal(x.nibbles, want[idx]) and x.kpad == want[idx].shape[1] * 2
        assert (x.s, x.codebook, x.signs) == old[idx] and x.shape == (x.nibbles.shape[0], x.cols)
    got = Engine(m, threads=1, kernel="scalar").prefill([1, 5, 9, 3], all_logits=True)
    assert np.array_equal(bits(got), bits(ref))

def test_packed_bytes_are_what_the_model_packed(stories, stories_q8):
    """An engine reports the bytes it packed at load for its GEMM's layout; packed_bytes()
    counts the same from the config without allocating; a kernel without a layout (scalar)
    and an fp32 model pack nothing."""
    from isaforge.runtime.engine import packed_bytes

    m = read_llama2c(stories_q8)
    for tier in [t["name"] for t in _native.info()["tiers"] if t["supported"]]:
        eng = Engine(m, threads=1, kernel=tier)
        assert eng.packed_bytes == packed_bytes(m.config, m.weights.group_size, tier), tier
        assert (eng.packed_bytes > 0) == eng.kernels["prefill"]["q8_gemm_packs"], tier
    assert Engine(m, threads=1, kernel="scalar").packed_bytes == 0
    assert Engine(read_llama2c(stories / "stories260K.bin"), threads=1).packed_bytes == 0


def test_one_resident_copy_decode_reads_the_packed_layout(stories_q8):
    """Where a tier's GEMM declares decode_packed (AVX2, AVX-VNNI, AMX), decode
    reads the packed copy too: the engine lets the in-memory row-major int8 go (reads_rowmajor
    False) and the model's Q8 matrices are then unpacked from the packed copy on access, equal
    to the originals; every tier's decode and prefill stay bit-identical to scalar's.
    File-backed (mmapped) ones stay."""
    from isaforge.types import LAYER_MATRICES

    m = read_llama2c(stories_q8)
    w = m.weights
    file_backed = Engine(m, threads=1)  # mmapped v2 weights: nothing swapped
    assert all(type(t) is Q8Tensor for t in w.wq) and type(w.wcls) is Q8Tensor
    del file_backed
    for name in LAYER_MATRICES:  # in-memory copies, as a requantized GGUF's
        getattr(w, name)[:] = [Q8Tensor(t.q.copy(), t.s, t.group_size) for t in getattr(w, name)]
    w.wcls = Q8Tensor(w.wcls.q.copy(), w.wcls.s, w.wcls.group_size)
    want = {name: [t.q.copy() for t in getattr(w, name)] for name in LAYER_MATRICES}
    want["wcls"] = [w.wcls.q.copy()]
    tokens = [1, 403, 407, 261, 378, 30, 100, 7, 8]
    scalar = Engine(read_llama2c(stories_q8), threads=1, kernel="scalar")
    ref = np.stack([scalar.forward(t, pos).copy() for pos, t in enumerate(tokens)])
    for tier in [t["name"] for t in _native.info()["tiers"] if t["supported"]]:
        for threads in (1, 2):
            eng = Engine(m, threads=threads, kernel=tier)
            got = np.stack([eng.forward(t, pos).copy() for pos, t in enumerate(tokens)])
            assert np.array_equal(bits(got), bits(ref)), (tier, threads)
            batched = eng.prefill(tokens, 0, all_logits=True)
            assert np.array_equal(bits(batched), bits(ref)), (tier, threads)
            if tier in ("avx2", "avx_vnni", "amx"):
                assert not eng._m.reads_rowmajor, tier
                assert type(w.wq[0]) is not Q8Tensor and type(w.wcls) is not Q8Tensor
            for name, qs in want.items():
                mats = getattr(w, name) if name != "wcls" else [w.wcls]
                assert all(np.array_equal(t.q, q) for t, q in zip(mats, qs, strict=True)), name
