"""A GGUF model's matrices made by the core from the file's bytes (csrc/ggml_intake.c): each
becomes Q8 at group 32 while the model is made, straight into the packed copy where decode
reads it, else row-major. The model equals one made from the numpy oracle's Q8 matrices
(as_q8(dequantize(...)); a Q8_0 matrix without -128 as stored) bit for bit, logits of prefill
and decode, on every tier this CPU runs; a broken tensor is refused naming the file and it."""

from __future__ import annotations

import dataclasses
import struct

import gguf
import numpy as np
import pytest

from isaforge import _native
from isaforge.formats.gguf import _open, read_gguf
from isaforge.quant.ggml import dequantize, q8_0_split
from isaforge.quant.mapped import MappedQ8
from isaforge.quant.q8 import quantize_q8
from isaforge.runtime.engine import Engine
from isaforge.types import LAYER_MATRICES, ModelFormatError, Q8Tensor
from test_ggml_convert import BY_NAME
from test_gguf import C, float_tensors, random_blocks, write_gguf

T = gguf.GGMLQuantizationType
SUPPORTED = [t["name"] for t in _native.info()["tiers"] if t["supported"]]
# rows of 256 (every K-quant block fits); 40 classifier rows: a partial last tile
C256 = dataclasses.replace(C, dim=256, hidden_dim=512)
KV = {"llama.embedding_length": 256, "llama.feed_forward_length": 512,
      "llama.rope.dimension_count": C256.head_size}
NAMES = {"wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output",
         "w1": "ffn_gate", "w2": "ffn_down", "w3": "ffn_up"}
QUANTIZED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
             "IQ4_NL", "IQ4_XS")


def model_file(path, type_name: str, seed: int = 0, untied: bool = False):
    """Every layer matrix (and an untied classifier) of type_name: random blocks for the
    quantized types, so every code of every type occurs; F16 from float values."""
    t = float_tensors(C256, tied=not untied, seed=seed)
    rng = np.random.default_rng(seed + 1)
    raw = {}
    names = [n for n in t if n.startswith("blk.") and not n.endswith("norm.weight")]
    names += ["output.weight"] if untied else []
    for n in names:
        rows, cols = t[n].shape
        if type_name == "F16":
            raw[n] = (t[n].astype("<f2").view(np.uint8).reshape(rows, -1), "F16")
        elif type_name == "Q8_0 kept":  # the gguf package's Q8_0: no -128, kept as stored
            raw[n] = (gguf.quants.quantize(t[n], T.Q8_0), "Q8_0")
        else:
            b = BY_NAME[type_name][1]
            blocks = random_blocks(type_name, rows * cols // b.block, rng)
            raw[n] = (np.frombuffer(blocks, np.uint8).reshape(rows, -1), type_name)
    return write_gguf(path, t, kv=KV, raw=raw)


def oracle(raw: np.ndarray, type_name: str, rows: int, cols: int) -> Q8Tensor:
    if type_name == "Q8_0" and not (raw.reshape(-1, 34)[:, 2:] == 0x80).any():
        return Q8Tensor(*q8_0_split(raw, rows, cols), 32)
    return quantize_q8(dequantize(raw, BY_NAME[type_name][1], rows, cols), 32)[0]


def edit_tensor(path, name: str, edit):
    """Rewrite the file at path after edit(b, info) changed its bytes b in place, where info
    is tensor `name`'s entry (offset, shape, nbytes); returns (the new bytes, info)."""
    g, mm = _open(path)
    info = g.tensors[name]
    mm.close()
    b = bytearray(path.read_bytes())
    edit(b, info)
    path.write_bytes(bytes(b))
    return b, info


def oracle_model(path):
    """The file read as the core reads it, every matrix the core converts replaced by the
    numpy oracle's Q8."""
    m = read_gguf(path)
    g, mm = _open(path)
    w = m.weights
    n = 0
    for attr in LAYER_MATRICES:
        for i, t in enumerate(getattr(w, attr)):
            assert isinstance(t, MappedQ8)
            info = g.tensors[f"blk.{i}.{NAMES[attr]}.weight"]
            raw = np.frombuffer(mm, np.uint8, info.nbytes, info.offset)
            getattr(w, attr)[i] = oracle(raw, info.type_name, *info.shape)
            n += 1
    tied = w.tok_embeddings is w.wcls  # then the token table is the classifier's Q8 too
    assert isinstance(w.wcls, MappedQ8)
    info = g.tensors["token_embd.weight" if tied else "output.weight"]
    raw = np.frombuffer(mm, np.uint8, info.nbytes, info.offset)
    w.wcls = oracle(raw, info.type_name, *info.shape)
    if tied:
        w.tok_embeddings = w.wcls
    return m, n


def run(model, tier: str, threads: int) -> list[np.ndarray]:
    e = Engine(model, threads=threads, kernel=tier, ubatch=4)
    prompt = [1, 5, 9, 2, 30, 7]
    out = [e.prefill(prompt, all_logits=True).copy()]
    for pos, tok in enumerate([3, 11, 39], start=len(prompt)):
        out.append(e.forward(tok, pos).copy())
    return out


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x.view(np.uint32), y.view(np.uint32))
                                    for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("type_name", [*QUANTIZED, "F16", "Q8_0 kept"])
