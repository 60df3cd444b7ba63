"""Whole models whose Q4_K / Q5_K / Q6_K matrices run in place (`--quant auto`): tiny GGUF files
(random K-quant blocks written with the gguf package, mixed with Q8_0 / Q5_0 / F32 matrices; and
a Q4_K_M and a Q5_K_M written by llama.cpp's quantizer through llama-cpp-python), and Gemma 3
270M's Q4_K_M.
Identity across tiers, threads and prefill chunking; the K-quant matmul equal to reference.py's
model of it bit for bit; logits within a stated bound of the float64 reference on the file's
dequantized weights; the token table's rows equal to gguf's dequantization; clear errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import cli
from isaforge import _bench, _native
from isaforge.formats import with_context
from isaforge.formats.gguf import read_gguf
from isaforge.quant.ggml import LEGACY_NATIVE, KQTensor
from isaforge.reference import Reference, kq_matmul, quantize_k8
from isaforge.runtime.engine import Engine, select_kernel
from isaforge.types import Config, Weights
from test_gguf import LAYER, write_gguf

SUPPORTED = [t["name"] for t in _native.info()["tiers"] if t["supported"]]
T = gguf.GGMLQuantizationType
C = Config(dim=256, hidden_dim=512, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=40,
           seq_len=64, shared_classifier=True, rope_theta=5000.0,
           norm_eps=float(np.float32(1e-5)))
KV = {"llama.embedding_length": C.dim, "llama.feed_forward_length": C.hidden_dim,
      "llama.context_length": C.seq_len, "llama.rope.dimension_count": C.head_size}
TOKS = [3, 17, 5, 38, 0, 22, 9, 9, 31, 2, 14]
SHAPES = {"attn_q": (C.dim, C.dim), "attn_k": (C.kv_dim, C.dim), "attn_v": (C.kv_dim, C.dim),
          "attn_output": (C.dim, C.dim), "ffn_gate": (C.hidden_dim, C.dim),
          "ffn_down": (C.dim, C.hidden_dim), "ffn_up": (C.hidden_dim, C.dim)}
# the random file's matrices that are not K-quants (Q8_0 and Q5_0 in place on the legacy
# kernels)
OTHER = {"blk.0.attn_v.weight": "Q8_0", "blk.1.ffn_gate.weight": "Q5_0"}


@pytest.fixture(autouse=True)
def _restore_dispatch():
    yield
    select_kernel(None)


def kq_blocks(rng, typ: str, rows: int, cols: int) -> np.ndarray:
    """Random (rows, cols / 256 blocks) of `typ` (every byte pattern is a valid block) with
    f16 scales that give weights of about 1 / sqrt(cols)."""
    nb = rows * cols // 256
    if typ in ("Q4_K", "Q5_K"):  # Q5_K: values up to 31, so half Q4_K's d
        b = rng.integers(0, 256, (nb, 144 if typ == "Q4_K" else 176), dtype=np.uint8)
        lo, hi = (0.5e-4, 2e-4) if typ == "Q4_K" else (0.25e-4, 1e-4)
        b[:, 0:2] = rng.uniform(lo, hi, (nb, 1)).astype("<f2").view(np.uint8)
        b[:, 2:4] = rng.uniform(0, 2e-4, (nb, 1)).astype("<f2").view(np.uint8)
    else:
        b = rng.integers(0, 256, (nb, 210), dtype=np.uint8)
        b[:, 208:210] = rng.uniform(1e-5, 5e-5, (nb, 1)).astype("<f2").view(np.uint8)
    return b.reshape(rows, -1)  # the writer reads the shape from the bytes per row


def random_file(path: Path, kinds: tuple[str, str], seed: int) -> Path:
    """Layers alternating kinds[0] and kinds[1], two other types, a tied kinds[1] token
    table."""
    rng = np.random.default_rng(seed)
    t: dict[str, np.ndarray] = {"output_norm.weight": rng.uniform(0.5, 1.5, C.dim).astype(
        np.float32)}
    raw: dict = {"token_embd.weight": (kq_blocks(rng, kinds[1], C.vocab_size, C.dim), kinds[1])}
    t["token_embd.weight"] = np.zeros((C.vocab_size, C.dim), np.float32)
    types = dict(OTHER)
    for i in range(C.n_layers):
        for n in ("attn_norm", "ffn_norm"):
            t[f"blk.{i}.{n}.weight"] = rng.uniform(0.5, 1.5, C.dim).astype(np.float32)
        for j, (n, (r, k)) in enumerate(SHAPES.items()):
            name = f"blk.{i}.{n}.weight"
            t[name] = (rng.standard_normal((r, k)) / np.sqrt(k)).astype(np.float32)
            if name not in OTHER:
                typ = kinds[(i + j) % 2]
                raw[name] = (kq_blocks(rng, typ, r, k), typ)
    return write_gguf(path, t, types, kv=KV, raw=raw)


@pytest.fixture(scope="module")
def random_kq(tmp_path_factory) -> Path:
    """Layers alternating Q4_K and Q6_K, two other types, a tied Q6_K token table."""
    return random_file(tmp_path_factory.mktemp("kq") / "random_kq.gguf", ("Q4_K", "Q6_K"), 7)


@pytest.fixture(scope="module")
def random_q5k(tmp_path_factory) -> Path:
    """Layers alternating Q5_K and Q4_K, two other types, a tied Q5_K token table."""
    return random_file(tmp_path_factory.mktemp("q5k") / "random_q5k.gguf", ("Q4_K", "Q5_K"), 11)


def llama_cpp_quantized(d: Path, ftype: str) -> Path:
    """The float model of test_gguf's kind at these shapes quantized by llama.cpp
    (llama-cpp-python of the system python3) to LLAMA_FTYPE_MOSTLY_<ftype>."""
    from test_gguf import float_tensors

    src = write_gguf(d / "f32.gguf", float_tensors(C), kv=KV)
    out = d / f"{ftype.lower()}.gguf"
    code = ("import ctypes, sys, llama_cpp as l; p = l.llama_model_quantize_default_params(); "
            f"p.ftype = l.LLAMA_FTYPE_MOSTLY_{ftype}; "
            "sys.exit(l.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), "
            "ctypes.byref(p)))")
    try:
        r = subprocess.run(["python3", "-c", code, str(src), str(out)], capture_output=True,
                           timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"llama-cpp-python's quantizer not runnable: {e}")
    if r.returncode != 0 or not out.is_file():
        pytest.skip(f"llama-cpp-python's quantizer unavailable: {r.stderr[-300:]!r}")
    return out


@pytest.fixture(scope="module")
def llama_cpp_kq(tmp_path_factory) -> Path:
    """Q4_K_M by llama.cpp: Q4_K and Q6_K as its quantizer chooses."""
    return llama_cpp_quantized(tmp_path_factory.mktemp("kq_llama"), "Q4_K_M")


@pytest.fixture(scope="module")
def llama_cpp_q5k(tmp_path_factory) -> Path:
    """Q5_K_M by llama.cpp: Q5_K and Q6_K as its quantizer chooses."""
    return llama_cpp_quantized(tmp_path_factory.mktemp("q5k_llama"), "Q5_K_M")


def greedy(eng: Engine, prompt: list[int], n: int) -> tuple[list[int], np.ndarray]:
    logits = eng.prefill(prompt, 0, all_logits=True).copy()
    last, toks = logits[-1].copy(), []
    for i in range(n):
        toks.append(int(np.argmax(last)))
        last = eng.forward(toks[-1], len(prompt) + i).copy()
    return toks, logits


def test_auto_holds_kquant_and_legacy_blocks_in_place(random_kq: Path) -> None:
    m = read_gguf(random_kq, quant="auto")
    w = m.weights
    for i in range(C.n_layers):
        for f, n in LAYER.items():
            if not f.startswith("w"):
                continue
            t = getattr(w, f)[i]
            name = f"blk.{i}.{n}.weight"
            assert isinstance(t, KQTensor), name
            if isinstance(t, KQTensor):  # a view of the file's bytes, no copy
                assert t.raw.base is not None and not t.raw.flags.owndata
    assert w.tok_embeddings is w.wcls and w.wcls.type_name == "Q6_K"
    eng = Engine(m, threads=1)
    assert eng.embedding == {"dtype": "kq", "tied": True, "packed": False}
    q8 = read_gguf(random_kq, quant="q8").weights
    assert not any(isinstance(t, KQTensor) for t in [*q8.wq, *q8.w2, q8.wcls])


ALL_FILES = ["random_kq", "llama_cpp_kq", "random_q5k", "llama_cpp_q5k"]


@pytest.mark.parametrize("which", ALL_FILES)
def test_identical_across_tiers_threads_and_chunks(which: str, request) -> None:
    """T = 0 tokens and every position's logits, bit for bit: every supported tier, 1 and 2
    threads, prefill in one chunk, in chunks of 3, and token by token."""
    m = read_gguf(request.getfixturevalue(which), quant="auto")
    w = m.weights
    kq = {t.type_name for t in [*w.wq, *w.wk, *w.wv, *w.wo, *w.w1, *w.w2, *w.w3, w.wcls]
          if isinstance(t, KQTensor)}
    assert ("Q5_K" in kq) == ("q5k" in which), kq  # Q5_K matrices run in place
    base = None
    for tier in SUPPORTED:
        select_kernel(tier)
        for threads in (1, 2):
            eng = Engine(m, threads=threads)
            assert eng.kernels["prefill"]["tier"] == tier
            toks, logits = greedy(eng, TOKS, 8)
            chunked = Engine(m, threads=threads, ubatch=3).prefill(TOKS, all_logits=True)
            single = Engine(m, threads=threads)
            steps = np.stack([single.forward(t, i).copy() for i, t in enumerate(TOKS)])
            assert np.array_equal(chunked, logits), (tier, threads)
            assert np.array_equal(steps, logits), (tier, threads)
            if base is None:
                base = (toks, logits)
            assert toks == base[0], (tier, threads)
            assert np.array_equal(logits, base[1]), (tier, threads)
    assert np.isfinite(base[1]).all() and np.abs(base[1]).max() > 0


@pytest.mark.parametrize("which, kinds", [("random_kq", {"Q4_K", "Q6_K"}),
                                          ("random_q5k", {"Q4_K", "Q5_K"}),
                                          ("llama_cpp_q5k", {"Q5_K", "Q6_K"})])
def test_kquant_matmul_equals_reference_bit_for_bit(which: str, kinds: set, request) -> None:
    """reference.py's K8 quantization and K-quant matmul against the C kernels of every tier
    on the file's own matrices (llama_cpp_q5k: Q5_K blocks as llama.cpp's quantizer writes
    them; gguf.quants has no Q5_K quantizer)."""
    w = read_gguf(request.getfixturevalue(which), quant="auto").weights
    rng = np.random.default_rng(3)
    seen = set()
    for t in [*w.wq, *w.wk, *w.w1, *w.w2, w.wcls]:
        if not isinstance(t, KQTensor) or t.type_name in LEGACY_NATIVE:  # (test_legacy_*)
            continue
        seen.add(t.type_name)
        n, k = t.shape
        x = (rng.standard_normal(k) * 3).astype(np.float32)
        x[:256] = 0.0  # a zero block
        xq, xd, xsum = quantize_k8(x)
        cq, cd, cs = np.empty(k, np.int8), np.empty(k // 256, np.float32), np.empty(
            k // 16, np.int16)
        _bench.k8_quantize(x, cq, cd, cs, "scalar")
        assert np.array_equal(cq, xq) and np.array_equal(cd, xd) and np.array_equal(cs, xsum)
        want = kq_matmul(xq, xd, xsum, t)
        for tier in SUPPORTED:
            out = np.full((1, n), np.nan, np.float32)
            _bench.kq_gemm(t.type_name.lower(), cq[None], cd[None], cs[None], 1, t.raw, n, k,
                           out, tier)
            assert np.array_equal(out[0].view(np.uint32), want.view(np.uint32)), (t.type_name,
                                                                                  tier)
    assert seen == kinds


def dequantized(path: Path) -> Weights:
    """The file's weights as gguf.quants.dequantize gives them (float32), laid out for
    Reference."""
    r = gguf.GGUFReader(str(path))
    t = {x.name: gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float32).reshape(
        [int(d) for d in reversed(x.shape)]) for x in r.tensors}
    from test_gguf import weights_from

    return weights_from(t, C)


@pytest.mark.parametrize("which", ALL_FILES)
def test_logits_within_bound_of_float64_reference(which: str, request) -> None:
    """C logits (K8 activations, in-place kernels) against reference.py: within 1e-5 of the
    largest |logit| of reference.py's own K8 model run in float32 or float64 at each position
    (the same matmul bits; only the norms' and attention's float sums run in another order:
    measured 3e-7, 4e-7, 2e-7 and 3e-7 in ALL_FILES' order), and within 4 % of the float64
    reference on gguf.quants.dequantize's weights (the 8-bit activations' error: measured 1.8 %,
    3.1 %, 0.12 % and 2.7 %), no further from it than the q8 load (the weights requantized to 8
    bits: 2.2 %, 3.4 %, 0.13 % and 3.2 %). The top token equals the float64 reference's at every
    position, except in the Q5_K_M file at most one where the reference's lead over its runner-
    up is under 1 % of the largest |logit| (measured: one, a lead of 0.28 %, well inside the
    activations' 2.7 %; the q8 load flips one such near-tie in the Q4_K_M file)."""
    path = request.getfixturevalue(which)
    m = with_context(read_gguf(path, quant="auto"), len(TOKS))
    got = Engine(m, threads=2).prefill(TOKS, all_logits=True)
    specs = [Reference(m.config, m.weights, dt).logits(TOKS) for dt in (np.float32, np.float64)]
    exact = Reference(m.config, dequantized(path)).logits(TOKS)
    q8 = Engine(with_context(read_gguf(path), len(TOKS)), threads=2).prefill(
        TOKS, all_logits=True)
    scale = np.abs(exact).max()
    # each spec sums the norms and attention in its own float order (float32 through numpy's
    # BLAS, whose order differs between CPUs), so an activation within rounding of a
    # quantization boundary can round the other way in one of them and move every later
    # logit of its position; each position must match one of the two
    near = np.minimum(*(np.abs(got - s).max(axis=1) for s in specs))
    assert near.max() <= 1e-5 * scale
    assert np.abs(got - exact).max() <= 4e-2 * scale
    assert np.abs(got - exact).max() <= np.abs(q8 - exact).max()
    top = np.sort(exact, axis=1)
    same = got.argmax(axis=1) == exact.argmax(axis=1)
    assert same.sum() >= len(TOKS) - (which == "llama_cpp_q5k")
    assert (top[~same, -1] - top[~same, -2] < 1e-2 * scale).all()


@pytest.mark.parametrize("which", ["random_kq", "random_q5k"])
def test_token_rows_equal_gguf_dequantize(which: str, request) -> None:
    path = request.getfixturevalue(which)
    m = read_gguf(path, quant="auto")
    r = gguf.GGUFReader(str(path))
    t = next(x for x in r.tensors if x.name == "token_embd.weight")
    want = gguf.quants.dequantize(t.data, t.tensor_type).reshape(C.vocab_size, C.dim)
    eng = Engine(m, threads=1)
    ids = [0, 39, 5, 5, 17]
    assert np.array_equal(eng.embed(ids), want[ids].astype(np.float32))
    assert np.array_equal(m.weights.wcls.rows(ids), want[ids].astype(np.float32))


def test_bad_in_place_matrices_are_clear_errors(random_kq: Path) -> None:
    m = read_gguf(random_kq, quant="auto")
    w = m.weights
    good = w.wq[0]
    try:
        w.wq[0] = KQTensor(good.raw[:-1], good.type_id, *good.shape)
        with pytest.raises(ValueError, match=r"layer 0 wq.*\d+ bytes"):
            Engine(m, threads=1)
        w.wq[0] = KQTensor(good.raw, 10, *good.shape)  # Q2_K cannot run in place
        with pytest.raises(ValueError, match=r"Q2_K.*in-place"):
            Engine(m, threads=1)
        w.wq[0] = KQTensor(good.raw, good.type_id, good.shape[0] * 2, good.shape[1] // 2)
        with pytest.raises(ValueError, match=r"Q4_K|Q6_K"):
            Engine(m, threads=1)
    finally:
        w.wq[0] = good
    Engine(m, threads=1)


def test_info_lists_stored_resident_and_kernels(random_kq: Path) -> None:
    r = cli("info", str(random_kq), "--quant", "auto", "--json")
    assert r.returncode == 0, r.stderr
    mats = {x["name"]: x for x in json.loads(r.stdout)["model"]["matrices"]}
    q = mats["layers.0.wq"]
    assert q["stored"] == "Q4_K" and q["resident"] == "Q4_K in place"
    assert q["decode"].startswith("q4k_gemv_") and q["prefill"].startswith("q4k_gemm_")
    v = mats["layers.0.wv"]
    assert v["stored"] == "Q8_0" and v["resident"] == "Q8_0 in place"
    assert v["decode"].startswith("q80_gemv_") and v["prefill"].startswith("q80_gemm_")
    assert mats["layers.1.w1"]["stored"] == "Q5_0"
    assert mats["wcls"]["decode"].startswith("q6k_gemv_")
    assert mats["tok_embeddings"]["resident"] == "the classifier's (tied)"
    text = cli("info", str(random_kq), "--quant", "auto").stdout.decode()
    assert "Q4_K -> Q4_K in place: q4k_gemv_" in text


def test_info_lists_q5k_in_place_with_its_kernels(random_q5k: Path) -> None:
    r = cli("info", str(random_q5k), "--quant", "auto", "--json")
    assert r.returncode == 0, r.stderr
    mats = {x["name"]: x for x in json.loads(r.stdout)["model"]["matrices"]}
    k = mats["layers.0.wk"]
    assert k["stored"] == "Q5_K" and k["resident"] == "Q5_K in place"
    assert k["decode"].startswith("q5k_gemv_") and k["prefill"].startswith("q5k_gemm_")
    assert mats["wcls"]["stored"] == "Q5_K" and mats["wcls"]["decode"].startswith("q5k_gemv_")
    assert mats["layers.0.wq"]["resident"] == "Q4_K in place"
    text = cli("info", str(random_q5k), "--quant", "auto").stdout.decode()
    assert "Q5_K -> Q5_K in place: q5k_gemv_" in text


def test_convert_refuses_auto(random_kq: Path, tmp_path: Path) -> None:
    r = cli("convert", str(random_kq), "-o", str(tmp_path / "x.isaf"), "--quant", "auto")
    assert r.returncode != 0 and b"nothing to convert" in r.stderr


def test_gemma3_q4_k_m_auto_identical_across_tiers() -> None:
    """The real Q4_K_M (Q5_0, Q8_0, Q4_K and Q6_K in one layer): its Q5_0 (q, k, gate, up),
    Q4_K and Q6_K matrices in place, the same greedy tokens and logits on every tier, close to
    the q8 load's."""
    from isaforge import pull

    path = pull.model_path("gemma3-270m")
    if not path.is_file():
        pytest.skip(f"Gemma 3 not in the cache ({path}); run `isaforge pull gemma3-270m`")
    m = with_context(read_gguf(path, quant="auto"), 64)
    kinds = {t.type_name for t in [*m.weights.wo, *m.weights.w2] if isinstance(t, KQTensor)}
    assert kinds == {"Q4_K", "Q6_K"}
    w = m.weights
    assert {t.type_name for t in [*w.wq, *w.wk, *w.w1, *w.w3]} == {"Q5_0"}
    prompt = [2, 818, 5279, 529, 7001, 563]
    runs = {}
    for tier in SUPPORTED:
        select_kernel(tier)
        runs[tier] = greedy(Engine(m, threads=2), prompt, 6)
    for tier, (toks, logits) in runs.items():
        assert toks == runs["scalar"][0], tier
        assert np.array_equal(logits, runs["scalar"][1]), tier
    select_kernel(None)
    q8 = Engine(with_context(read_gguf(path), 64), threads=2).prefill(prompt, all_logits=True)
    got = runs["scalar"][1]
    assert (got.argmax(axis=1) == q8.argmax(axis=1)).mean() >= 0.8
