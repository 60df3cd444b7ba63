"""`.isaf` size: scale arrays stored as F16 when every value is exactly a float16
(widened to a float32 copy at load; the int8 / nibble arrays stay mapped), CQ4's scales rounded
to float16 by the quantizer so a direct `--quant cq4` load and its `.isaf` are bit-identical."""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from isaforge.converter import convert
from isaforge.formats.isaf import _f16_if_exact, read_isaf, write_isaf
from isaforge.model import read_model
from isaforge.quant.cq4 import fp16_scales
from isaforge.quant.q4 import Q4Tensor
from isaforge.runtime.engine import Engine
from isaforge.types import LAYER_MATRICES, Q8Tensor
from test_isaf import fails, rewrite

TOKS = [1, 403, 407, 261, 378, 41, 313, 270, 420, 350, 260, 2]


def header(p: Path) -> dict:
    raw = p.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    return json.loads(raw[8:8 + n])


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def logits(m) -> np.ndarray:
    return Engine(m, threads=1).prefill(TOKS, all_logits=True)


def mats(m):
    return [getattr(m.weights, n)[i] for n in LAYER_MATRICES for i in range(m.config.n_layers)]


@pytest.fixture(scope="module")
def cq4_isaf(stories, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("size") / "cq4.isaf"
    convert(stories / "stories260K.bin", out, quant="cq4-64")
    return out


def test_cq4_scales_are_f16_and_the_isaf_equals_the_direct_load(stories, cq4_isaf):
    h = header(cq4_isaf)
    dt = {k: v["dtype"] for k, v in h.items() if k.endswith(".scales")}
    # every CQ4 scale array is F16; the classifier's Q8 scales (max / 127 of float32 weights)
    # are not float16 values, so they stay F32
    assert {k: d for k, d in dt.items() if k.startswith("layers.")} == \
        {k: "F16" for k in dt if k.startswith("layers.")} and len(dt) == 7 * 5 + 1
    assert dt["wcls.scales"] == "F32"
    direct, back = read_model(stories / "stories260K.bin", "cq4-64"), read_isaf(cq4_isaf)
    whole = np.frombuffer(back.keepalive[0], np.uint8)
    for a, b in zip(mats(direct), mats(back), strict=True):
        assert isinstance(b, Q4Tensor) and b.s.dtype == np.float32 and not b.s.flags.writeable
        assert np.array_equal(bits(a.s), bits(b.s)) and np.array_equal(a.nibbles, b.nibbles)
        assert np.array_equal(b.s.astype(np.float16).astype(np.float32), b.s)
        assert np.shares_memory(b.nibbles, whole) and not np.shares_memory(b.s, whole)
    assert np.shares_memory(back.weights.wcls.s, whole)  # an F32 array is still mapped
    assert np.array_equal(bits(logits(direct)), bits(logits(back)))


def test_f16_scales_round_trip_exactly_and_a_non_f16_one_stays_f32(stories, tmp_path):
    convert(stories / "stories260K.bin", tmp_path / "q8.isaf")
    m = read_isaf(tmp_path / "q8.isaf")  # Q8 group 4, scales max / 127: not float16s
    assert {v["dtype"] for k, v in header(tmp_path / "q8.isaf").items()
            if k.endswith(".scales")} == {"F32"}
    w = m.weights
    wq0 = w.wq[0]
    s16 = wq0.s.astype(np.float16).astype(np.float32)
    s16[0, 0] = np.float32(0.1)  # subnormal-free but not a float16: wq[1] must stay F32
    near = wq0.s.astype(np.float16).astype(np.float32)
    assert not np.array_equal(near, wq0.s) and not np.array_equal(s16, near)
    wq = [Q8Tensor(wq0.q, near, wq0.group_size), Q8Tensor(w.wq[1].q, s16, wq0.group_size),
          *w.wq[2:]]
    m2 = dataclasses.replace(m, weights=dataclasses.replace(w, wq=wq))
    p = tmp_path / "mixed.isaf"
    write_isaf(p, m2)
    h = header(p)
    assert h["layers.0.wq.scales"]["dtype"] == "F16" and h["layers.1.wq.scales"]["dtype"] == "F32"
    assert h["layers.2.wq.scales"]["dtype"] == "F32" and h["wcls.scales"]["dtype"] == "F32"
    back = read_isaf(p)
    assert np.array_equal(bits(back.weights.wq[0].s), bits(near))
    assert np.array_equal(bits(back.weights.wq[1].s), bits(s16))
    assert np.array_equal(bits(logits(back)), bits(logits(m2)))


def test_f16_rules():
    a = np.array([[0.5, 2.0 ** -24, -3.0, 0.0]], np.float32)  # 2^-24: float16's least subnormal
    assert _f16_if_exact(a).dtype == np.float16
    for bad in (1 / 3, 65520.0, 2.0 ** -26, np.inf, np.nan):
        b = a.copy()
        b[0, 1] = bad
        assert _f16_if_exact(b) is b
    s = np.array([1e-3, 0.0, 0.1234567], np.float32)
    r = fp16_scales(s)
    assert np.array_equal(r, s.astype(np.float16).astype(np.float32)) and r.dtype == np.float32
    assert np.abs(r - s).max() <= 2.0 ** -11 * np.abs(s).max()
    tiny = np.array([1e-3, 2.0 ** -18], np.float32)  # float16 would lose > 2^-8: unchanged
    assert fp16_scales(tiny) is tiny
    big = np.array([1.0, 7e4], np.float32)
    assert fp16_scales(big) is big


@pytest.mark.parametrize("edit,match", [
    # an F16 scale array retyped I8 with its bytes' element count: the dtype check names it
    (lambda h, i: h["layers.0.w2.scales"].update(dtype="I8", shape=[64, 6]),
     r"tensor 'layers\.0\.w2\.scales' is I8 \[64, 6\], expected F32 \[64, 3\] "
     r"\(scales: F32 or F16\)"),
    # F16 scales with a shape of the same size that is not the matrix's groups
    (lambda h, i: h["layers.0.w2.scales"].update(shape=[32, 6]),
     r"tensor 'layers\.0\.w2\.scales' is F16 \[32, 6\], expected F32 \[64, 3\]"),
    # F16 is for scales only
    (lambda h, i: h["rms_final"].update(dtype="F16", shape=[128]),
     r"tensor 'rms_final': unsupported dtype 'F16' \(F16 is for scales only\)"),
    (lambda h, i: h["layers.0.w2.nibbles"].update(dtype="F16", shape=[64, 48]),
     r"tensor 'layers\.0\.w2\.nibbles': unsupported dtype 'F16'"),
])
def test_lying_scale_dtype_or_shape(cq4_isaf, tmp_path, edit, match):
    assert header(cq4_isaf)["layers.0.w2.scales"]["shape"] == [64, 3]
    fails(rewrite(cq4_isaf, tmp_path / "bad.isaf", edit), match)


SMOL_PARAMS = 134_515_008


@pytest.mark.parametrize("quant,classifier,limit", [
    ("cq4-64", "q8", 0.66), ("cq4-64", "4bit", 0.55)])
def test_smollm2_bytes_per_parameter(smollm2_gguf, tmp_path, quant, classifier, limit):
    """Measured 0.659 / 0.547 B/param (the 2 MB JSON header, mostly the tokenizer, is 0.015 of
    it); before F16 scales 0.697 / 0.578."""
    out = tmp_path / "s.isaf"
    convert(smollm2_gguf, out, quant=quant, classifier=classifier)
    h = header(out)
    assert {v["dtype"] for k, v in h.items() if k.endswith(".scales")} == {"F16"}
    assert out.stat().st_size / SMOL_PARAMS <= limit


# ---- long metadata lists as zlib blob tensors (version 3) ----

BIG_META = {
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.tokens": [f"tok{i}" for i in range(290)]
    + ["é", "\u0120the", "a\"b\\c", "\u4e2d"] + ["<|im_start|>"] * 6,
    "tokenizer.ggml.token_type": [1] * 299 + [3],
    "tokenizer.ggml.merges": [f"t o{i}" for i in range(256)],
    "tokenizer.ggml.bos_token_id": 1,
    "general.languages": ["en"],
}


@pytest.fixture(scope="module")
def blob_isaf(tmp_path_factory):
    from conftest import STORIES

    out = tmp_path_factory.mktemp("blobs") / "blobs.isaf"
    src = tmp_path_factory.mktemp("blobs_src") / "q8.isaf"
    convert(STORIES / "stories260K.bin", src, quant="q8", group_size=4)
    write_isaf(out, read_isaf(src), metadata=BIG_META)
    return out


def test_long_metadata_lists_are_blobs_and_come_back_equal(blob_isaf):
    h = header(blob_isaf)
    info = json.loads(h["__metadata__"]["isaforge"])
    assert info["version"] == 3
    big = ["tokenizer.ggml.merges", "tokenizer.ggml.token_type", "tokenizer.ggml.tokens"]
    assert info["metadata_blobs"] == big
    assert not set(big) & set(info["metadata"])  # only the short values stay in the header
    assert info["metadata"]["general.languages"] == ["en"]
    for k in big:
        assert h[f"metadata.{k}"]["dtype"] == "U8"
    m = read_isaf(blob_isaf)
    assert m.metadata == BIG_META  # every value back, exactly (unicode and escapes included)
    raw = json.dumps(BIG_META["tokenizer.ggml.tokens"]).encode()
    e = h["metadata.tokenizer.ggml.tokens"]
    assert e["data_offsets"][1] - e["data_offsets"][0] < len(raw) / 2


def _with_blob(tmp_path, monkeypatch, blob: bytes, name: str) -> Path:
    """A .isaf whose tokens blob holds `blob` instead of zlib of the list's JSON."""
    import isaforge.formats.isaf as isaf

    real = isaf.zlib.compress
    monkeypatch.setattr(isaf.zlib, "compress",
                        lambda raw, level=-1: blob if raw.startswith(b'["tok0"') else real(raw))
    from conftest import STORIES

    src = tmp_path / "src.isaf"
    convert(STORIES / "stories260K.bin", src, quant="q8", group_size=4)
    out = tmp_path / name
    write_isaf(out, read_isaf(src), metadata=BIG_META)
    monkeypatch.setattr(isaf.zlib, "compress", real)
    return out


@pytest.mark.parametrize("blob,match", [
    (b"not zlib at all", r"tensor metadata\.tokenizer\.ggml\.tokens: not a zlib stream"),
    (zlib.compress(b'["tok0", "a"]' * 50)[:-6],
     r"tensor metadata\.tokenizer\.ggml\.tokens: truncated zlib stream"),
    (zlib.compress(b'{"tok0": 1}'),
     r"tensor metadata\.tokenizer\.ggml\.tokens: holds dict, expected a list"),
    (zlib.compress(b'["tok0", '),
     r"tensor metadata\.tokenizer\.ggml\.tokens: not JSON once inflated"),
    (b"", r"tensor metadata\.tokenizer\.ggml\.tokens: truncated zlib stream"),
])
def test_bad_blob_contents(tmp_path, monkeypatch, blob, match):
    from test_isaf import fails

    fails(_with_blob(tmp_path, monkeypatch, blob, "bad.isaf"), match)


def test_blob_bomb_is_refused_at_the_cap(tmp_path, monkeypatch):
    import isaforge.formats.isaf as isaf
    from test_isaf import fails

    bomb = zlib.compress(b"[" + b"0," * (1 << 20) + b"0]", 9)  # 2 MiB from a few KB
    p = _with_blob(tmp_path, monkeypatch, bomb, "bomb.isaf")
    monkeypatch.setattr(isaf, "MAX_BLOB", 1 << 20)
    fails(p, r"tensor metadata\.tokenizer\.ggml\.tokens: inflates to more than 1048576 bytes")


@pytest.mark.parametrize("edit,match", [
    (lambda h, i: i.update(metadata_blobs="tokenizer.ggml.tokens"), "bad metadata_blobs"),
    (lambda h, i: i.update(metadata_blobs=i["metadata_blobs"] * 2), "bad metadata_blobs"),
    (lambda h, i: i["metadata"].update({"tokenizer.ggml.merges": []}), "bad metadata_blobs"),
    (lambda h, i: h.pop("metadata.tokenizer.ggml.merges"),
     "missing tensors: metadata.tokenizer.ggml.merges"),
    (lambda h, i: i["metadata_blobs"].remove("tokenizer.ggml.merges"),
     "unexpected tensor 'metadata.tokenizer.ggml.merges'"),
    (lambda h, i: h["metadata.tokenizer.ggml.merges"].update(dtype="I8"),
     r"tensor 'metadata\.tokenizer\.ggml\.merges' is I8 .*expected U8"),
])
def test_bad_blob_headers(blob_isaf, tmp_path, edit, match):
    from test_isaf import fails, rewrite

    fails(rewrite(blob_isaf, tmp_path / "bad.isaf", edit), match)
