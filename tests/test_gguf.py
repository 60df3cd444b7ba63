"""GGUF reader: GGML dequantizers against per-block decodes, tiny crafted GGUF files (round trip,
Q8 paths, every kind of corruption), and the real SmolLM2 GGUF (greedy text, llama.cpp)."""

from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from isaforge.formats import with_context
from isaforge.formats.gguf import read_gguf
from isaforge.quant.ggml import GGML_TYPES, SUPPORTED_NAMES, dequantize, q8_0_split
from isaforge.quant.q8 import quantize_q8
from isaforge.reference import Reference
from isaforge.runtime.engine import Engine
from isaforge.types import Config, LoadedModel, ModelFormatError, Q8Tensor, Weights

T = gguf.GGMLQuantizationType
BY_NAME = {t.name: t for t in GGML_TYPES.values()}


# ---- dequantizers: one block at a time, written out like ggml's C reference ----

def _h(b: bytes, at: int) -> float:
    return float(np.frombuffer(b[at:at + 2], "<f2")[0])


def decode_block(name: str, b: bytes) -> list[float]:
    f = np.float32
    if name == "Q8_0":
        d = f(_h(b, 0))
        return [d * f(struct.unpack_from("b", b, 2 + j)[0]) for j in range(32)]
    if name in ("Q4_0", "Q4_1"):
        d = f(_h(b, 0))
        m = f(_h(b, 2)) if name == "Q4_1" else None
        qs = b[4:20] if m is not None else b[2:18]
        out = [f(0)] * 32
        for j in range(16):
            lo, hi = qs[j] & 0xF, qs[j] >> 4
            if m is None:
                out[j], out[j + 16] = d * f(lo - 8), d * f(hi - 8)
            else:
                out[j], out[j + 16] = d * f(lo) + m, d * f(hi) + m
        return out
    if name in ("Q5_0", "Q5_1"):
        d = f(_h(b, 0))
        m = f(_h(b, 2)) if name == "Q5_1" else None
        at = 4 if m is not None else 2
        (qh,) = struct.unpack_from("<I", b, at)
        qs = b[at + 4:at + 20]
        out = [f(0)] * 32
        for j in range(16):
            x0 = (qs[j] & 0xF) | (((qh >> j) & 1) << 4)
            x1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)
            if m is None:
                out[j], out[j + 16] = d * f(x0 - 16), d * f(x1 - 16)
            else:
                out[j], out[j + 16] = d * f(x0) + m, d * f(x1) + m
        return out
    raise AssertionError(name)


def random_blocks(name: str, n: int, rng) -> bytes:
    """n blocks of random bytes whose fp16 fields are sane (finite, moderate)."""
    t = BY_NAME[name]
    raw = rng.integers(0, 256, (n, t.nbytes), dtype=np.uint8)
    halves = {"Q8_0": [0], "Q4_0": [0], "Q5_0": [0], "Q4_1": [0, 2], "Q5_1": [0, 2],
              "Q4_K": [0, 2], "Q6_K": [208], "Q2_K": [80, 82], "Q3_K": [108], "Q5_K": [0, 2],
              "IQ4_NL": [0], "IQ4_XS": [0]}.get(name, [])
    for at in halves:
        raw[:, at:at + 2] = rng.uniform(-2, 2, (n, 1)).astype("<f2").view(np.uint8)
    return raw.tobytes()


