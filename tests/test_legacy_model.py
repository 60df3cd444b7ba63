"""Whole models whose Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 matrices run in place (`--quant auto`):
tiny GGUF files (random legacy blocks written with the gguf package: one mixing Q5_0, Q8_0, Q4_K
and Q6_K layers as Gemma 3's Q4_K_M does, one of all four legacy types at rows of 160 and 288
values with a tied Q4_0 token table, one all Q8_0 (quantized by gguf) with a tied Q8_0 token
table; and a Q4_0, a Q5_1 and a Q8_0 written by llama.cpp's quantizer through
llama-cpp-python). Identity across tiers, threads and prefill chunking; logits within a stated
bound of the float64 reference on gguf's dequantized weights; the token table's rows equal to
gguf's dequantization; `isaforge info` naming the blocks and their kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blocks_helper import (
    NAMES,
    ROW_IDS,
    TOKS,
    C,
    all_logits,
    assert_identical_across_tiers,
    assert_refused,
    dequantized,
    gguf_token_rows,
    in_place,
    info_matrices,
    kq_blocks,
    layer_shapes,
    llama_cpp_quantized,
    restore_dispatch,  # noqa: F401 (an autouse fixture)
    spec_gap,
)
from conftest import cli
from isaforge import _native
from isaforge.formats.gguf import read_gguf
from isaforge.quant.ggml import KQTensor
from isaforge.reference import Reference
from isaforge.runtime.engine import Engine, matrix_kernels, runtime_info, select_kernel
from isaforge.types import Config
from test_gguf import base_kv, write_gguf

# all four legacy types at rows that are not whole 256-value blocks
CL = Config(dim=160, hidden_dim=288, n_layers=2, n_heads=5, n_kv_heads=1, vocab_size=40,
            seq_len=64, shared_classifier=True, rope_theta=5000.0,
            norm_eps=float(np.float32(1e-5)))
# Gemma 3 270M's Q4_K_M layout: Q5_0 q, k, gate, up; Q4_K output; Q6_K down; Q8_0 v
MIX = {"attn_q": "Q5_0", "attn_k": "Q5_0", "ffn_gate": "Q5_0", "ffn_up": "Q5_0",
       "attn_output": "Q4_K", "ffn_down": "Q6_K", "attn_v": "Q8_0"}
LEGACY = ("Q4_0", "Q4_1", "Q5_0", "Q5_1")
BYTES = {"Q4_0": 18, "Q4_1": 20, "Q5_0": 22, "Q5_1": 24}


def legacy_blocks(rng, typ: str, rows: int, cols: int) -> np.ndarray:
    """Random (rows, cols / 32 blocks) of `typ` with f16 d (and m centring the values) that give
    weights of about 1 / sqrt(cols)."""
    nb = rows * cols // 32
    b = rng.integers(0, 256, (nb, BYTES[typ]), dtype=np.uint8)
    five = typ.startswith("Q5")
    d = rng.uniform(0.5, 1.5, nb) / np.sqrt(cols) / (9.2 if five else 4.6)
    b[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(nb, 2)
    if typ in ("Q4_1", "Q5_1"):  # the minimum about minus the mean value
        m = -d * rng.uniform(13, 18, nb) if five else -d * rng.uniform(6, 9, nb)
        b[:, 2:4] = m.astype("<f2").view(np.uint8).reshape(nb, 2)
    return b.reshape(rows, -1)


def write_file(path: Path, c: Config, kind, table: str, seed: int) -> Path:
    """Layer matrices of kind(layer, gguf name) (a legacy type or K-quant as random blocks,
    Q8_0 quantized from floats by gguf), a tied token table of type `table`."""
    rng = np.random.default_rng(seed)
    t = {"output_norm.weight": rng.uniform(0.5, 1.5, c.dim).astype(np.float32),
         "token_embd.weight": np.zeros((c.vocab_size, c.dim), np.float32)}
    make = {**{k: legacy_blocks for k in LEGACY}, "Q4_K": kq_blocks, "Q6_K": kq_blocks}
    types = {}
    if table == "Q8_0":  # quantized from floats by gguf
        t["token_embd.weight"] = rng.standard_normal((c.vocab_size, c.dim)).astype(np.float32)
        raw, types["token_embd.weight"] = {}, "Q8_0"
    else:
        raw = {"token_embd.weight": (make[table](rng, table, c.vocab_size, c.dim), table)}
    shapes = layer_shapes(c)
    for i in range(c.n_layers):
        for n in ("attn_norm", "ffn_norm"):
            t[f"blk.{i}.{n}.weight"] = rng.uniform(0.5, 1.5, c.dim).astype(np.float32)
        for j, (n, (r, k)) in enumerate(shapes.items()):
            name = f"blk.{i}.{n}.weight"
            t[name] = (rng.standard_normal((r, k)) / np.sqrt(k)).astype(np.float32)
            typ = kind(i, j, n)
            if typ == "Q8_0":
                types[name] = typ
            else:
                raw[name] = (make[typ](rng, typ, r, k), typ)
    return write_gguf(path, t, types, kv=base_kv(c), raw=raw)


@pytest.fixture(scope="module")
def mix(tmp_path_factory) -> Path:
    return write_file(tmp_path_factory.mktemp("mix") / "mix.gguf", C,
                      lambda i, j, n: MIX[n], "Q6_K", 21)


@pytest.fixture(scope="module")
def legacy(tmp_path_factory) -> Path:
    return write_file(tmp_path_factory.mktemp("legacy") / "legacy.gguf", CL,
                      lambda i, j, n: LEGACY[(i + j) % 4], "Q4_0", 22)


@pytest.fixture(scope="module")
def q8_0(tmp_path_factory) -> Path:
    return write_file(tmp_path_factory.mktemp("q80") / "q80.gguf", CL,
                      lambda i, j, n: "Q8_0", "Q8_0", 23)


@pytest.fixture(scope="module")
def llama_cpp_q8_0(tmp_path_factory) -> Path:
    return llama_cpp_quantized(tmp_path_factory.mktemp("q80_llama"), "Q8_0")


@pytest.fixture(scope="module")
def llama_cpp_q4_0(tmp_path_factory) -> Path:
    return llama_cpp_quantized(tmp_path_factory.mktemp("q40_llama"), "Q4_0")


@pytest.fixture(scope="module")
def llama_cpp_q5_1(tmp_path_factory) -> Path:
    return llama_cpp_quantized(tmp_path_factory.mktemp("q51_llama"), "Q5_1")


FILES = ["mix", "legacy", "llama_cpp_q4_0", "llama_cpp_q5_1"]
Q8_0_FILES = ["q8_0", "llama_cpp_q8_0"]


@pytest.mark.parametrize("which, kinds", [("mix", {"Q5_0", "Q4_K", "Q6_K", "Q8_0"}),
                                          ("legacy", set(LEGACY)),
                                          ("q8_0", {"Q8_0"}),
                                          ("llama_cpp_q4_0", {"Q4_0"}),
                                          ("llama_cpp_q5_1", {"Q5_1"}),
                                          ("llama_cpp_q8_0", {"Q8_0"})])
def test_auto_holds_legacy_blocks_in_place(which: str, kinds: set, request) -> None:
    """Under auto every legacy (Q8_0 too) and K-quant matrix is a view of the file's blocks (no
    copy), the rest (F32) as Q8; under q8 none is in place."""
    path = request.getfixturevalue(which)
    w = read_gguf(path, quant="auto").weights
    assert kinds <= in_place(w) <= kinds | {"Q6_K", "Q4_K"}
    for f in NAMES:
        for t in getattr(w, f):
            if isinstance(t, KQTensor):
                assert t.raw.base is not None and not t.raw.flags.owndata
    if which == "mix":
        assert isinstance(w.wv[0], KQTensor) and w.wv[0].type_name == "Q8_0"
    assert not in_place(read_gguf(path, quant="q8").weights)


@pytest.mark.parametrize("which", FILES + Q8_0_FILES)
def test_identical_across_tiers_threads_and_chunks(which: str, request) -> None:
    """T = 0 tokens and every position's logits, bit for bit: every supported tier, 1 and 2
    threads, prefill in one chunk, in chunks of 3, and token by token."""
    assert_identical_across_tiers(read_gguf(request.getfixturevalue(which), quant="auto"))


@pytest.mark.parametrize("which", FILES)
def test_logits_within_bound_of_float64_reference(which: str, request) -> None:
    """C logits (L8 / K8 activations, in-place kernels) within 1e-5 of the largest |logit| of
    reference.py's own model of the same arithmetic run in float32 or float64 at each position
    (the same matmul bits; only the norms' and attention's float sums run in another order),
    within 5 % of the float64 reference on gguf.quants.dequantize's weights (the 8-bit
    activations' error: measured 4.0 %, 1.9 %, 2.2 % and 2.2 % in FILES' order) and no further
    from it than the q8 load (every matrix converted to Q8: 4.2 %, 2.1 %, 2.8 %, 2.6 %). The top
    token equals the float64 reference's wherever its lead over the runner-up is 3 % of the
    largest |logit| or more (measured: one position of the mix file differs, a lead of 2.0 %,
    inside the activations' 4 %)."""
    path = request.getfixturevalue(which)
    m, got = all_logits(path, "auto")
    exact = Reference(m.config, dequantized(path, m.config)).logits(TOKS)
    q8 = all_logits(path, "q8")[1]
    scale = np.abs(exact).max()
    assert spec_gap(got, m).max() <= 1e-5 * scale
    assert np.abs(got - exact).max() <= 5e-2 * scale
    assert np.abs(got - exact).max() <= np.abs(q8 - exact).max()
    top = np.sort(exact, axis=1)
    same = got.argmax(axis=1) == exact.argmax(axis=1)
    assert same.sum() >= len(TOKS) - (which == "mix")
    assert (top[~same, -1] - top[~same, -2] < 3e-2 * scale).all()


def test_token_rows_equal_gguf_dequantize(legacy: Path) -> None:
    """The tied Q4_0 table: the lookup's rows are gguf's values, and the classifier runs on
    the Q4_0 kernels."""
    m = read_gguf(legacy, quant="auto")
    assert m.weights.wcls.type_name == "Q4_0" and m.weights.tok_embeddings is m.weights.wcls
    want = gguf_token_rows(legacy, CL)
    eng = Engine(m, threads=1)
    assert np.array_equal(eng.embed(ROW_IDS), want)
    assert np.array_equal(m.weights.wcls.rows(ROW_IDS), want)


def test_info_lists_legacy_blocks_in_place(legacy: Path, mix: Path, monkeypatch) -> None:
    """Without the weight arena every legacy type stays in the file's rows (with it, Q8_0 may
    move into row groups: tests/test_kquant_model.py)."""
    monkeypatch.setenv("ISAFORGE_WEIGHT_ARENA", "0")
    mats = info_matrices(legacy)
    for f, j in (("wq", 0), ("wk", 1), ("wv", 2), ("wo", 3)):  # layer 0 cycles the types
        typ = LEGACY[j]
        code = typ.lower().replace("_", "")
        x = mats[f"layers.0.{f}"]
        assert x["stored"] == typ and x["resident"] == f"{typ} in place", x
        assert x["decode"].startswith(f"{code}_gemv_") and x["prefill"].startswith(f"{code}_gemm_")
    assert mats["wcls"]["decode"].startswith("q40_gemv_")
    text = cli("info", str(mix), "--quant", "auto").stdout.decode()
    assert "Q5_0 -> Q5_0 in place: q50_gemv_" in text
    assert "Q8_0 -> Q8_0 in place: q80_gemv_" in text


def test_bad_legacy_matrices_are_clear_errors(legacy: Path) -> None:
    m = read_gguf(legacy, quant="auto")
    good = m.weights.wq[0]
    assert_refused(m, "wq", [
        (KQTensor(good.raw[:-1], good.type_id, *good.shape), r"layer 0 wq.*\d+ bytes"),
        (KQTensor(good.raw, good.type_id, good.shape[0] * 2, good.shape[1] // 2), r"Q4_0")])


@pytest.mark.parametrize("which", Q8_0_FILES)
def test_q8_0_in_place_logits(which: str, request) -> None:
    """Q8_0 in place: the C logits within 1e-5 of the largest |logit| of reference.py's model of
    the same arithmetic in float32 (q80's matmul bits; the norms' and attention's sums in
    another order); against the q8 load, which reads the same int8 values and scales through
    the Q8 kernels (another float order per block, nothing else), within 1e-3 of it and the
    same top token at every position."""
    path = request.getfixturevalue(which)
    m, got = all_logits(path, "auto")
    assert {t.type_name for t in m.weights.wq} == {"Q8_0"}
    spec = Reference(m.config, m.weights, np.float32).logits(TOKS)
    q8 = all_logits(path, "q8")[1]
    scale = np.abs(spec).max()
    assert np.abs(got - spec).max() <= 1e-5 * scale
    assert np.abs(got - q8).max() <= 1e-3 * scale
    assert (got.argmax(axis=1) == q8.argmax(axis=1)).all()


def test_q8_0_token_rows_and_classifier(q8_0: Path) -> None:
    """The tied Q8_0 table runs in place: the lookup's rows are gguf's values and the classifier
    runs on the q80 kernels."""
    m = read_gguf(q8_0, quant="auto")
    w = m.weights
    assert isinstance(w.wcls, KQTensor) and w.wcls.type_name == "Q8_0"
    assert w.tok_embeddings is w.wcls
    eng = Engine(m, threads=1)
    assert np.array_equal(eng.embed(ROW_IDS), gguf_token_rows(q8_0, CL))
    assert matrix_kernels(w.wcls, eng.kernels)[1].startswith("q80_gemv_")


def test_info_lists_q8_0_in_place(q8_0: Path, monkeypatch) -> None:
    monkeypatch.setenv("ISAFORGE_WEIGHT_ARENA", "0")
    mats = info_matrices(q8_0)
    for name in ("layers.0.wq", "layers.1.w2", "wcls"):
        x = mats[name]
        assert x["stored"] == "Q8_0" and x["resident"] == "Q8_0 in place", x
        assert x["decode"].startswith("q80_gemv_") and x["prefill"].startswith("q80_gemm_"), x


def test_every_tier_runs_q8_0_in_place(q8_0: Path) -> None:
    """Every tier this CPU supports (AMX too) runs GGUF Q8_0 on the file's blocks with its q80
    kernels, whose bits equal q80's scalar kernels (a packed Q8 copy would follow Q8's float
    order instead, and a model mixing Q8_0 with other types would differ across tiers)."""
    w = read_gguf(q8_0, quant="auto").weights
    tiers = [t["name"] for t in _native.info()["tiers"] if t["supported"]]
    assert "scalar" in tiers
    for name in tiers:
        select_kernel(name)
        kernels = runtime_info()
        res, dec, pre = matrix_kernels(w.wv[0], kernels)
        assert res == "Q8_0 in place", (name, res)
        assert dec.startswith(("q80_gemv_", "q80x16_gemv_")), (name, dec)
        assert pre.startswith(("q80_gemm_", "q80x16_gemm_")), (name, pre)
