"""llama2.c readers/writers: layouts, zero-copy mapping, and validation of malformed files."""

from __future__ import annotations

import mmap
import re
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from conftest import MATS, TINY_GQA
from isaforge.formats import (
    read_llama2c,
    v2_tensors_of,
    write_llama2c_v1,
    write_llama2c_v2,
)
from isaforge.formats.llama2c import MAGIC, detect_format, quantize_model
from isaforge.types import Config, ModelFormatError, Q8Tensor


def v0_bytes(c: Config, t: dict, rope: np.ndarray) -> bytes:
    """Hand-written legacy v0 file, in run.c's order."""
    vocab = c.vocab_size if c.shared_classifier else -c.vocab_size
    head = struct.pack(
        "<7i", c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, vocab, c.seq_len
    )
    order = [
        "tok_embeddings",
        "rms_att",
        "wq",
        "wk",
        "wv",
        "wo",
        "rms_ffn",
        "w1",
        "w2",
        "w3",
        "rms_final",
    ]
    body = b"".join(np.asarray(t[k], dtype="<f4").tobytes() for k in order) + rope.tobytes()
    if not c.shared_classifier:
        body += np.asarray(t["wcls"], dtype="<f4").tobytes()
    return head + body


def tiny_model(rng: np.random.Generator, shared: bool = False) -> tuple[Config, dict]:
    c = replace(TINY_GQA, shared_classifier=shared)
    L, d, h, kv, v = c.n_layers, c.dim, c.hidden_dim, c.kv_dim, c.vocab_size
    shapes = {
        "tok_embeddings": (v, d),
        "rms_att": (L, d),
        "wq": (L, d, d),
        "wk": (L, kv, d),
        "wv": (L, kv, d),
        "wo": (L, d, d),
        "rms_ffn": (L, d),
        "w1": (L, h, d),
        "w2": (L, d, h),
        "w3": (L, h, d),
        "rms_final": (d,),
        "wcls": (v, d),
    }
    t = {k: rng.standard_normal(s).astype(np.float32) * 0.3 for k, s in shapes.items()}
    return c, t


def mmap_root(a: np.ndarray) -> object:
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a.obj if isinstance(a, memoryview) else a


def test_read_v0_stories(v0_path: Path) -> None:
    m = read_llama2c(v0_path)
    c, w = m.config, m.weights
    assert (c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads) == (64, 172, 5, 8, 4)
    assert (c.vocab_size, c.seq_len, c.shared_classifier) == (512, 512, True)
    assert m.format == "llama2c-v0" and detect_format(v0_path) == "llama2c-v0"
    assert w.tok_embeddings.shape == (512, 64) and w.wcls is w.tok_embeddings
    assert w.rms_att.shape == (5, 64) and w.rms_ffn.shape == (5, 64) and w.rms_final.shape == (64,)
    assert [len(getattr(w, n)) for n in MATS] == [5] * 7
    assert w.wq[0].shape == (64, 64) and w.wk[4].shape == (32, 64) and w.wv[2].shape == (32, 64)
    assert w.w1[0].shape == (172, 64) and w.w2[0].shape == (64, 172) and w.w3[1].shape == (172, 64)
    assert w.group_size == 0
    raw = v0_path.read_bytes()
    # first float after the 28-byte header is tok_embeddings[0, 0]; rms_final sits just
    # before the two RoPE tables (2 * 512 * 4 floats) at the end of the file
    assert w.tok_embeddings[0, 0] == struct.unpack_from("<f", raw, 28)[0]
    rope_bytes = 2 * 512 * 4 * 4
    assert w.rms_final[-1] == struct.unpack_from("<f", raw, len(raw) - rope_bytes - 4)[0]
    for a in (w.tok_embeddings, w.rms_att, w.rms_final, w.wq[0], w.w2[4]):
        assert a.dtype == np.float32 and np.isfinite(a).all() and np.abs(a).max() < 100
    assert 0.3 < float(np.abs(w.rms_final).mean()) < 10  # norm gains are O(1)
    mm = m.keepalive[0]
    assert isinstance(mm, mmap.mmap)
    for a in (w.tok_embeddings, w.rms_att, w.wq[3], w.w2[4], w.rms_final):
        assert mmap_root(a) is mm and not a.flags.owndata and not a.flags.writeable


def test_v1_roundtrip(v0_path: Path, tmp_path: Path) -> None:
    m = read_llama2c(v0_path)
    out = tmp_path / "v1.bin"
    n = write_llama2c_v1(out, m.config, m.weights)
    raw = out.read_bytes()
    assert n == len(raw) == 256 + (len(v0_path.read_bytes()) - 28 - 2 * 512 * 4 * 4)
    assert raw[:8] == struct.pack("<Ii", MAGIC, 1) and raw[:4] == b"24ka"
    assert struct.unpack_from("<7iB", raw, 8) == (64, 172, 5, 8, 4, 512, 512, 1)
    assert raw[37:256] == bytes(219)
    r = read_llama2c(out)
    assert r.format == "llama2c-v1" and r.config == m.config
    for k in ("tok_embeddings", "rms_att", "rms_ffn", "rms_final"):
        np.testing.assert_array_equal(getattr(r.weights, k), getattr(m.weights, k))
    for k in MATS:
        for a, b in zip(getattr(r.weights, k), getattr(m.weights, k), strict=True):
            np.testing.assert_array_equal(a, b)
    assert r.weights.wcls is r.weights.tok_embeddings