def test_core_conversion_equals_the_numpy_oracle_on_every_tier(tmp_path, type_name):
    p = model_file(tmp_path / "m.gguf", type_name, untied=type_name in ("Q4_K", "Q8_0 kept"))
    want_model, n = oracle_model(p)
    assert n == C256.n_layers * len(LAYER_MATRICES)
    for tier in SUPPORTED:
        want = run(want_model, tier, 2)
        for threads in (1, 2):
            assert same(run(read_gguf(p), tier, threads), want), (type_name, tier, threads)
        want_model, _ = oracle_model(p)  # the engine let go of the oracle's arrays


def test_q8_0_with_one_minus_128_is_requantized_whole(tmp_path):
    """A single -128 in one 16-row tile: the whole matrix is requantized, as if_ggml_to_q8
    decides for the matrix, so a block of another tile whose largest quant is below 127 gets a
    new scale too."""
    p = model_file(tmp_path / "m.gguf", "Q8_0 kept")

    def edit(b, info):
        row_bytes = info.shape[1] // 32 * 34
        first = np.frombuffer(b, np.int8, 32, info.offset + 2)  # row 0, block 0: halve it
        b[info.offset + 2:info.offset + 34] = (first // 2).astype(np.int8).tobytes()
        b[info.offset + 20 * row_bytes + 2 + 5] = 0x80  # row 20: the second tile

    b, info = edit_tensor(p, "blk.1.ffn_up.weight", edit)
    stored = q8_0_split(np.frombuffer(b, np.uint8, info.nbytes, info.offset), *info.shape)
    m, _ = oracle_model(p)
    assert not np.array_equal(m.weights.w3[1].q[0, :32], stored[0][0, :32])  # rescaled
    for tier in SUPPORTED:
        assert same(run(read_gguf(p), tier, 2), run(oracle_model(p)[0], tier, 2)), tier


def test_non_finite_tensor_is_refused_naming_file_and_tensor(tmp_path):
    p = model_file(tmp_path / "m.gguf", "F16")
    edit_tensor(p, "blk.1.ffn_down.weight",  # +inf in row 1
                lambda b, info: struct.pack_into("<H", b, info.offset + 2 * 700, 0x7C00))
    for tier in SUPPORTED:
        with pytest.raises(ModelFormatError, match=r"m\.gguf: tensor blk\.1\.ffn_down\.weight: "
                           r"F16 tensor row 1 holds NaN or infinity"):
            Engine(read_gguf(p), kernel=tier)


def test_the_engine_releases_the_file_bytes_not_the_weights(tmp_path):
    """After the model is made the loaded weights still read as the oracle's Q8 (converted on
    access from the mapping), so tools and the reference model see the same matrices."""
    p = model_file(tmp_path / "m.gguf", "Q6_K")
    m = read_gguf(p)
    Engine(m)
    want, _ = oracle_model(p)
    got = m.weights.w2[1]
    assert isinstance(got, MappedQ8)
    assert np.array_equal(got.q, want.weights.w2[1].q)
    assert np.array_equal(got.s.view(np.uint32), want.weights.w2[1].s.view(np.uint32))


def test_q8_0_non_finite_scale_is_refused_naming_file_and_tensor(tmp_path):
    """A Q8_0 block kept as stored keeps its fp16 scale: an infinite one is refused."""
    p = model_file(tmp_path / "m.gguf", "Q8_0 kept")
    edit_tensor(p, "blk.0.attn_k.weight", lambda b, info: struct.pack_into(  # row 3
        "<H", b, info.offset + 3 * (info.shape[1] // 32) * 34, 0x7C00))
    with pytest.raises(ValueError, match=r"tensor blk\.0\.attn_k\.weight: Q8_0 tensor row 3 "
                       "holds NaN or infinity"):
        read_gguf(p).weights.wk[0].q  # noqa: B018 - converted on access, refused the same
    for tier in SUPPORTED:
        with pytest.raises(ModelFormatError, match=r"tensor blk\.0\.attn_k\.weight: Q8_0 tensor "
                           "row 3 holds NaN or infinity"):
            Engine(read_gguf(p), kernel=tier)
