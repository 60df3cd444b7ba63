"""Quantized token tables: the table stays as stored (Q8 or 4-bit) and each
looked-up row is dequantized by the core, a tied classifier's matrix being the table itself
(one copy). Rows are checked through Engine.embed (the rows the forward pass starts from)."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from isaforge import _native
from isaforge.converter import convert
from isaforge.formats.isaf import read_isaf, write_isaf
from isaforge.model import read_model
from isaforge.quant.cq4 import quantize_cq4
from isaforge.quant.q4 import Q4Tensor
from isaforge.quant.q8 import quantize_q8
from isaforge.runtime.engine import Engine
from isaforge.synthetic import random_q8_model
from isaforge.types import Config, LoadedModel, ModelFormatError, Q8Tensor, Weights

C = Config(dim=96, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=300,
           seq_len=64)
DUPS = [5, 17, 5, 299, 0, 17, 17, 5, 42, 0]  # repeats inside one chunk


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def model(table, wcls=None, config: Config = C, f32_layers: bool = True, seed: int = 1
          ) -> LoadedModel:
    """A random model over `table` (its classifier: wcls, or the table itself = tied)."""
    rng = np.random.default_rng(seed)
    c = dataclasses.replace(config, shared_classifier=wcls is None)
    d, h, kv = c.dim, c.hidden_dim, c.kv_dim

    def m(rows, cols):
        a = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
        return a if f32_layers else quantize_q8(a, 32)[0]

    w = Weights(tok_embeddings=table, rms_att=np.ones((c.n_layers, d), np.float32),
                rms_ffn=np.ones((c.n_layers, d), np.float32), rms_final=np.ones(d, np.float32),
                wcls=table if wcls is None else wcls)
    for _ in range(c.n_layers):
        for name, shape in (("wq", (d, d)), ("wk", (kv, d)), ("wv", (kv, d)), ("wo", (d, d)),
                            ("w1", (h, d)), ("w2", (d, h)), ("w3", (h, d))):
            getattr(w, name).append(m(*shape))
    return LoadedModel(c, w, "<embed test>", "synthetic")


def float_table(seed: int = 0, config: Config = C) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((config.vocab_size, config.dim)) * 0.3).astype(np.float32)


def q8_emulated(t: Q8Tensor, ids) -> np.ndarray:
    """(float)q * s in float32, element by element: the lookup's arithmetic."""
    q = t.q[ids].astype(np.float32)
    s = np.repeat(t.s[ids], t.group_size, axis=1)
    return q * s


