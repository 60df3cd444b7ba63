"""The numpy reference model: math helpers, the runq.c Q8 path, and run.c's golden output."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import STORIES as MODEL_DIR
from conftest import TINY_GQA
from isaforge.formats import read_llama2c
from isaforge.formats.llama2c import quantize_model
from isaforge.quant import quantize_q8
from isaforge.reference import (
    Reference,
    q8_matmul,
    q8_matmul_int_parts,
    quantize_activations,
    rmsnorm,
    rope,
    softmax,
)
from isaforge.types import Config, Q8Tensor, Weights


@pytest.fixture(scope="module")
def stories():
    p = MODEL_DIR / "stories260K.bin"
    if not p.exists():
        pytest.skip(f"test model not found at {p}")
    return read_llama2c(p)


# ---------------------------------------------------------------------------- helpers


def test_rmsnorm_rope_softmax() -> None:
    x = np.array([3.0, 4.0])
    np.testing.assert_allclose(rmsnorm(x, np.ones(2), 0.0), x / np.sqrt(12.5), rtol=1e-15)
    want = [6 / np.sqrt(13), 2 / np.sqrt(13)]  # ss = 12.5 + 0.5
    np.testing.assert_allclose(rmsnorm(x, np.array([2.0, 0.5]), 0.5), want)
    v = np.arange(1.0, 9.0)
    np.testing.assert_array_equal(rope(v, 0, 4), v)
    r = rope(v, 1, 4)
    # pair (0, 1) of each head rotates by 1 rad, pair (2, 3) by 1 / 10000^(2/4) = 0.01 rad
    for i, ang in ((0, 1.0), (2, 0.01), (4, 1.0), (6, 0.01)):
        c, s = np.cos(ang), np.sin(ang)
        np.testing.assert_allclose(
            r[i : i + 2], [v[i] * c - v[i + 1] * s, v[i] * s + v[i + 1] * c], rtol=1e-14
        )
    p = softmax(np.array([1000.0, 1000.0, 0.0]))
    np.testing.assert_allclose(p, [0.5, 0.5, 0.0], atol=1e-300)
    assert rope(v.astype(np.float32), 3, 4).dtype == np.float32


def test_quantize_activations_rounds_half_away_from_zero() -> None:
    x = np.array([2.5, -2.5, 0.5, 127.0, 0, 0, 0, 0, 1.5, -0.5, 3.0, 6.0], np.float32)
    q, s = quantize_activations(x, 4)
    assert q.dtype == np.int8 and s.dtype == np.float32
    # scale 1: 2.5 -> 3, -2.5 -> -3, 0.5 -> 1 (numpy's rint would give 2, -2, 0)
    assert q[:4].tolist() == [3, -3, 1, 127]
    assert np.rint(x[:3]).tolist() == [2, -2, 0]
    # an all-zero group gets scale 0 and q 0
    assert s[1] == 0 and q[4:8].tolist() == [0, 0, 0, 0]
    # scale 6/127: 1.5 / s = 31.75 -> 32, -0.5 / s = -10.58 -> -11, 3 / s = 63.5 -> 64
    assert s[2] == np.float32(6) / np.float32(127)
    assert q[8:].tolist() == [32, -11, 64, 127]
    with pytest.raises(ValueError, match="groups"):
        quantize_activations(np.ones(6, np.float32), 4)


def test_q8_matmul_hand_checked() -> None:
    xq = np.array([1, 2, 3, 4, -5, 6, -7, 8], np.int8)
    wq = np.array([[1, 1, 1, 1, 1, 1, 1, 1], [127, -127, 0, 2, -1, -1, -1, -1]], np.int8)
    parts = q8_matmul_int_parts(xq, wq, 4)
    assert parts.dtype == np.int32
    assert parts.tolist() == [[10, 2], [-119, -2]]
    big = q8_matmul_int_parts(np.full(64, -127, np.int8), np.full((1, 64), -127, np.int8), 64)
    assert big.tolist() == [[64 * 127 * 127]]
    w = Q8Tensor(wq, np.array([[0.5, 0.25], [0.1, 3.0]], np.float32), 4)
    xs = np.array([0.2, 0.7], np.float32)
    out = q8_matmul(xq, xs, w)
    assert out.dtype == np.float32
    f = np.float32
    for r in range(2):  # runq.c: val += ((float)isum * w_scale) * x_scale, group by group
        val = f(0)
        for g in range(2):
            val = f(val + f(f(f(parts[r, g]) * w.s[r, g]) * xs[g]))
        assert out[r] == val
    np.testing.assert_allclose(
        out, [10 * 0.5 * 0.2 + 2 * 0.25 * 0.7, -119 * 0.1 * 0.2 - 2 * 3.0 * 0.7], rtol=1e-6
    )


def test_q8_matmul_matches_dequantized_product() -> None:
    rng = np.random.default_rng(3)
    w, _ = quantize_q8(rng.standard_normal((40, 32)).astype(np.float32), 8)
    x = rng.standard_normal(32).astype(np.float32)
    xq, xs = quantize_activations(x, 8)
    xd = (xq.reshape(-1, 8) * xs[:, None]).ravel().astype(np.float64)
    exact = w.dequantize().astype(np.float64) @ xd
    np.testing.assert_allclose(q8_matmul(xq, xs, w), exact, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------- the model


def _expand_kv(c: Config, w: Weights) -> tuple[Config, Weights]:
    """The same model with every kv head repeated, i.e. plain multi-head attention."""
    hs, mul = c.head_size, c.n_heads // c.n_kv_heads

    def rep(m: np.ndarray) -> np.ndarray:
        heads = m.reshape(c.n_kv_heads, hs, -1)
        return np.repeat(heads, mul, axis=0).reshape(c.dim, -1)

    c2 = Config(
        c.dim,
        c.hidden_dim,
        c.n_layers,
        c.n_heads,
        c.n_heads,
        c.vocab_size,
        c.seq_len,
        c.shared_classifier,
    )
    w2 = Weights(
        w.tok_embeddings,
        w.rms_att,
        w.rms_ffn,
        w.rms_final,
        w.wq,
        [rep(m) for m in w.wk],
        [rep(m) for m in w.wv],
        w.wo,
        w.w1,
        w.w2,
        w.w3,
        w.wcls,
    )
    return c2, w2


def test_gqa_equals_repeated_kv_heads(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    c = TINY_GQA  # vocab 32, seq_len 8, unshared classifier
    L, d, h, kv = c.n_layers, c.dim, c.hidden_dim, c.kv_dim

    def r(*s: int) -> np.ndarray:
        return (rng.standard_normal(s) * 0.4).astype(np.float32)

    w = Weights(
        r(32, d),
        1 + r(L, d),
        1 + r(L, d),
        1 + r(d),
        [r(d, d) for _ in range(L)],
        [r(kv, d) for _ in range(L)],
        [r(kv, d) for _ in range(L)],
        [r(d, d) for _ in range(L)],
        [r(h, d) for _ in range(L)],
        [r(d, h) for _ in range(L)],
        [r(h, d) for _ in range(L)],
        r(32, d),
    )
    toks = [1, 5, 9, 31, 0, 2]
    got = Reference(c, w).logits(toks)
    want = Reference(*_expand_kv(c, w)).logits(toks)
    assert got.shape == (6, 32) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # the unshared classifier is used (not the embedding table)
    w_tied = Weights(**{**w.__dict__, "wcls": w.tok_embeddings})
    assert not np.allclose(Reference(c, w_tied).logits(toks), got)
    with pytest.raises(ValueError, match="position 8"):
        Reference(c, w).forward(1, 8)
    with pytest.raises(ValueError, match="token 32"):
        Reference(c, w).forward(32, 0)


def _greedy(ref: Reference, n: int, start: int = 1) -> list[int]:
    ref.reset()
    toks = [start]
    for pos in range(n):
        toks.append(int(np.argmax(ref.forward(toks[-1], pos))))
    return toks


def test_stories_fp32_deterministic(stories) -> None:
    ref = Reference(stories.config, stories.weights)
    seq = _greedy(ref, 8)
    assert seq == _greedy(Reference(stories.config, stories.weights), 8)
    lg = ref.logits(seq[:-1])
    assert lg.shape == (8, 512) and lg.dtype == np.float64 and np.isfinite(lg).all()
    assert [int(i) for i in lg.argmax(axis=1)] == seq[1:]
    lg32 = Reference(stories.config, stories.weights, np.float32).logits(seq[:-1])
    assert lg32.dtype == np.float32
    np.testing.assert_allclose(lg32, lg, atol=2e-4 * np.abs(lg).max())


def test_stories_q8_path(stories, tmp_path: Path) -> None:
    out = tmp_path / "q.bin"
    quantize_model(MODEL_DIR / "stories260K.bin", out, 4)
    m = read_llama2c(out)
    ref = Reference(m.config, m.weights, np.float32)
    seq = _greedy(ref, 6)
    assert seq == _greedy(Reference(m.config, m.weights, np.float32), 6)
    lq = ref.logits(seq[:-1])
    assert lq.dtype == np.float32 and np.isfinite(lq).all()
    assert [int(i) for i in lq.argmax(axis=1)] == seq[1:]
    lf = Reference(stories.config, stories.weights).logits(seq[:-1])
    assert np.abs(lq - lf).max() < 0.05 * np.abs(lf).max()


def _tokenizer(path: Path, vocab: int) -> tuple[list[bytes], list[float]]:
    raw = path.read_bytes()
    off, pieces, scores = 4, [], []
    for _ in range(vocab):
        score, n = struct.unpack_from("<fi", raw, off)
        pieces.append(raw[off + 8 : off + 8 + n])
        scores.append(score)
        off += 8 + n
    return pieces, scores


def _encode(text: str, pieces: list[bytes], scores: list[float]) -> list[int]:
    """run.c encode for ASCII text: BOS, dummy-prefix space, chars, then best-score merges."""
    ids = {p: i for i, p in enumerate(pieces)}
    toks = [ids[b" "]] + [ids[ch.encode()] for ch in text]
    while True:
        best = None  # (score, position, merged id); the leftmost pair wins a tie, as in run.c
        for i in range(len(toks) - 1):
            j = ids.get(pieces[toks[i]] + pieces[toks[i + 1]])
            if j is not None and (best is None or scores[j] > best[0]):
                best = (scores[j], i, j)
        if best is None:
            return [1, *toks]
        _, i, j = best
        toks[i : i + 2] = [j]


def _decode(prev: int, tok: int, pieces: list[bytes]) -> bytes:
    p = pieces[tok]
    if prev == 1 and p.startswith(b" "):
        p = p[1:]
    if len(p) == 6 and p.startswith(b"<0x") and p.endswith(b">"):
        p = bytes([int(p[3:5], 16)])
    return p


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stories_matches_run_c_golden(stories, dtype) -> None:
    golden = MODEL_DIR / "golden_t0_n200.txt"
    tok_path = MODEL_DIR / "tok512.bin"
    if not golden.exists() or not tok_path.exists():
        pytest.skip("golden output or tokenizer missing")
    pieces, scores = _tokenizer(tok_path, 512)
    prompt = _encode("Once upon a time", pieces, scores)
    assert prompt[0] == 1 and len(prompt) < 10
    ref = Reference(stories.config, stories.weights, dtype)
    tok, text = prompt[0], b""
    for pos in range(200):  # run.c generate() with -t 0 -n 200
        logits = ref.forward(tok, pos)
        nxt = prompt[pos + 1] if pos + 1 < len(prompt) else int(np.argmax(logits))
        if nxt == 1:
            break
        text += _decode(tok, nxt, pieces)
        tok = nxt
    assert text + b"\n" == golden.read_bytes()
