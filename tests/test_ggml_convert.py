"""The C converter from GGML blocks to Q8 (_native.ggml_to_q8) against its numpy oracle,
as_q8(dequantize(...)): bit for bit on random blocks of every type, on the gguf package's and
llama.cpp's own quantizations, for any row range and thread count; bad input is refused."""

from __future__ import annotations

import ctypes
import dataclasses
from pathlib import Path

import gguf
import numpy as np
import pytest

from isaforge import _native
from isaforge.formats.gguf import _open, read_gguf
from isaforge.quant.ggml import GGML_TYPES, dequantize, q8_0_split
from isaforge.quant.q8 import quantize_q8
from test_gguf import C, float_tensors, random_blocks, write_gguf

T = gguf.GGMLQuantizationType
BY_NAME = {t.name: (tid, t) for tid, t in GGML_TYPES.items()}
FLOAT_TYPES = ("F32", "F16", "BF16")


def oracle(raw, name: str, rows: int, cols: int, gs: int):
    """The numpy path: float32 values, then quantize_q8 at gs."""
    t = quantize_q8(dequantize(raw, BY_NAME[name][1], rows, cols), gs)[0]
    return t.q, t.s


def convert(raw, name: str, rows: int, cols: int, gs: int, threads: int = 1, keep=False,
            r0: int = 0, r1: int | None = None):
    q = np.full((rows, cols), 99, np.int8)
    s = np.full((rows, cols // gs), 7.0, np.float32)
    kept = _native.ggml_to_q8(BY_NAME[name][0], raw, rows, cols, gs, q, s, threads=threads,
                              keep_q8_0=keep, r0=r0, r1=rows if r1 is None else r1)
    return q, s, kept


def same(a, b) -> bool:
    """int8 equal and float32 scales equal bit for bit."""
    return np.array_equal(a[0], b[0]) and np.array_equal(a[1].view(np.uint32),
                                                         b[1].view(np.uint32))


def float_row_data(name: str, rows: int, cols: int, rng) -> bytes:
    """Values that reach every branch of the quantizer: ties at .5 (scale exactly 1 in group
    0 of row 0), an all-zero group, a subnormal-scale group, negative zeros, wide magnitudes."""
    x = (rng.standard_normal((rows, cols)) * np.exp(rng.uniform(-8, 8, (rows, 1)))).astype(
        np.float32)
    x[0, :8] = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]
    x[0, 8:16] = 0.0
    x[-1, -8:] = np.float32(1e-40) * np.arange(-4, 4, dtype=np.float32)  # subnormal scale
    x[-1, -16:-8] = -0.0
    if name == "F32":
        return x.tobytes()
    if name == "F16":
        return x.astype("<f2").tobytes()
    return (x.view(np.uint32) >> 16).astype("<u2").tobytes()


def data(name: str, rows: int, cols: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    if name in FLOAT_TYPES:
        return float_row_data(name, rows, cols, rng)
    return random_blocks(name, rows * cols // BY_NAME[name][1].block, rng)


@pytest.mark.parametrize("name", [t.name for t in GGML_TYPES.values()])
def test_random_blocks_equal_numpy_bit_for_bit(name: str) -> None:
    t = BY_NAME[name][1]
    cols = 512 if t.block == 256 else 256
    for seed, rows in enumerate((1, 3, 7)):
        raw = data(name, rows, cols, seed)
        for gs in (8, 16, 32, 64, 128):
            want = oracle(raw, name, rows, cols, gs)
            for threads in (1, 2, 3):
                q, s, kept = convert(raw, name, rows, cols, gs, threads)
                assert not kept and same((q, s), want), (name, rows, gs, threads)


@pytest.mark.parametrize("name", ["Q4_K", "Q3_K", "F16"])
def test_row_range_writes_only_its_rows(name: str) -> None:
    rows, cols, gs = 9, 512, 32
    raw = data(name, rows, cols, 11)
    wq, ws = oracle(raw, name, rows, cols, gs)
    for r0, r1 in ((0, 9), (2, 5), (8, 9), (4, 4)):
        for threads in (1, 2, 3):
            q, s, _ = convert(raw, name, rows, cols, gs, threads, r0=r0, r1=r1)
            assert same((q[r0:r1], s[r0:r1]), (wq[r0:r1], ws[r0:r1]))
            outside = np.r_[0:r0, r1:rows]
            assert (q[outside] == 99).all() and (s[outside] == 7.0).all()


def test_gguf_package_quantizations_equal_numpy() -> None:
    """Blocks written by the gguf package's quantizers (the types it implements)."""
    rng = np.random.default_rng(12)
    x = (rng.standard_normal((5, 256)) * 0.05).astype(np.float32)
    for name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16"):
        raw = gguf.quants.quantize(x, T[name]).tobytes()
        for gs in (16, 32, 64):
            assert same(convert(raw, name, 5, 256, gs, 2)[:2], oracle(raw, name, 5, 256, gs))


def test_q8_0_kept_as_stored_unless_minus_128() -> None:
    rows, cols = 5, 128
    rng = np.random.default_rng(13)
    raw = np.frombuffer(random_blocks("Q8_0", rows * cols // 32, rng), np.uint8).copy()
    blocks = raw.reshape(-1, 34)
    blocks[:, 2:][blocks[:, 2:] == 0x80] = 0x81  # no -128 anywhere
    for threads in (1, 2, 3):
        q, s, kept = convert(raw, "Q8_0", rows, cols, 32, threads, keep=True)
        assert kept and same((q, s), q8_0_split(raw, rows, cols))
        q, s, kept = convert(raw, "Q8_0", rows, cols, 16, threads, keep=True)
        assert not kept and same((q, s), oracle(raw, "Q8_0", rows, cols, 16))
    blocks[3, 2 + 17] = 0x80  # one -128: the kernels need [-127, 127], so requantized
    for threads in (1, 2, 3):
        q, s, kept = convert(raw, "Q8_0", rows, cols, 32, threads, keep=True)
        assert not kept and q.min() >= -127 and same((q, s), oracle(raw, "Q8_0", rows, cols, 32))


def test_bad_input_is_refused_with_a_reason() -> None:
    raw = data("Q4_K", 2, 256, 14)
    tid = BY_NAME["Q4_K"][0]
    q, s = np.zeros((2, 256), np.int8), np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match=r"Q4_K tensor of 2 x 256 values takes 288 bytes, got 287"):
        _native.ggml_to_q8(tid, raw[:-1], 2, 256, 32, q, s)
    with pytest.raises(ValueError, match="takes 288 bytes, got 289"):
        _native.ggml_to_q8(tid, raw + b"\0", 2, 256, 32, q, s)
    with pytest.raises(ValueError, match="ggml type 9 is not supported"):
        _native.ggml_to_q8(9, raw, 2, 256, 32, q, s)
    with pytest.raises(ValueError, match="row length 128 is not a multiple of the block size 256"):
        _native.ggml_to_q8(tid, raw, 4, 128, 32, np.zeros((4, 128), np.int8), s)
    with pytest.raises(ValueError, match="group size 24 does not divide the row length 256"):
        _native.ggml_to_q8(tid, raw, 2, 256, 24, q, np.zeros(64, np.float32))
    with pytest.raises(ValueError, match="q: buffer holds 511 bytes, 512 needed"):
        _native.ggml_to_q8(tid, raw, 2, 256, 32, np.zeros(511, np.int8), s)
    with pytest.raises(ValueError, match="s: buffer holds"):
        _native.ggml_to_q8(tid, raw, 2, 256, 16, q, s)
    with pytest.raises(ValueError, match="row range"):
        _native.ggml_to_q8(tid, raw, 2, 256, 32, q, s, r0=1, r1=3)
    f = np.ones((2, 64), np.float32)
    f[1, 5] = np.inf
    with pytest.raises(ValueError, match="F32 tensor row 1 holds NaN or infinity"):
        _native.ggml_to_q8(0, f.tobytes(), 2, 64, 32, np.zeros((2, 64), np.int8),
                           np.zeros((2, 2), np.float32), threads=2)


# ---- files quantized by llama.cpp (llama-cpp-python's quantizer) ----

LLAMA_FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q8_0": 7, "Q2_K": 10,
                "Q3_K_M": 12, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25,
                "IQ4_XS": 30}


@pytest.fixture(scope="module")
def llama_quantized(tmp_path_factory) -> dict[str, Path]:
    llama_cpp = pytest.importorskip("llama_cpp")
    d = tmp_path_factory.mktemp("lq")
    c = dataclasses.replace(C, dim=256, hidden_dim=512)
    kv = {"llama.embedding_length": 256, "llama.feed_forward_length": 512,
          "llama.rope.dimension_count": c.head_size}
    src = write_gguf(d / "f32.gguf", float_tensors(c, seed=3), kv=kv)
    out = {}
    for name, ftype in LLAMA_FTYPES.items():
        p = llama_cpp.llama_model_quantize_default_params()
        p.ftype, p.nthread = ftype, 1
        out[name] = d / f"{name}.gguf"
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(out[name]).encode(),
                                            ctypes.byref(p))
        assert rc == 0, name
    return out


def test_llama_cpp_quantizations_equal_numpy(llama_quantized) -> None:
    seen = set()
    for path in llama_quantized.values():
        g, mm = _open(path)
        for t in g.tensors.values():
            if len(t.shape) != 2:
                continue
            seen.add(t.type_name)
            raw = np.frombuffer(mm, np.uint8, t.nbytes, t.offset)
            for gs in (16, 32):
                got = convert(raw, t.type_name, *t.shape, gs, 2)[:2]
                assert same(got, oracle(raw, t.type_name, *t.shape, gs)), (path, t.name)
    want = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
            "IQ4_NL", "IQ4_XS"}
    assert want <= seen


def test_read_gguf_matrices_equal_the_numpy_path(llama_quantized) -> None:
    """The reader's Q8 matrices are the oracle's (Q8_0 at group 32: the file's own blocks)."""
    for path in (llama_quantized["Q3_K_M"], llama_quantized["IQ4_XS"],
                 llama_quantized["Q8_0"]):
        m = read_gguf(path, quant="q8")
        g, mm = _open(path)
        w = m.weights
        for name, got in [("token_embd.weight", w.tok_embeddings),
                          ("blk.1.attn_v.weight", w.wv[1]), ("blk.0.ffn_down.weight", w.w2[0])]:
            t = g.tensors[name]
            raw = np.frombuffer(mm, np.uint8, t.nbytes, t.offset)
            if t.type_name == "Q8_0" and not (raw.reshape(-1, 34)[:, 2:] == 0x80).any():
                want = q8_0_split(raw, *t.shape)
            else:
                want = oracle(raw, t.type_name, *t.shape, 32)
            assert got.group_size == 32 and same((got.q, got.s), want), (path, name)
