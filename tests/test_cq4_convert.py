"""`isaforge convert --quant cq4`: the C quantizer (csrc/cq4_convert.c) and the converter that
reads a GGUF file one matrix at a time give the same bits as the numpy reference
(quant.cq4.quantize_cq4_reference over the whole model dequantized to float32, the converter's
former path), compared .isaf byte for byte."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import STORIES
from isaforge import converter
from isaforge.formats.gguf import read_gguf
from isaforge.formats.isaf import read_isaf
from isaforge.quant import cq4
from isaforge.quant.cq4 import GGMLMatrix, quantize_cq4, quantize_cq4_reference
from isaforge.quant.ggml import GGML_TYPES
from test_gguf import C, float_tensors, random_blocks, write_gguf

BY_NAME = {t.name: i for i, t in GGML_TYPES.items()}


def same_q4(a, b) -> bool:
    return (a.nibbles.tobytes() == b.nibbles.tobytes() and a.s.dtype == b.s.dtype
            and a.s.tobytes() == b.s.tobytes() and a.codebook.tobytes() == b.codebook.tobytes()
            and a.cols == b.cols and a.group_size == b.group_size and a.seed == b.seed)


@pytest.mark.parametrize("gs", [32, 64, 128])
@pytest.mark.parametrize("rotate", [True, False])
@pytest.mark.parametrize("amax", [63, 127])
def test_c_quantizer_equals_reference(gs, rotate, amax) -> None:
    rng = np.random.default_rng(gs + amax)
    w = rng.standard_normal((97, 384)) * np.exp(3 * rng.standard_normal((97, 1)))
    w = w.astype(np.float32)
    w[5] = 0  # all-zero groups: scale 0, the codes of a zero value
    w[7, :gs] = 1e-30  # a tiny group: the norm underflows in the square
    w[9, 3] = 3e38
    want = quantize_cq4_reference(w, gs, rotate=rotate, amax=amax)
    for threads in (1, 2, 3):
        got = quantize_cq4(w, gs, rotate=rotate, amax=amax, threads=threads)
        assert same_q4(got, want), threads


@pytest.mark.parametrize("name", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_1", "Q2_K", "Q3_K",
                                  "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"])
def test_ggml_blocks_equal_reference_on_numpy_dequantized(name) -> None:
    rng = np.random.default_rng(len(name))
    rows, cols = 24, 512
    t = GGML_TYPES[BY_NAME[name]]
    if t.block == 1:
        raw = (rng.standard_normal((rows, cols)).astype(np.float32).astype(
            {"F32": "<f4", "F16": "<f2"}.get(name, "<f4")))
        if name == "BF16":
            raw = (raw.view(np.uint32) >> 16).astype("<u2")
        raw = np.frombuffer(raw.tobytes(), np.uint8)
    else:
        raw = np.frombuffer(random_blocks(name, rows * cols // t.block, rng), np.uint8)
    m = GGMLMatrix(BY_NAME[name], raw, rows, cols)
    want = quantize_cq4_reference(m.dequantize(), 64, amax=63)
    assert same_q4(quantize_cq4(m, 64, amax=63, threads=2), want)


def test_non_finite_and_bad_sizes_are_refused() -> None:
    w = np.ones((4, 64), np.float32)
    w[2, 9] = np.nan
    with pytest.raises(ValueError, match="cannot quantize a tensor containing NaN or "
                                         "infinity.*row 2"):
        quantize_cq4(w, 32)
    raw = np.zeros(10, np.uint8)
    with pytest.raises(ValueError, match="Q8_0 tensor of 2 x 256 values takes 544 bytes, got 10"):
        quantize_cq4(GGMLMatrix(BY_NAME["Q8_0"], raw, 2, 256), 64)


def slow_quantize_cq4(w, group_size, seed=cq4.DEFAULT_SEED, scale="norm", rotate=True,
                      chunk_rows=2048, amax=127, threads=None):
    """The former quantize_cq4: numpy on float32 (a GGMLMatrix dequantized whole)."""
    f = w.dequantize() if isinstance(w, GGMLMatrix) else w
    return quantize_cq4_reference(f, group_size, seed, scale, rotate, chunk_rows, amax)


def convert_reference(monkeypatch, src, out, quant, **kw):
    """The former converter: the whole model read into float32 (read_gguf) and quantized by
    the numpy reference, then written by the same writer."""
    with monkeypatch.context() as m:
        m.setattr(cq4, "quantize_cq4", slow_quantize_cq4)
        m.setattr(converter, "read_gguf",
                  lambda path, quant, stream=False, progress=None: read_gguf(path, quant))
        return converter.convert(src, out, quant, **kw)


BIG = dataclasses.replace(C, dim=256, hidden_dim=512)
BIG_KV = {"llama.embedding_length": 256, "llama.feed_forward_length": 512,
          "llama.rope.dimension_count": BIG.head_size}
# one matrix type per role: K-quants, legacy blocks, float, and a 4-bit type cq4 keeps as is
TYPES = {"attn_q": "Q4_K", "attn_k": "Q6_K", "attn_v": "Q8_0", "attn_output": "F16",
         "ffn_gate": "Q5_0", "ffn_down": "Q4_0", "ffn_up": "F32"}


def mixed_gguf(path, tied: bool):
    rng = np.random.default_rng(11)
    t = float_tensors(BIG, tied=tied, seed=4)
    raw, types = {}, {}
    for name, a in t.items():
        kind = next((v for k, v in TYPES.items() if f".{k}." in name), None)
        if kind in ("Q4_K", "Q6_K"):
            nb = a.size // 256
            b = np.frombuffer(random_blocks(kind, nb, rng), np.uint8)
            raw[name] = (b.reshape(a.shape[0], -1), kind)
        elif kind is not None:
            types[name] = kind
    return write_gguf(path, t, types=types, kv=BIG_KV, raw=raw)


@pytest.mark.parametrize("quant", ["cq4", "cq4-32-norot", "cq4-128-wide", "cq4-lsq", "q4_0"])
@pytest.mark.parametrize("tied", [True, False])
def test_gguf_convert_equals_the_whole_model_path(tmp_path, monkeypatch, quant, tied) -> None:
    src = mixed_gguf(tmp_path / "m.gguf", tied)
    calls = []
    got = converter.convert(src, tmp_path / "new.isaf", quant,
                            progress=lambda i, n: calls.append((i, n)))
    want = convert_reference(monkeypatch, src, tmp_path / "old.isaf", quant)
    assert (tmp_path / "new.isaf").read_bytes() == (tmp_path / "old.isaf").read_bytes()
    assert got == dataclasses.replace(want, path=got.path)
    n = BIG.n_layers * 7
    assert calls == [(i, n) for i in range(1, n + 1)]


def test_gguf_convert_refuses_a_non_finite_matrix(tmp_path) -> None:
    t = float_tensors(BIG, seed=4)
    t["blk.1.ffn_up.weight"][3, 7] = np.inf
    src = write_gguf(tmp_path / "bad.gguf", t, kv=BIG_KV)
    with pytest.raises(ValueError, match="NaN or infinity"):
        converter.convert(src, tmp_path / "bad.isaf", "cq4")
    assert not (tmp_path / "bad.isaf").exists()


@pytest.mark.skipif(not (STORIES / "stories260K.bin").exists(), reason="stories260K missing")
@pytest.mark.parametrize("quant", ["cq4", "cq4-32"])
def test_stories260k_convert_equals_reference(tmp_path, monkeypatch, quant) -> None:
    src = STORIES / "stories260K.bin"
    converter.convert(src, tmp_path / "new.isaf", quant)
    convert_reference(monkeypatch, src, tmp_path / "old.isaf", quant)
    assert (tmp_path / "new.isaf").read_bytes() == (tmp_path / "old.isaf").read_bytes()


def test_converted_isaf_loads_by_mapping(tmp_path) -> None:
    """The .isaf's 4-bit matrices are views of the file's map, not copies."""
    src = mixed_gguf(tmp_path / "m.gguf", tied=True)
    converter.convert(src, tmp_path / "m.isaf", "cq4")
    m = read_isaf(tmp_path / "m.isaf")
    for mat in (m.weights.wq[0], m.weights.w1[1]):
        assert not mat.nibbles.flags.owndata and not mat.nibbles.flags.writeable