def q4_emulated(t: Q4Tensor, ids) -> np.ndarray:
    """The 4-bit lookup in float32 in the core's order: v = (float)cb[nibble] * s, then for a
    rotated table the unnormalized butterflies (h = 1, 2, .., gs/2: (a + b, a - b)) and signs."""
    sub = Q4Tensor(t.nibbles[ids], t.s[ids], t.codebook, t.group_size, t.cols, t.signs)
    v = sub.values()  # float32 codebook value * scale
    if t.signs is not None:
        y = v.reshape(-1, t.group_size).copy()
        h = 1
        while h < t.group_size:
            y = y.reshape(-1, t.group_size // (2 * h), 2, h)
            a, b = y[:, :, 0, :].copy(), y[:, :, 1, :].copy()
            y[:, :, 0, :], y[:, :, 1, :] = a + b, a - b
            h *= 2
        v = y.reshape(v.shape) * t.signs
    return v[:, : t.cols]


@pytest.mark.parametrize("gs", [4, 32, 96])
def test_q8_rows_equal_the_dequantized_rows_exactly(gs):
    t = quantize_q8(float_table(gs), gs)[0]
    e = Engine(model(t, wcls=float_table(9)), threads=1)
    assert e.embedding == {"dtype": "q8", "tied": False, "packed": False}
    ids = list(range(C.vocab_size))
    got = e.embed(ids)
    assert np.array_equal(bits(got), bits(t.dequantize()))
    assert np.array_equal(bits(got), bits(q8_emulated(t, ids)))


def q4_rows_packed(e) -> bool:
    """A tied 4-bit table's rows come from the classifier's packed copy where decode reads it
    (the tier's 4-bit GEMM packs and decodes at M = 1: AVX2, AVX-512 VNNI, i8mm)."""
    d = e.kernels["decode"]
    return bool(d["q4_gemm_packs"] and d["q4_decode"] == d["q4_gemm"])


@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("rotate", [True, False])
def test_4bit_rows_unrotated_only_for_the_looked_up_rows(gs, rotate):
    t = quantize_cq4(float_table(gs), gs, rotate=rotate)  # dim 96: padded to 128 at gs 64, 128
    e = Engine(model(t), threads=1)  # a tied 4-bit classifier: the same matrix
    assert e.embedding == {"dtype": "q4", "tied": True, "packed": q4_rows_packed(e)}
    got = e.embed(DUPS)
    # exact: the float32 emulation of the core's order
    assert np.array_equal(bits(got), bits(q4_emulated(t, DUPS)))
    # against the float64 un-rotation (Q4Tensor.dequantize): each output is a sum of gs terms
    # added in log2(gs) rounds of float32 additions, so |err| <= log2(gs) * 2^-24 * sum|v|
    # over its group (plus half an ulp of the float32 result)
    ref = t.rows(DUPS)
    if not rotate:
        assert np.array_equal(bits(got), bits(ref))
        return
    v = np.abs(Q4Tensor(t.nibbles[DUPS], t.s[DUPS], t.codebook, gs, t.cols).values()
               .astype(np.float64)).reshape(len(DUPS), -1, gs).sum(axis=2)
    bound = np.repeat(v, gs, axis=1)[:, : C.dim] * np.log2(gs) * 2.0 ** -24
    bound += np.abs(ref) * 2.0 ** -24
    err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    assert (err <= bound).all(), float((err - bound).max())


def test_duplicates_in_a_chunk_are_the_same_rows_and_logits():
    t = quantize_q8(float_table(3), 32)[0]
    e = Engine(model(t, f32_layers=False), threads=1, ubatch=4)
    got = e.embed(DUPS)  # chunks of 4: duplicates within and across chunks
    single = np.stack([e.embed([i])[0] for i in DUPS])
    assert np.array_equal(bits(got), bits(single))
    assert np.array_equal(bits(got), bits(t.rows(DUPS)))
    # prefill over the chunk (de-duplicated lookup) = decode token by token
    logits = e.prefill(DUPS, all_logits=True)
    e2 = Engine(model(t, f32_layers=False), threads=1)
    step = np.stack([e2.forward(tok, p).copy() for p, tok in enumerate(DUPS)])
    assert np.array_equal(bits(logits), bits(step))


def test_q8_table_equals_its_float32_dequantization_in_the_whole_forward_pass():
    """An fp32 model (no activation quantization to hide an ulp): a Q8 table gives the logits
    of the float32 table holding its dequantized values, bit for bit."""
    t = quantize_q8(float_table(4), 32)[0]
    cls = float_table(5)
    a = Engine(model(t, wcls=cls), threads=1).prefill(DUPS, all_logits=True)
    b = Engine(model(t.dequantize(), wcls=cls), threads=1).prefill(DUPS, all_logits=True)
    assert np.array_equal(bits(a), bits(b))


def test_tied_q8_classifier_is_the_table_one_buffer_across_tiers():
    loaded = random_q8_model(Config(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2,
                                    vocab_size=1000, seq_len=64), group_size=32)
    w = loaded.weights
    assert w.tok_embeddings is w.wcls
    ids = [0, 999, 15, 16, 17, 500, 15]  # 16-row tiles: the first and last rows of tiles
    want = bits(w.wcls.rows(ids))
    tiers = [t for t in _native.info(None, None)["tiers"] if t["supported"]]
    seen = {}
    for t in tiers:
        e = Engine(loaded, threads=1, kernel=t["name"])
        info = e.embedding
        assert info["dtype"] == "q8" and info["tied"], info
        # decode over the packed copy (AVX2): the row-major int8 went after packing, and the
        # table's rows come from the classifier's packed copy; else from the row-major one
        assert info["packed"] == (not e._m.reads_rowmajor), (t["name"], info)
        assert np.array_equal(bits(e.embed(ids)), want), t["name"]
        seen[t["name"]] = e.prefill(ids, all_logits=True).copy()
        if info["packed"]:  # the Python side let the tied table go with the classifier
            assert w.tok_embeddings is w.wcls and type(w.wcls) is not Q8Tensor
    first = next(iter(seen.values()))
    assert all(np.array_equal(bits(v), bits(first)) for v in seen.values())


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_rows_do_not_depend_on_threads_or_chunks(threads):
    t = quantize_q8(float_table(6), 32)[0]
    loaded = model(t, f32_layers=False)
    ref = Engine(loaded, threads=1).prefill(DUPS, all_logits=True)
    for ub in (1, 3, 64):
        got = Engine(loaded, threads=threads, ubatch=ub).prefill(DUPS, all_logits=True)
        assert np.array_equal(bits(got), bits(ref)), (threads, ub)


def test_gemma_embed_scale_is_applied_after_the_lookup():
    s = np.float32(np.sqrt(96.0))
    c = dataclasses.replace(C, embed_scale=float(s))
    t = quantize_q8(float_table(7), 32)[0]
    e = Engine(model(t, config=c, f32_layers=False), threads=1)
    got = e.embed(DUPS)
    assert np.array_equal(bits(got), bits(t.rows(DUPS) * np.float32(c.embed_scale)))
    q4 = quantize_cq4(float_table(7), 64)
    got = Engine(model(q4, config=c), threads=1).embed(DUPS)
    assert np.array_equal(bits(got), bits(q4_emulated(q4, DUPS) * np.float32(c.embed_scale)))


def test_f32_models_keep_a_float32_table(v0_path):
    m = read_model(v0_path)  # llama2.c fp32: run.c's memcpy of the float32 row
    e = Engine(m, threads=1)
    assert e.embedding == {"dtype": "f32", "tied": True, "packed": False}
    assert np.array_equal(bits(e.embed([1, 2, 3])), bits(m.weights.tok_embeddings[[1, 2, 3]]))


# ---- bad input ----

def test_a_table_whose_shape_lies_is_refused_naming_it():
    t = quantize_q8(float_table(8), 32)[0]
    bad = Q8Tensor(t.q[:-1], t.s[:-1], 32)
    with pytest.raises(ValueError, match=r"token embedding table has shape \(299, 96\), "
                                         r"expected \(300, 96\)"):
        Engine(model(bad, wcls=float_table(1)), threads=1)
    with pytest.raises(ValueError, match="tok_embeddings: group size 7 does not divide 96"):
        Engine(model(Q8Tensor(t.q, t.s, 7), wcls=float_table(1)), threads=1)
    short = Q8Tensor(t.q, t.s[:, :1], 32)  # fewer scales than groups
    with pytest.raises((ValueError, BufferError), match="tok_embeddings"):
        Engine(model(short, wcls=float_table(1)), threads=1)


def rewrite(src: Path, dst: Path, edit) -> Path:
    raw = src.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    h = json.loads(raw[8:8 + n])
    info = json.loads(h["__metadata__"]["isaforge"])
    edit(h, info)
    h["__metadata__"]["isaforge"] = json.dumps(info)
    head = json.dumps(h).encode()
    head += b" " * (-(8 + len(head)) % 64)
    dst.write_bytes(struct.pack("<Q", len(head)) + head + raw[8 + n:])
    return dst


@pytest.fixture(scope="module")
def untied_isaf(tmp_path_factory) -> Path:
    t = quantize_q8(float_table(10), 32)[0]
    p = tmp_path_factory.mktemp("embed") / "untied.isaf"
    write_isaf(p, model(t, wcls=quantize_q8(float_table(11), 32)[0], f32_layers=False))
    return p


def test_isaf_stores_an_untied_table_once_quantized(untied_isaf):
    m = read_isaf(untied_isaf)
    t = m.weights.tok_embeddings
    assert isinstance(t, Q8Tensor) and t is not m.weights.wcls and t.group_size == 32
    assert np.shares_memory(t.q, np.frombuffer(m.keepalive[0], np.uint8))
    e = Engine(m, threads=1)
    assert np.array_equal(bits(e.embed(DUPS)), bits(t.rows(DUPS)))


@pytest.mark.parametrize("edit,match", [
    (lambda h, i: h["tok_embeddings.scales"].update(shape=[300, 4]),
     r"tensor tok_embeddings.scales: data_offsets .* shape \[300, 4\] of F32 needs 4800"),
    # the same bytes read as 9 groups per row: the group count lies
    (lambda h, i: h["tok_embeddings.scales"].update(shape=[100, 9]),
     r"tensor 'tok_embeddings.scales' is F32 \[100, 9\], expected F32 \[300, 3\]"),
    (lambda h, i: h["tok_embeddings.q"].update(shape=[96, 300]),
     r"tensor 'tok_embeddings.q' is I8 \[96, 300\], expected I8 \[300, 96\]"),
    (lambda h, i: i.update(tok_group_size=5),
     "tensor tok_embeddings: Q8 group size 5 must be a positive integer dividing dim=96"),
    (lambda h, i: i.update(tok_embeddings="q3"), "tensor tok_embeddings: unknown table kind"),
    (lambda h, i: i.update(tok_embeddings="wcls"),
     "tensor tok_embeddings: the table is the classifier's matrix only for"),
])
def test_isaf_table_that_lies_is_refused_naming_it(untied_isaf, tmp_path, edit, match):
    p = rewrite(untied_isaf, tmp_path / "bad.isaf", edit)
    with pytest.raises(ModelFormatError, match=match):
        read_isaf(p)


def test_version_1_isaf_with_a_float32_table_still_loads(stories, tmp_path):
    """A version 1 file (the float32 table beside the Q8 classifier) loads as it is stored:
    its table is the mapped float32 tensor (no copy)."""
    src = read_model(stories / "stories260K.bin")
    q = tmp_path / "v2.isaf"
    convert(stories / "stories260K.bin", q, quant="q8", group_size=4)
    new = read_isaf(q)
    w = dataclasses.replace(new.weights, tok_embeddings=new.weights.wcls.dequantize())
    f32 = tmp_path / "f32table.isaf"
    write_isaf(f32, dataclasses.replace(new, weights=w))

    def to_v1(h, info):
        info["version"] = 1
        assert info.pop("tok_embeddings") == "f32"
        info.pop("tok_group_size")
    old = read_isaf(rewrite(f32, tmp_path / "v1.isaf", to_v1))
    assert isinstance(old.weights.tok_embeddings, np.ndarray)
    assert np.shares_memory(old.weights.tok_embeddings, np.frombuffer(old.keepalive[0], np.uint8))
    toks = [1, 403, 407, 261, 378, 41, 1]
    a = Engine(old, threads=1).prefill(toks, all_logits=True)
    b = Engine(new, threads=1).prefill(toks, all_logits=True)
    assert np.array_equal(bits(a), bits(b))  # the same values: dequantized Q8
    assert src.config == old.config


def test_converted_q8_isaf_has_no_float32_table(stories, tmp_path):
    q = tmp_path / "q.isaf"
    convert(stories / "stories260K.bin", q, quant="q8", group_size=4)
    raw = q.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    h = json.loads(raw[8:8 + n])
    assert "tok_embeddings" not in h and "tok_embeddings.q" not in h
    info = json.loads(h["__metadata__"]["isaforge"])
    assert info["tok_embeddings"] == "wcls" and info["version"] >= 2  # stored once since v2
    m = read_isaf(q)
    assert m.weights.tok_embeddings is m.weights.wcls


def test_isaf_with_a_4bit_tied_classifier_stores_one_4bit_table(stories, tmp_path):
    """A CQ4 model whose tied classifier is 4-bit too: the .isaf holds the table once, as the
    classifier's nibbles, and loads (mmapped) to the same logits."""
    m = read_model(stories / "stories260K.bin", "cq4")
    w = m.weights
    c4 = quantize_cq4(w.wcls.dequantize(), 64)
    m4 = dataclasses.replace(m, weights=dataclasses.replace(w, wcls=c4, tok_embeddings=c4))
    p = tmp_path / "cls4.isaf"
    write_isaf(p, m4)
    raw = p.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    h = json.loads(raw[8:8 + n])
    assert "wcls.q" not in h and "tok_embeddings" not in h and "wcls.nibbles" in h
    back = read_isaf(p)
    bw = back.weights
    assert isinstance(bw.wcls, Q4Tensor) and bw.tok_embeddings is bw.wcls
    assert np.shares_memory(bw.wcls.nibbles, np.frombuffer(back.keepalive[0], np.uint8))
    toks = [1, 403, 407, 261, 378, 41, 1]
    e = Engine(back, threads=1)
    assert e.embedding == {"dtype": "q4", "tied": True, "packed": q4_rows_packed(e)}
    a = e.prefill(toks, all_logits=True)
    b = Engine(m4, threads=1).prefill(toks, all_logits=True)
    assert np.array_equal(bits(a), bits(b))
    assert np.array_equal(bits(e.embed(toks)), bits(q4_emulated(c4, toks)))


def test_convert_classifier_4bit_ties_the_table(stories, tmp_path):
    out = tmp_path / "c4.isaf"
    s = convert(stories / "stories260K.bin", out, quant="cq4-64", classifier="4bit")
    m = read_isaf(out)
    w = m.weights
    assert isinstance(w.wcls, Q4Tensor) and w.tok_embeddings is w.wcls
    assert w.wcls.signs is not None and w.wcls.group_size == 64
    q8 = tmp_path / "c8.isaf"
    s8 = convert(stories / "stories260K.bin", q8, quant="cq4-64")
    assert isinstance(read_isaf(q8).weights.wcls, Q8Tensor)
    # the 4-bit table is stored once, smaller than the Q8 one it replaces
    assert s.n_bytes < s8.n_bytes
    with pytest.raises(ValueError, match="needs a 4-bit --quant"):
        convert(stories / "stories260K.bin", tmp_path / "x.isaf", quant="q8", classifier="4bit")