@pytest.mark.parametrize("name", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_block_dequantizers_match_per_block_decode(name: str) -> None:
    rng = np.random.default_rng(1)
    t = BY_NAME[name]
    raw = random_blocks(name, 6, rng)  # 2 rows of 3 blocks
    got = dequantize(raw, t, 2, 96)
    want = [v for i in range(6) for v in decode_block(name, raw[i * t.nbytes:(i + 1) * t.nbytes])]
    assert got.dtype == np.float32 and got.shape == (2, 96)
    assert np.array_equal(got.reshape(-1), np.array(want, np.float32))


def test_float_types_match_hand_decode() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    assert np.array_equal(dequantize(x.tobytes(), BY_NAME["F32"], 3, 8), x)
    h = x.astype(np.float16)
    assert np.array_equal(dequantize(h.tobytes(), BY_NAME["F16"], 3, 8), h.astype(np.float32))
    bf = (x.view(np.uint32) >> 16).astype("<u2")  # truncated bf16; decode = bits << 16
    want = np.array([struct.unpack("<f", struct.pack("<I", int(v) << 16))[0]
                     for v in bf.reshape(-1)], np.float32).reshape(3, 8)
    assert np.array_equal(dequantize(bf.tobytes(), BY_NAME["BF16"], 3, 8), want)


@pytest.mark.parametrize("name", SUPPORTED_NAMES)
def test_dequantizers_match_gguf_package(name: str) -> None:
    """Second oracle: the gguf package's numpy decoders (K-quants checked only here)."""
    rng = np.random.default_rng(3)
    t = BY_NAME[name]
    cols = max(256, t.block)
    if t.block > 1:
        raw = random_blocks(name, 2 * cols // t.block, rng)
    else:  # every bit pattern, NaNs and infinities included
        raw = rng.integers(0, 256, 2 * cols * t.nbytes, dtype=np.uint8).tobytes()
    want = gguf.quants.dequantize(np.frombuffer(raw, np.uint8).reshape(2, -1), T[name])
    got = dequantize(raw, t, 2, cols)
    assert np.array_equal(got, want.astype(np.float32).reshape(2, cols), equal_nan=True)


def test_q8_0_split_keeps_values() -> None:
    rng = np.random.default_rng(4)
    raw = random_blocks("Q8_0", 4, rng)
    q, s = q8_0_split(raw, 2, 64)
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (2, 2)
    assert np.array_equal(Q8Tensor(q, s, 32).dequantize(), dequantize(raw, BY_NAME["Q8_0"], 2, 64))
    assert q[0, 0] == struct.unpack_from("b", raw, 2)[0] and s[0, 0] == np.float32(_h(raw, 0))


# ---- tiny crafted GGUF files ----

C = Config(dim=64, hidden_dim=96, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=40,
           seq_len=32, shared_classifier=True, rope_theta=5000.0,
           norm_eps=float(np.float32(1e-5)))
LAYER = {"rms_att": "attn_norm", "wq": "attn_q", "wk": "attn_k", "wv": "attn_v",
         "wo": "attn_output", "rms_ffn": "ffn_norm", "w1": "ffn_gate", "w2": "ffn_down",
         "w3": "ffn_up"}
TOKENS = [f"t{i}" for i in range(C.vocab_size)]


def base_kv(c: Config = C) -> dict:
    return {
        "llama.embedding_length": c.dim, "llama.feed_forward_length": c.hidden_dim,
        "llama.block_count": c.n_layers, "llama.attention.head_count": c.n_heads,
        "llama.attention.head_count_kv": c.n_kv_heads, "llama.context_length": c.seq_len,
        "llama.rope.freq_base": c.rope_theta, "llama.attention.layer_norm_rms_epsilon":
        c.norm_eps, "llama.rope.dimension_count": c.head_size, "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": TOKENS, "tokenizer.ggml.token_type": [1] * len(TOKENS),
        "tokenizer.ggml.merges": ["t 1", "t 2"], "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.add_bos_token": False, "tokenizer.chat_template": "{{ x }}",
    }


def float_tensors(c: Config = C, tied: bool = True, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d, h, kv = c.dim, c.hidden_dim, c.kv_dim

    def m(r: int, k: int) -> np.ndarray:
        return (rng.standard_normal((r, k)) / np.sqrt(k)).astype(np.float32)

    t = {"token_embd.weight": m(c.vocab_size, d),
         "output_norm.weight": rng.uniform(0.5, 1.5, d).astype(np.float32)}
    if not tied:
        t["output.weight"] = m(c.vocab_size, d)
    shapes = {"attn_q": (d, d), "attn_k": (kv, d), "attn_v": (kv, d), "attn_output": (d, d),
              "ffn_gate": (h, d), "ffn_down": (d, h), "ffn_up": (h, d)}
    for i in range(c.n_layers):
        for n in ("attn_norm", "ffn_norm"):
            t[f"blk.{i}.{n}.weight"] = rng.uniform(0.5, 1.5, d).astype(np.float32)
        for n, s in shapes.items():
            t[f"blk.{i}.{n}.weight"] = m(*s)
    return t


def write_gguf(path: Path, tensors: dict[str, np.ndarray], types: dict | None = None,
               kv: dict | None = None, drop: tuple = (), arch: str = "llama",
               alignment: int | None = None, raw: dict | None = None) -> Path:
    """A GGUF file by gguf.GGUFWriter. `types` maps tensor names to GGML type names (default
    F32, quantized with gguf.quants); `raw` gives (bytes array, type name) pairs as they are."""
    w = gguf.GGUFWriter(str(path), arch)
    if alignment:
        w.add_custom_alignment(alignment)
    keys = {k: v for k, v in {**base_kv(), **(kv or {})}.items() if k not in drop}
    for k, v in keys.items():
        if isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        elif isinstance(v, str):
            w.add_string(k, v)
        else:
            w.add_array(k, v)
    for name, a in tensors.items():
        tn = (types or {}).get(name, "F32")
        if raw and name in raw:
            data, tn = raw[name]
            w.add_tensor(name, data, raw_dtype=T[tn])
        elif tn == "F32":
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, gguf.quants.quantize(a, T[tn]), raw_dtype=T[tn])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def stored_values(a: np.ndarray, tn: str) -> np.ndarray:
    """What a tensor of type tn written from `a` decodes to (gguf package's decoder)."""
    if tn == "F32":
        return a
    return gguf.quants.dequantize(gguf.quants.quantize(a, T[tn]), T[tn]).astype(np.float32)


def weights_from(t: dict[str, np.ndarray], c: Config, fn=lambda n, a: a) -> Weights:
    """Weights laid out by hand from GGUF names; fn(name, array) converts matrices."""
    w = Weights(tok_embeddings=t["token_embd.weight"],
                rms_att=np.stack([t[f"blk.{i}.attn_norm.weight"] for i in range(c.n_layers)]),
                rms_ffn=np.stack([t[f"blk.{i}.ffn_norm.weight"] for i in range(c.n_layers)]),
                rms_final=t["output_norm.weight"])
    for f, n in LAYER.items():
        if f.startswith("w"):
            setattr(w, f, [fn(f"blk.{i}.{n}.weight", t[f"blk.{i}.{n}.weight"])
                           for i in range(c.n_layers)])
    cls = "token_embd.weight" if c.shared_classifier else "output.weight"
    w.wcls = fn(cls, t[cls])
    return w


TOKS = [3, 17, 5, 38, 0, 22, 9, 9, 31, 2]
MIXED = {"blk.0.attn_q.weight": "Q4_0", "blk.0.attn_k.weight": "Q4_1", "blk.0.ffn_up.weight":
         "F16", "blk.1.ffn_down.weight": "BF16", "blk.1.attn_v.weight": "Q8_0",
         "blk.1.ffn_gate.weight": "Q5_0", "token_embd.weight": "Q8_0"}


@pytest.mark.parametrize("tied", [True, False])
def test_f32_mode_round_trip_and_logits(tmp_path: Path, tied: bool) -> None:
    t = float_tensors(tied=tied)
    p = write_gguf(tmp_path / "m.gguf", t, MIXED)
    m = read_gguf(p, quant="f32")
    c = Config(**{**C.__dict__, "shared_classifier": tied})
    assert m.format == "gguf" and m.config == c and m.path == str(p)
    want = {n: stored_values(a, MIXED.get(n, "F32")) for n, a in t.items()}
    ww = weights_from(want, c)
    for f in ("tok_embeddings", "rms_att", "rms_ffn", "rms_final", "wcls", *LAYER):
        got, exp = getattr(m.weights, f), getattr(ww, f)
        for g, e in zip(got if isinstance(got, list) else [got],
                        exp if isinstance(exp, list) else [exp], strict=True):
            assert g.dtype == np.float32 and np.array_equal(g, e), f
    assert (m.weights.wcls is m.weights.tok_embeddings) == tied
    # The loaded config (rope theta, eps, GQA) runs like the float64 reference on the same
    # weights: bounded float32-vs-float64 error.
    got = Engine(m, threads=1).prefill(TOKS, all_logits=True)
    ref = Reference(c, ww).logits(TOKS)
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    assert m.metadata["tokenizer.ggml.tokens"] == TOKENS
    assert m.metadata["tokenizer.ggml.bos_token_id"] == 1
    assert m.metadata["tokenizer.ggml.add_bos_token"] is False
    assert m.metadata["general.architecture"] == "llama"
    assert m.metadata["llama.rope.freq_base"] == 5000.0


def test_q8_mode_is_q8_0_direct_else_requantized(tmp_path: Path) -> None:
    t = float_tensors()
    p = write_gguf(tmp_path / "m.gguf", t, MIXED)
    m = read_gguf(p, quant="q8")
    want = {n: stored_values(a, MIXED.get(n, "F32")) for n, a in t.items()}

    def conv(name: str, a: np.ndarray) -> Q8Tensor:
        if MIXED.get(name) == "Q8_0":  # the file's own blocks, values unchanged
            q, s = q8_0_split(gguf.quants.quantize(t[name], T.Q8_0), *a.shape)
            return Q8Tensor(q, s, 32)
        return quantize_q8(a, 32)[0]

    ww = weights_from(want, C, conv)
    for f in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
        for g, e in zip(getattr(m.weights, f), getattr(ww, f), strict=True):
            assert g.group_size == 32 and np.array_equal(g.q, e.q) and np.array_equal(g.s, e.s)
    assert np.array_equal(m.weights.wcls.q, ww.wcls.q)
    assert np.array_equal(m.weights.wcls.dequantize(), want["token_embd.weight"])
    # the tied table is the classifier's Q8 matrix (one copy; rows dequantized on lookup)
    assert m.weights.tok_embeddings is m.weights.wcls
    ref = LoadedModel(C, ww, "hand", "synthetic")
    a = Engine(m, threads=1).prefill(TOKS, all_logits=True)
    b = Engine(ref, threads=1).prefill(TOKS, all_logits=True)
    assert np.array_equal(a, b)


def q8_0_bytes(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Q8_0 blocks by hand: (rows, cols) int8 and (rows, cols/32) fp16 -> (rows, bytes) u8."""
    rows, cols = q.shape
    b = np.empty((rows, cols // 32, 34), np.uint8)
    b[..., :2] = d.astype("<f2").reshape(rows, -1, 1).view(np.uint8)
    b[..., 2:] = q.reshape(rows, -1, 32).view(np.uint8)
    return b.reshape(rows, -1)


def test_q8_0_with_minus_128_is_requantized(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    t = float_tensors()
    q = rng.integers(-127, 128, (C.dim, C.dim), dtype=np.int8)
    q[3, 40] = -128
    d = rng.uniform(0.001, 0.01, (C.dim, 2)).astype(np.float16)
    q_ok = rng.integers(-127, 128, (C.dim, C.dim), dtype=np.int8)
    raw = {"blk.0.attn_q.weight": (q8_0_bytes(q, d), "Q8_0"),
           "blk.0.attn_output.weight": (q8_0_bytes(q_ok, d), "Q8_0")}
    m = read_gguf(write_gguf(tmp_path / "m.gguf", t, raw=raw), quant="q8")
    wq, wo = m.weights.wq[0], m.weights.wo[0]
    values = q.astype(np.float32) * np.repeat(d.astype(np.float32), 32, axis=1)
    want = quantize_q8(values, 32)[0]
    assert wq.q.min() >= -127 and np.array_equal(wq.q, want.q) and np.array_equal(wq.s, want.s)
    assert np.array_equal(wo.q, q_ok) and np.array_equal(wo.s, d.astype(np.float32))
    f32 = read_gguf(tmp_path / "m.gguf", quant="f32")
    assert np.array_equal(f32.weights.wq[0], values)


def test_group_size_falls_back_below_32(tmp_path: Path) -> None:
    c = Config(**{**C.__dict__, "hidden_dim": 80})  # 80: a multiple of 16, not of 32
    t = float_tensors(c)
    kv = {"llama.feed_forward_length": 80}
    m = read_gguf(write_gguf(tmp_path / "m.gguf", t, {"token_embd.weight": "Q8_0"}, kv=kv))
    assert m.config.hidden_dim == 80 and m.weights.group_size == 16
    assert m.weights.wcls.group_size == 16  # Q8_0 requantized to the model's group size
    assert np.array_equal(m.weights.w2[1].q, quantize_q8(t["blk.1.ffn_down.weight"], 16)[0].q)


def test_bad_quant_mode(tmp_path: Path) -> None:
    p = write_gguf(tmp_path / "m.gguf", float_tensors())
    with pytest.raises(ValueError, match="quant must be one of q8, f32"):
        read_gguf(p, quant="q4")


# ---- malformed files: every one a ModelFormatError naming the file ----

@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    p = tmp_path_factory.mktemp("g") / "good.gguf"
    return write_gguf(p, float_tensors(), {"blk.0.attn_q.weight": "Q4_0"}).read_bytes()


def fails(path: Path, data: bytes | None, match: str) -> None:
    if data is not None:
        path.write_bytes(data)
    with pytest.raises(ModelFormatError, match=match) as e:
        read_gguf(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def info_at(data: bytes, name: str) -> tuple[int, int, int]:
    """(offset of n_dims, offset of type, offset of offset) for tensor `name`'s info."""
    key = struct.pack("<Q", len(name)) + name.encode()
    at = data.index(key) + len(key)
    (n_dims,) = struct.unpack_from("<I", data, at)
    return at, at + 4 + 8 * n_dims, at + 8 + 8 * n_dims


def patched(data: bytes, at: int, fmt: str, value) -> bytes:
    b = bytearray(data)
    struct.pack_into(fmt, b, at, value)
    return bytes(b)


def test_truncated_files(tmp_path: Path, good: bytes) -> None:
    _, _, last = info_at(good, "blk.1.ffn_up.weight")
    cuts = [0, 3, 10, 23, 30, 200, last - 5, last + 4, len(good) // 2, len(good) - 1]
    for cut in cuts:
        fails(tmp_path / "t.gguf", good[:cut], "truncated")


def test_tensor_beyond_end_of_file(tmp_path: Path, good: bytes) -> None:
    _, _, off = info_at(good, "blk.0.attn_q.weight")
    fails(tmp_path / "b.gguf", patched(good, off, "<Q", 1 << 40),
          "tensor blk.0.attn_q.weight data .* beyond the end of the file")
    fails(tmp_path / "c.gguf", patched(good, off, "<Q", (1 << 64) - 32), "beyond the end")
    n_dims_at, _, _ = info_at(good, "output_norm.weight")  # size: a 1-D tensor made huge
    fails(tmp_path / "d.gguf", patched(good, n_dims_at + 4, "<Q", 1 << 30),
          "tensor output_norm.weight data .* beyond the end of the file")


def test_misaligned_and_overlapping_tensors(tmp_path: Path) -> None:
    data = write_gguf(tmp_path / "a.gguf", float_tensors(), alignment=64).read_bytes()
    assert read_gguf(tmp_path / "a.gguf").config == C
    _, _, off = info_at(data, "blk.0.attn_k.weight")
    (o,) = struct.unpack_from("<Q", data, off)
    fails(tmp_path / "m.gguf", patched(data, off, "<Q", o + 32),
          "blk.0.attn_k.weight data offset .* not a multiple of the alignment 64")
    fails(tmp_path / "o.gguf", patched(data, off, "<Q", o - 64), "overlap")
    bad = write_gguf(tmp_path / "x.gguf", float_tensors(), kv={"general.alignment": 48})
    fails(bad, None, "general.alignment must be a power of two")


def test_unknown_and_unsupported_tensor_types(tmp_path: Path, good: bytes) -> None:
    _, typ, _ = info_at(good, "blk.1.attn_v.weight")
    fails(tmp_path / "u.gguf", patched(good, typ, "<I", 99),
          r"tensor blk.1.attn_v.weight has unknown type 99 \(supported: F32, F16, Q4_0, Q4_1")
    t = float_tensors()
    raw = {"blk.1.attn_v.weight": (np.zeros((C.kv_dim, 2 * 18), np.uint8), "IQ4_NL"),
           "blk.1.attn_k.weight": (np.zeros((C.kv_dim, 2 * 40), np.uint8), "Q8_1")}
    fails(write_gguf(tmp_path / "i.gguf", t, raw=raw), None,
          r"tensor blk.1.attn_k.weight has type Q8_1, not supported \(supported: F32.*BF16")


def test_wrong_magic_and_version(tmp_path: Path, good: bytes) -> None:
    fails(tmp_path / "m.gguf", b"GGUX" + good[4:], "not a GGUF file")
    fails(tmp_path / "v.gguf", patched(good, 4, "<I", 7), "unsupported GGUF version 7")
    fails(tmp_path / "e.gguf", patched(good, 4, ">I", 3), "big-endian")


@pytest.mark.parametrize("key", ["llama.embedding_length", "llama.feed_forward_length",
                                 "llama.block_count", "llama.attention.head_count",
                                 "llama.context_length",
                                 "llama.attention.layer_norm_rms_epsilon"])
def test_missing_required_keys(tmp_path: Path, key: str) -> None:
    fails(write_gguf(tmp_path / "k.gguf", float_tensors(), drop=(key,)), None,
          f"missing required key {key}")


def test_defaults_for_optional_keys(tmp_path: Path) -> None:
    drop = ("llama.attention.head_count_kv", "llama.rope.freq_base",
            "llama.rope.dimension_count")
    c = Config(**{**C.__dict__, "n_kv_heads": C.n_heads, "rope_theta": 10000.0})
    t = float_tensors(c)
    assert read_gguf(write_gguf(tmp_path / "d.gguf", t, drop=drop)).config == c


@pytest.mark.parametrize("drop", ["tokenizer.ggml.model", "tokenizer.ggml.tokens"])
def test_missing_tokenizer_metadata(tmp_path: Path, drop: str) -> None:
    fails(write_gguf(tmp_path / "t.gguf", float_tensors(), drop=(drop,)), None,
          "missing tokenizer metadata")


@pytest.mark.parametrize("kv, match", [
    ({"llama.embedding_length": 32, "llama.rope.dimension_count": 8},
     r"token_embd.weight has shape \[40, 64\], expected \[40, 32\]"),
    ({"llama.attention.head_count_kv": 4}, "blk.0.attn_k.weight has shape \\[32, 64\\], "
                                           "expected \\[64, 64\\]"),
    ({"llama.feed_forward_length": 128}, "blk.0.ffn_gate.weight has shape"),
    ({"llama.block_count": 3}, "missing tensor blk.2.attn_norm.weight"),
    ({"llama.vocab_size": 41}, "vocab_size is 41 but tokenizer.ggml.tokens has 40"),
    ({"llama.attention.head_count": 5}, "inconsistent heads"),
    ({"llama.attention.head_count": 0}, "must be a positive int"),
    ({"llama.rope.freq_base": "x"}, "llama.rope.freq_base must be a positive float"),
    ({"llama.rope.dimension_count": 8}, "rope.dimension_count is 8"),
    ({"llama.rope.scaling.type": "yarn"}, "RoPE scaling .*yarn.* is not supported"),
    ({"llama.rope.scaling.factor": 4.0}, "RoPE scaling"),
    ({"llama.expert_count": 8}, "mixture-of-experts"),
])
def test_config_mismatches(tmp_path: Path, kv: dict, match: str) -> None:
    fails(write_gguf(tmp_path / "s.gguf", float_tensors(), kv=kv), None, match)


def test_shape_mismatch_in_tensor(tmp_path: Path) -> None:
    t = float_tensors()
    t["blk.1.ffn_down.weight"] = t["blk.1.ffn_down.weight"][:, :64].copy()
    fails(write_gguf(tmp_path / "s.gguf", t), None,
          r"blk.1.ffn_down.weight has shape \[64, 64\], expected \[64, 96\]")
    t = float_tensors()  # Llama 3 RoPE divisors: head_size / 2 = 8 of them, positive
    t["rope_freqs.weight"] = np.ones(5, np.float32)
    fails(write_gguf(tmp_path / "r.gguf", t), None,
          r"tensor rope_freqs.weight has shape \[5\], expected \[8\]")
    t["rope_freqs.weight"] = np.array([1, 1, 1, 0, 1, 1, 1, 1], np.float32)
    fails(write_gguf(tmp_path / "z.gguf", t), None, "rope_freqs.weight must be positive")


def test_other_architectures_refused(tmp_path: Path) -> None:
    kv = {k.replace("llama.", "falcon."): v for k, v in base_kv().items()}
    fails(write_gguf(tmp_path / "q.gguf", float_tensors(), kv=kv, arch="falcon"), None,
          r"architecture 'falcon' is not supported \(supported: llama, gemma3, qwen2, qwen3\)")


def test_absurd_counts_fail_at_once(tmp_path: Path, good: bytes) -> None:
    fails(tmp_path / "a.gguf", patched(good, 8, "<Q", 1 << 62), "tensor infos")
    fails(tmp_path / "b.gguf", patched(good, 16, "<Q", 1 << 62), "key/values")
    key = struct.pack("<Q", len("tokenizer.ggml.token_type")) + b"tokenizer.ggml.token_type"
    at = good.index(key) + len(key) + 4 + 4  # value type ARRAY, element type, then the count
    fails(tmp_path / "c.gguf", patched(good, at, "<Q", 1 << 60), "truncated: .*array of")
    key = struct.pack("<Q", len("tokenizer.ggml.tokens")) + b"tokenizer.ggml.tokens"
    at = good.index(key) + len(key) + 4 + 4 + 8  # first string's length
    fails(tmp_path / "d.gguf", patched(good, at, "<Q", 1 << 63), "truncated")
    _, typ, _ = info_at(good, "blk.0.wq.weight".replace("wq", "attn_q"))
    n_dims_at = typ - 8 * 2 - 4
    fails(tmp_path / "e.gguf", patched(good, n_dims_at, "<I", 1 << 30), "dimensions")


def test_huge_array_at_end_of_file(tmp_path: Path) -> None:
    """49 bytes that keep gguf.GGUFReader looping for 2**40 iterations: an error at once."""
    b = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + \
        struct.pack("<IIQ", 9, 0, 1 << 40)
    fails(tmp_path / "h.gguf", b, "truncated: value of k \\(array of 1099511627776\\)")


def test_random_header_corruption_gives_clean_errors(tmp_path: Path, good: bytes) -> None:
    """Flipped bytes anywhere in the header: a clean ModelFormatError or a loaded model."""
    rng = np.random.default_rng(6)
    _, _, end = info_at(good, "blk.1.ffn_up.weight")
    p, errors = tmp_path / "f.gguf", 0
    for _ in range(150):
        b = bytearray(good)
        for at in rng.integers(0, end + 8, 3):
            b[at] = rng.integers(0, 256)
        p.write_bytes(bytes(b))
        try:
            read_gguf(p, quant="f32")
        except ModelFormatError as e:
            assert str(p) in str(e)
            errors += 1
    assert errors > 50


# ---- the real model ----

PROMPT_IDS = [504, 3575, 282, 4649, 314]  # "The capital of France is" (llama.cpp tokenize)
LLAMA_CPP_NEXT = [7042, 30, 198, 198]  # " Paris.\n\n", greedy, from llama.cpp on this file


def greedy(model: LoadedModel, ids: list[int], n: int) -> list[int]:
    e = Engine(with_context(model, 64), threads=2)
    out, logits = [], e.prefill(ids)
    for i in range(n):
        out.append(int(np.argmax(logits)))
        logits = e.forward(out[-1], len(ids) + i)
    return out


@pytest.mark.parametrize("quant", ["f32", "q8"])
def test_smollm2_gguf_greedy(smollm2_gguf: Path, quant: str) -> None:
    m = read_gguf(smollm2_gguf, quant=quant)
    assert m.config == Config(dim=576, hidden_dim=1536, n_layers=30, n_heads=9, n_kv_heads=3,
                              vocab_size=49152, seq_len=8192, shared_classifier=True,
                              rope_theta=100000.0, norm_eps=float(np.float32(1e-5)))
    md = m.metadata
    assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "smollm"
    assert len(md["tokenizer.ggml.merges"]) == 48900 and md["tokenizer.ggml.eos_token_id"] == 2
    assert md["tokenizer.chat_template"].startswith("{% for message in messages %}")
    toks = md["tokenizer.ggml.tokens"]
    assert [toks[i] for i in PROMPT_IDS + [7042]] == ["The", "Ġcapital", "Ġof", "ĠFrance",
                                                      "Ġis", "ĠParis"]
    if quant == "q8":  # token_embd is Q8_0 (no -128): the tied classifier is taken as is
        assert m.weights.group_size == 32 and m.weights.wcls.group_size == 32
    assert greedy(m, PROMPT_IDS, 4) == LLAMA_CPP_NEXT


def test_smollm2_gguf_text_with_gguf_tokenizer(smollm2_gguf: Path) -> None:
    """The same through the GGUF tokenizer built from this reader's metadata."""
    tokenizer_hf = pytest.importorskip("isaforge.text.hf")
    m = read_gguf(smollm2_gguf, quant="q8")
    tok = tokenizer_hf.load_tokenizer(m.metadata, str(smollm2_gguf))
    ids = tok.encode("The capital of France is")
    assert ids == PROMPT_IDS  # no BOS: tokenizer.ggml.add_bos_token is false
    assert tok.decode_tokens(greedy(m, ids, 4)) == " Paris.\n\n"


def test_llama_cpp_agreement_short(smollm2_gguf: Path) -> None:
    """Teacher-forced top-1 agreement with llama.cpp over one short greedy continuation."""
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(smollm2_gguf), n_ctx=64, n_threads=2, logits_all=True,
                          verbose=False)
    ids = llm.tokenize(b"Once upon a time, in a small village,", add_bos=False)
    llm.eval(ids)
    for _ in range(16):
        llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
    seq = list(llm.eval_tokens)
    theirs = np.argmax(np.asarray(llm.scores[:len(seq)]), axis=1)
    m = with_context(read_gguf(smollm2_gguf, quant="f32"), 64)
    ours = np.argmax(Engine(m, threads=2).prefill(seq, all_logits=True), axis=1)
    assert np.mean(ours == theirs) >= 0.9


def test_empty_or_foreign_gguf_is_named_as_such(tmp_path: Path) -> None:
    """A file named .gguf without the magic is refused as not GGUF (it used to fall through to
    the llama2.c reader, whose error spoke of its header sizes)."""
    from isaforge.formats import read_any

    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelFormatError, match=r"empty\.gguf: not a GGUF file: it is empty$"):
        read_any(empty)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"\x00" * 300)
    with pytest.raises(ModelFormatError, match="not the magic b'GGUF' \\(300 bytes\\)"):
        read_any(other)