def test_v2_layout_and_rewrite(v0_path: Path, tmp_path: Path) -> None:
    q = tmp_path / "q.bin"
    quantize_model(v0_path, q, group_size=4)
    raw = q.read_bytes()
    assert raw[:41] == struct.pack("<Ii7iBi", MAGIC, 2, 64, 172, 5, 8, 4, 512, 512, 1, 4)
    assert raw[41:256] == bytes(215)
    m = read_llama2c(q)
    c, w = m.config, m.weights
    assert m.format == "llama2c-v2" and w.group_size == 4
    assert isinstance(w.wcls, Q8Tensor) and w.wcls.shape == (512, 64)
    # the token table stays the file's Q8 tensor (no float32 copy): the tied classifier itself
    assert w.tok_embeddings is w.wcls
    assert w.wq[0].s.shape == (64, 16) and w.w2[0].s.shape == (64, 43)
    mm = m.keepalive[0]
    assert mmap_root(w.wq[2].q) is mm and mmap_root(w.w3[4].s) is mm
    assert mmap_root(w.wcls.q) is mm and mmap_root(w.rms_att) is mm
    # q then s per tensor: the first tensor's scales directly follow its int8 values
    off = 256 + 4 * (5 * 64 * 2 + 64)
    assert np.array_equal(np.frombuffer(raw, np.int8, 512 * 64, off), w.wcls.q.ravel())
    s0 = np.frombuffer(raw, "<f4", 512 * 16, off + 512 * 64)
    np.testing.assert_array_equal(s0, w.wcls.s.ravel())
    # rewriting the loaded tensors reproduces the file byte for byte
    out = tmp_path / "again.bin"
    write_llama2c_v2(
        out,
        c,
        group_size=4,
        rms_att=w.rms_att,
        rms_ffn=w.rms_ffn,
        rms_final=w.rms_final,
        tensors=v2_tensors_of(w, c),
    )
    assert out.read_bytes() == raw


def test_v2_writer_rejects_bad_tensors(v0_path: Path, tmp_path: Path) -> None:
    q = tmp_path / "q.bin"
    quantize_model(v0_path, q, group_size=4)
    m = read_llama2c(q)
    c, w = m.config, m.weights
    ts = v2_tensors_of(w, c)
    out = tmp_path / "bad.bin"
    kw = dict(group_size=4, rms_att=w.rms_att, rms_ffn=w.rms_ffn, rms_final=w.rms_final)
    with pytest.raises(ValueError, match="missing"):
        write_llama2c_v2(out, c, tensors=ts[:-1], **kw)
    with pytest.raises(ValueError, match="too many"):
        write_llama2c_v2(out, c, tensors=ts + ts[:1], **kw)
    with pytest.raises(ValueError, match=r"wq\[0\]"):
        write_llama2c_v2(out, c, tensors=[ts[0], ts[0]] + ts[2:], **kw)
    assert not out.exists() and list(tmp_path.iterdir()) == [q]


