"""Q8_0 quantization: upstream export.py arithmetic, group-size choice, whole-model export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import MATS
from isaforge.formats import read_llama2c
from isaforge.formats.llama2c import quantize_model
from isaforge.quant import pick_group_size, quantize_q8
from isaforge.types import Config, Q8Tensor


def cfg(dim: int, hidden: int) -> Config:
    return Config(
        dim=dim, hidden_dim=hidden, n_layers=1, n_heads=1, n_kv_heads=1, vocab_size=8, seq_len=8
    )


def slow_q80(w: np.ndarray, gs: int) -> tuple[np.ndarray, np.ndarray]:
    """Element-by-element float32 transcription of upstream quantize_q80 (nonzero groups)."""
    flat = w.astype(np.float32).ravel()
    q = np.zeros(flat.size, np.int8)
    s = np.zeros(flat.size // gs, np.float32)
    for g in range(s.size):
        wmax = np.float32(0)
        for v in flat[g * gs : (g + 1) * gs]:
            wmax = max(wmax, np.float32(abs(v)))
        s[g] = np.float32(wmax / np.float32(127.0))
        for i in range(g * gs, (g + 1) * gs):
            q[i] = int(np.round(np.float32(flat[i] / s[g])))  # numpy round: half to even
    return q.reshape(w.shape), s.reshape(w.shape[0], -1)


def test_hand_cases() -> None:
    t, err = quantize_q8(np.array([[1, -2, 0.5, 127]], np.float32), 4)
    assert t.q.dtype == np.int8 and t.s.dtype == np.float32 and t.group_size == 4
    assert t.q.tolist() == [[1, -2, 0, 127]]  # 0.5 rounds half to even -> 0
    assert t.s.tolist() == [[1.0]] and err == 0.5
    # half-way cases go to even: 2.5 -> 2, -1.5 -> -2, 3.5 -> 4
    t, err = quantize_q8(np.array([[2.5, -1.5, 3.5, -127]], np.float32), 4)
    assert t.q.tolist() == [[2, -2, 4, -127]] and err == 0.5
    # an all-zero group gets scale 0 and q 0 (upstream would divide by zero)
    t, err = quantize_q8(np.array([[0, 0, 0, 0, 0, 2.54, -1.27, 0.01]], np.float32), 4)
    assert t.q.tolist() == [[0, 0, 0, 0, 0, 127, -64, 0]]
    assert t.s[0, 0] == 0 and t.s[0, 1] == np.float32(2.54) / np.float32(127)
    assert err == pytest.approx(0.01, abs=1e-6)
    # scales and q are float32 arithmetic: 0.1 / 127 in float32, not float64
    t, _ = quantize_q8(np.full((1, 2), 0.1, np.float32), 2)
    assert t.s[0, 0] == np.float32(np.float32(0.1) / np.float32(127.0))
    assert t.q.tolist() == [[127, 127]]


def test_matches_upstream_transcription() -> None:
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((6, 24)) * rng.uniform(0.01, 5, (6, 1))).astype(np.float32)
    for gs in (1, 2, 4, 8, 12, 24):
        t, err = quantize_q8(w, gs)
        q, s = slow_q80(w, gs)
        np.testing.assert_array_equal(t.q, q)
        np.testing.assert_array_equal(t.s, s)
        deq = t.dequantize()
        assert err == float(np.abs(deq - w).max())
        assert err <= float(s.max()) / 2 * 1.0001
        assert np.abs(t.q.astype(int)).max() == 127


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="does not divide the row length 6"):
        quantize_q8(np.ones((2, 6), np.float32), 4)
    with pytest.raises(ValueError, match="2-D"):
        quantize_q8(np.ones(8, np.float32), 4)
    with pytest.raises(ValueError, match="NaN"):
        quantize_q8(np.array([[1, np.nan]], np.float32), 2)


def test_pick_group_size() -> None:
    stories = cfg(64, 172)
    assert pick_group_size(stories, None) == 4
    assert pick_group_size(cfg(4096, 11008), None) == 64
    assert pick_group_size(cfg(288, 768), None) == 32
    assert pick_group_size(cfg(7, 13), None) == 1
    assert pick_group_size(stories, 2) == 2
    with pytest.raises(ValueError) as e:
        pick_group_size(stories, 64)
    assert str(e.value) == (
        "group size 64 does not divide hidden_dim=172; valid choices for this model: 1, 2, 4"
    )
    with pytest.raises(ValueError, match="does not divide dim=64 and hidden_dim=172"):
        pick_group_size(stories, 128)
    with pytest.raises(ValueError, match="positive"):
        pick_group_size(stories, 0)


def test_quantize_stories(v0_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.bin"
    lines: list[str] = []
    calls: list[tuple[int, int]] = []
    s = quantize_model(
        v0_path, out, None, progress=lambda i, n: calls.append((i, n)), log=lines.append
    )
    assert (s.group_size, s.chosen_automatically, s.n_tensors) == (4, True, 36)
    assert calls == [(i, 36) for i in range(1, 37)]
    assert len(lines) == 37
    assert lines[0].startswith("1/36 quantized tok_embeddings (512, 64) to Q8_0 with max error ")
    assert lines[1].startswith("2/36 quantized wq[0] (64, 64) to Q8_0 with max error ")
    assert lines[-1].startswith("max quantization group error across all weights: ")
    assert 0 < s.max_error < 0.01 and s.n_bytes == out.stat().st_size

    src, q = read_llama2c(v0_path).weights, read_llama2c(out).weights
    assert q.group_size == 4 and isinstance(q.wcls, Q8Tensor)
    pairs = [(src.tok_embeddings, q.wcls)]
    pairs += [(getattr(src, n)[i], getattr(q, n)[i]) for n in MATS for i in range(5)]
    errs = []
    for w, t in pairs:
        ref, err = quantize_q8(w, 4)
        np.testing.assert_array_equal(t.q, ref.q)
        np.testing.assert_array_equal(t.s, ref.s)
        assert float(np.abs(t.dequantize() - w).max()) <= err
        errs.append(err)
    assert s.max_error == max(errs)
    for n in ("rms_att", "rms_ffn", "rms_final"):
        np.testing.assert_array_equal(getattr(q, n), getattr(src, n))


def test_quantize_errors(v0_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.bin"
    with pytest.raises(ValueError, match="hidden_dim=172"):
        quantize_model(v0_path, out, 64)
    assert not out.exists()
    s = quantize_model(v0_path, out, 2)
    assert (s.group_size, s.chosen_automatically) == (2, False)
    with pytest.raises(ValueError, match="already Q8_0"):
        quantize_model(out, tmp_path / "qq.bin")
    with pytest.raises(ValueError, match="is the input file"):
        quantize_model(v0_path, v0_path)