def test_tiny_unshared_gqa_v0(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    c, t = tiny_model(rng)
    p = tmp_path / "tiny.bin"
    rope = rng.standard_normal((2, c.seq_len, c.head_size // 2)).astype("<f4")
    p.write_bytes(v0_bytes(c, t, rope))
    m = read_llama2c(p)
    assert m.config == c and not m.config.shared_classifier
    w = m.weights
    for k in ("tok_embeddings", "rms_att", "rms_ffn", "rms_final", "wcls"):
        np.testing.assert_array_equal(getattr(w, k), t[k])
    for k in MATS:
        assert len(getattr(w, k)) == 2
        for li in range(2):
            np.testing.assert_array_equal(getattr(w, k)[li], t[k][li])
    assert w.wk[0].shape == (8, 16) and w.wcls is not w.tok_embeddings
    # trailing bytes mean the header does not describe the file: the size must be exactly
    # what the header implies
    p.write_bytes(v0_bytes(c, t, rope) + b"extra bytes")
    with pytest.raises(ModelFormatError, match="11 bytes too many"):
        read_llama2c(p)
    # v1 and v2 round trips keep the separate classifier
    p1 = tmp_path / "tiny1.bin"
    write_llama2c_v1(p1, c, w)
    np.testing.assert_array_equal(read_llama2c(p1).weights.wcls, t["wcls"])
    p2 = tmp_path / "tiny2.bin"
    s = quantize_model(p1, p2, group_size=8)
    assert s.n_tensors == 1 + 7 * 2 + 1
    w2 = read_llama2c(p2).weights
    assert isinstance(w2.wcls, Q8Tensor) and w2.wk[1].shape == (8, 16)
    assert np.abs(w2.wcls.dequantize() - t["wcls"]).max() <= s.max_error


def _valid_files(v0_path: Path, tmp_path: Path) -> list[Path]:
    m = read_llama2c(v0_path)
    p1, p2 = tmp_path / "v1.bin", tmp_path / "v2.bin"
    write_llama2c_v1(p1, m.config, m.weights)
    quantize_model(v0_path, p2, group_size=4)
    return [v0_path, p1, p2]


def test_truncated_files_raise(v0_path: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.bin"
    for src in _valid_files(v0_path, tmp_path):
        raw = src.read_bytes()
        read_llama2c(src)  # the full file is fine
        for n in np.linspace(0, len(raw) - 1, 50).astype(int):
            cut.write_bytes(raw[:n])
            with pytest.raises(ModelFormatError, match=re.escape(str(cut))):
                read_llama2c(cut)
        cut.write_bytes(raw[:-1])
        with pytest.raises(ModelFormatError, match=f"needs {len(raw)} bytes, file has"):
            read_llama2c(cut)


def _header_v0(**kw: int) -> bytes:
    p = dict(
        dim=64, hidden_dim=172, n_layers=5, n_heads=8, n_kv_heads=4, vocab_size=512, seq_len=512
    )
    p.update(kw)
    return struct.pack("<7I", *[v & 0xFFFFFFFF for v in p.values()]) + bytes(64)


def _header_v2(version: int = 2, shared: int = 1, gs: int = 4, **kw: int) -> bytes:
    return (
        struct.pack("<Ii", MAGIC, version)
        + _header_v0(**kw)[:28]
        + struct.pack("<Bi", shared, gs)
        + bytes(256)
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "too short"),
        (b"\x40\x00\x00", "too short"),
        (b"GGUF" + bytes(300), r"b'GGUF'.*magic 0x616b3432.*supported"),
        (_header_v2(version=3), "unsupported llama2.c version 3; supported: llama2.c v0"),
        (_header_v2(version=-1), "version -1"),
        (_header_v2()[:200], "too short for the 256-byte v2 header"),
        (_header_v0(dim=0), "dim=0 must be positive"),
        (_header_v0(dim=-64), "dim=-64 must be positive"),
        (_header_v0(n_layers=-1), "n_layers=-1 must be positive"),
        (_header_v0(hidden_dim=0), "hidden_dim=0"),
        (_header_v0(seq_len=-5), "seq_len=-5"),
        (_header_v0(n_kv_heads=0), "n_kv_heads=0"),
        (_header_v0(n_heads=7), "n_heads=7 does not divide dim=64"),
        (_header_v0(n_kv_heads=3), "n_kv_heads=3 does not divide n_heads=8"),
        (_header_v0(dim=24, n_heads=8, n_kv_heads=8), "head_size=3"),
        (_header_v0(vocab_size=1 << 31), "vocab_size=2147483648 is implausibly large"),
        (_header_v0(vocab_size=0), "vocab_size=0"),
        (_header_v0(n_layers=1 << 30), "n_layers=1073741824 is implausibly large"),
        (_header_v0(seq_len=(1 << 31) - 1), "seq_len=2147483647 is implausibly large"),
        (_header_v0(hidden_dim=(1 << 31) - 1), "hidden_dim=2147483647"),
        (_header_v2(vocab_size=1 << 31), "vocab_size=-2147483648 must be positive"),
        (_header_v2(vocab_size=-512), "vocab_size=-512 must be positive"),
        (_header_v2(gs=0), "group_size=0 must be positive"),
        (_header_v2(gs=-4), "group_size=-4"),
        (_header_v2(gs=8), "group_size=8 does not divide hidden_dim=172"),
        (_header_v2(gs=128), "group_size=128 does not divide dim=64 and hidden_dim=172"),
        (_header_v2(shared=7), "shared_classifier flag is 7"),
        (_header_v2(), "truncated: v2 with this header needs"),
        (_header_v0(), "truncated: v0 with this header needs 1056540 bytes, file has 92"),
    ],
)
def test_malformed_headers(tmp_path: Path, data: bytes, reason: str) -> None:
    p = tmp_path / "bad.bin"
    p.write_bytes(data)
    with pytest.raises(ModelFormatError, match=reason) as e:
        read_llama2c(p)
    assert str(p) in str(e.value)
    if "truncated" not in reason:  # header problems are found without reading tensors
        with pytest.raises(ModelFormatError, match=reason):
            detect_format(p)


def test_detect_format(v0_path: Path, tmp_path: Path) -> None:
    fmts = [detect_format(p) for p in _valid_files(v0_path, tmp_path)]
    assert fmts == ["llama2c-v0", "llama2c-v1", "llama2c-v2"]
