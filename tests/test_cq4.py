"""CQ4 and the 4-bit formats: the Lloyd-Max levels, the quantizer, GGUF Q4_0 / IQ4_NL / IQ4_XS
taken as they are (nibbles unchanged, dequantized values equal to the gguf package's), whole
models identical across kernel tiers, CQ4 .isaf files (mmap, round trip, bad input naming the
tensor), `isaforge eval`."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest
from scipy import integrate

from conftest import STORIES as STORIES_DIR
from isaforge import _native
from isaforge.formats.gguf import read_gguf
from isaforge.model import read_model
from isaforge.quant.cq4 import (
    codebook,
    lloyd_max_levels,
    parse_quant,
    quantize_cq4,
    quantize_iq4_nl,
    quantize_q4_0,
)
from isaforge.quant.ggml import KVALUES_IQ4NL
from isaforge.quant.q4 import Q4Tensor
from isaforge.runtime.engine import Engine
from isaforge.types import ModelFormatError
from test_gguf import TOKS, C, float_tensors, write_gguf

STORIES = STORIES_DIR / "stories260K.bin"
T = gguf.GGMLQuantizationType
TIERS = [t["name"] for t in _native.info()["tiers"] if t["supported"]]


# ---- levels and quantizer ----

@pytest.mark.parametrize("gs", [32, 64, 128])
def test_lloyd_max_levels_are_centroids_of_their_cells(gs):
    lv = np.array(lloyd_max_levels(gs))
    assert np.array_equal(lv, -lv[::-1]) and np.all(np.diff(lv) > 0)
    f = lambda x: (1 - x * x) ** ((gs - 3) / 2)  # noqa: E731
    edges = np.concatenate([[-1.0], (lv[1:] + lv[:-1]) / 2, [1.0]])
    for i, level in enumerate(lv):  # independent quadrature: level = E[x | cell]
        a, b = edges[i], edges[i + 1]
        mass = integrate.quad(f, a, b, epsabs=0, epsrel=1e-12)[0]
        mean = integrate.quad(lambda x: x * f(x), a, b, epsabs=0, epsrel=1e-12)[0] / mass
        assert abs(mean - level) < 2.0 / 2 ** 20, (gs, i, mean, level)  # one grid step


def test_levels_tend_to_gaussian_lloyd_max():
    # 16-level Lloyd-Max for N(0, 1): outermost level 2.7326, innermost 0.1284 (Max, 1960)
    lv = np.array(lloyd_max_levels(4096)) * np.sqrt(4096)
    assert abs(lv[-1] - 2.7326) < 5e-3 and abs(lv[8] - 0.1284) < 2e-3


def test_codebook_int8():
    for gs in (32, 64, 128):
        cb, step = codebook(gs)
        assert cb.dtype == np.int8 and cb.max() == 127 and cb.min() == -127
        assert np.all(np.diff(cb.astype(int)) > 0)
        assert np.abs(cb * step - np.array(lloyd_max_levels(gs))).max() <= step / 2


def test_quantizer_distortion_and_rotation():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(256, 256)).astype(np.float32)
    rel = {}
    for sc in ("norm", "lsq"):
        d = quantize_cq4(g, 128, scale=sc).dequantize()
        rel[sc] = float(((d - g) ** 2).sum() / (g ** 2).sum())
    # the 4-bit Lloyd-Max distortion of a Gaussian is 0.009497 (Max, 1960)
    assert abs(rel["norm"] - 0.0095) < 0.0008 and rel["lsq"] < rel["norm"]
    heavy = rng.laplace(size=(256, 256)).astype(np.float32)
    heavy[:, 7] *= 20  # an outlier column
    err = {r: float(((quantize_cq4(heavy, 128, rotate=r).dequantize() - heavy) ** 2).sum())
           for r in (True, False)}
    assert err[True] < 0.5 * err[False]


def test_padding_and_exact_rotation_contract():
    rng = np.random.default_rng(1)
    w = rng.normal(size=(5, 172)).astype(np.float32)
    t = quantize_cq4(w, 128, seed=7)
    assert t.kpad == 256 and t.shape == (5, 172) and t.s.shape == (5, 2)
    assert t.signs.shape == (256,) and set(np.unique(t.signs)) == {-1.0, 1.0}
    x = rng.normal(size=172)
    # the C contract: w . x = sum_g ws_g * <codebook[nibble]_g, H (signs * pad(x))_g>
    from isaforge.quant.q4 import fwht
    xr = fwht(np.concatenate([x, np.zeros(84)]) * t.signs, 128)
    want = t.dequantize().astype(np.float64) @ x
    got = t.values().astype(np.float64) @ xr
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5)


def _rel_err(t, w):
    d = t.dequantize().astype(np.float64) - w
    return float((d * d).sum() / (w.astype(np.float64) ** 2).sum())


@pytest.mark.parametrize("scale", ["norm", "lsq"])
def test_padded_groups_spend_their_codes(scale):
    """A row of 64 at GS 128 is padded to 128: with Sylvester's H its rotated group is two equal
    copies of the 64-point rotation. Rounded alike they would give exactly GS 64's error;
    assigned with the error fed forward, the second copy corrects the first."""
    rng = np.random.default_rng(5)
    w = rng.normal(size=(200, 64)).astype(np.float32)
    e64, e128 = _rel_err(quantize_cq4(w, 64, scale=scale), w), \
        _rel_err(quantize_cq4(w, 128, scale=scale), w)
    assert e128 < 0.45 * e64, (e128, e64)
    # rows that fill their groups are untouched: rounding to nearest, code by code
    full = rng.normal(size=(8, 256)).astype(np.float32)
    t = quantize_cq4(full, 128, scale="norm")
    from isaforge.quant.q4 import fwht
    r = fwht(full.astype(np.float64) * t.signs, 128).reshape(8, 2, 128) / np.sqrt(128)
    cb, step = codebook(128)
    u = r / np.sqrt((r * r).sum(axis=2, keepdims=True)) / step
    near = np.abs(u[..., None] - cb.astype(np.float64)).argmin(axis=-1)
    assert np.array_equal(t.indices().reshape(8, 2, 128), near)
    # a row of 172 (groups 0 real, 1 with 44 real of 128) still meets the C contract
    # (test_padding_and_exact_rotation_contract) and only its padded group changes
    part = rng.normal(size=(50, 172)).astype(np.float32)
    assert _rel_err(quantize_cq4(part, 128, scale=scale), part) < \
        _rel_err(quantize_cq4(part, 64, scale=scale), part)


def test_iq4_nl_made_here():
    """IQ4_NL blocks made by ggml's scale search: the values are IQ4_NL's table times one fp16
    scale per 32 (read back through the GGUF block reader), closer than Q4_0 on heavy tails."""
    rng = np.random.default_rng(9)
    w = rng.standard_t(5, size=(40, 200)).astype(np.float32)
    t = quantize_iq4_nl(w)
    assert t.kind == "iq4_nl" and t.kpad == 224 and t.s.shape == (40, 7)
    assert np.array_equal(t.codebook, KVALUES_IQ4NL)
    assert np.array_equal(t.s, t.s.astype(np.float16).astype(np.float32))
    e_nl, e_q4 = _rel_err(t, w), _rel_err(quantize_q4_0(w), w)
    assert e_nl < 0.8 * e_q4 and e_nl < 0.01, (e_nl, e_q4)
    z = quantize_iq4_nl(np.zeros((2, 32), np.float32))
    assert not z.dequantize().any()
    assert parse_quant("iq4_nl").four_bit and str(parse_quant("IQ4_NL")) == "iq4_nl"


def test_parse_quant():
    assert str(parse_quant("CQ4-128-lsq")) == "cq4-128-lsq"
    assert parse_quant("cq4").group_size is None and parse_quant("cq4-norot").rotate is False
    for bad in ("cq4-48", "q4", "cq4-64-lsq-norm", "cq4x"):
        with pytest.raises(ValueError):
            parse_quant(bad)


def test_specs_write_narrow_codebooks_unless_wide():
    """--quant cq4 writes levels at +-NARROW_AMAX (span <= 127: the AVX2 kernels' offset-trick
    path), -wide the +-127 ones (the sign-trick path); both quantize about as well, and each
    codebook is the rounded Lloyd-Max levels of its scale."""
    from isaforge.quant.cq4 import NARROW_AMAX, quantize_4bit
    assert str(parse_quant("cq4-64-lsq-wide")) == "cq4-64-lsq-wide"
    assert parse_quant("cq4-128").amax == NARROW_AMAX and parse_quant("cq4-wide").amax == 127
    rng = np.random.default_rng(3)
    w = rng.normal(size=(64, 256)).astype(np.float32)
    for gs in (32, 64, 128):
        narrow = quantize_4bit(w, parse_quant(f"cq4-{gs}"), gs)
        wide = quantize_4bit(w, parse_quant(f"cq4-{gs}-wide"), gs)
        cn = narrow.codebook.astype(int)
        assert cn.max() - cn.min() <= 127 and cn.max() == NARROW_AMAX and cn.min() == -NARROW_AMAX
        assert np.array_equal(wide.codebook, codebook(gs)[0])
        cbn, step = codebook(gs, NARROW_AMAX)
        assert np.array_equal(narrow.codebook, cbn)
        assert np.abs(cbn * step - np.array(lloyd_max_levels(gs))).max() <= step / 2
        en, ew = _rel_err(narrow, w), _rel_err(wide, w)
        assert en < 1.1 * ew, (gs, en, ew)


# ---- whole models: every tier gives the same bits ----

def _logits(m, tier):
    e = Engine(m, threads=1, kernel=tier)
    pre = e.prefill(TOKS_S, all_logits=True).copy()
    e2 = Engine(m, threads=1, kernel=tier)
    dec = np.stack([e2.forward(t, i).copy() for i, t in enumerate(TOKS_S)])
    return pre, dec


TOKS_S = [1, 403, 407, 261, 378, 300, 260, 279, 11, 260]


@pytest.mark.skipif(not STORIES.exists(), reason="stories260K not in /work/shared/models")
@pytest.mark.parametrize("quant", ["cq4-128", "cq4-32-lsq", "cq4-64-norot", "q4_0", "iq4_nl",
                                   "cq4-64-wide", "cq4-32-wide"])
def test_stories260k_4bit_identical_across_tiers(quant):
    m = read_model(STORIES, quant)
    assert all(isinstance(x, Q4Tensor) for x in m.weights.w2)
    pre0, dec0 = _logits(m, "scalar")
    assert np.array_equal(pre0, dec0)  # prefill equals decode bit for bit
    ref = Engine(read_model(STORIES, "f32"), threads=1).prefill(TOKS_S, all_logits=True)
    assert np.abs(pre0 - ref).max() < 8.0 and (pre0.argmax(1) == ref.argmax(1)).mean() > 0.5
    for tier in TIERS[1:]:
        pre, dec = _logits(m, tier)
        assert np.array_equal(pre.view(np.uint32), pre0.view(np.uint32)), tier
        assert np.array_equal(dec.view(np.uint32), dec0.view(np.uint32)), tier


@pytest.mark.skipif(not STORIES.exists(), reason="stories260K not in /work/shared/models")
def test_generated_text_identical_across_tiers():
    from isaforge import load
    outs = {t: load(STORIES, quant="cq4-128", kernel=t).generate("Once upon a time", 40,
                                                                  temperature=0.0)
            for t in TIERS}
    assert len(set(outs.values())) == 1, outs


# ---- GGUF 4-bit types run as they are ----

def _iq4_raw(rng, rows, cols, xs: bool) -> np.ndarray:
    """Random IQ4_NL (block 32) / IQ4_XS (block 256) bytes with finite moderate fp16 d."""
    nbytes, block = (136, 256) if xs else (18, 32)
    b = rng.integers(0, 256, (rows * cols // block, nbytes), dtype=np.uint8)
    b[:, 0:2] = rng.uniform(0.001, 0.02, (len(b), 1)).astype("<f2").view(np.uint8)
    return b.reshape(rows, -1)


def test_gguf_q4_0_iq4_native(tmp_path):
    rng = np.random.default_rng(5)
    t = float_tensors()
    kv = C.kv_dim
    raw = {"blk.0.attn_k.weight": (_iq4_raw(rng, kv, C.dim, False), "IQ4_NL"),
           "blk.1.ffn_up.weight": (_iq4_raw(rng, C.hidden_dim, C.dim, False), "IQ4_NL")}
    # (IQ4_XS needs rows of 256 values, longer than this model's: test_iq4_xs_split_matches_gguf)
    types = {n: "Q4_0" for n in t if n.startswith("blk.") and "norm" not in n and n not in raw}
    p = write_gguf(tmp_path / "q4.gguf", t, types=types, raw=raw)
    reader = gguf.GGUFReader(str(p))
    m = read_gguf(p, "cq4")
    f32 = read_gguf(p, "f32")
    for rt in reader.tensors:
        if rt.tensor_type not in (T.Q4_0, T.IQ4_NL):
            continue
        i, part = int(rt.name.split(".")[1]), rt.name.split(".")[2]
        field = {"attn_q": "wq", "attn_k": "wk", "attn_v": "wv", "attn_output": "wo",
                 "ffn_gate": "w1", "ffn_down": "w2", "ffn_up": "w3"}[part]
        q = getattr(m.weights, field)[i]
        assert isinstance(q, Q4Tensor) and q.kind == rt.tensor_type.name.lower()
        blocks = np.asarray(rt.data).reshape(-1, 18)
        rows = q.shape[0]
        assert np.array_equal(q.nibbles, blocks[:, 2:18].reshape(rows, -1))  # file's nibbles
        want = gguf.quants.dequantize(np.asarray(rt.data), rt.tensor_type).reshape(q.shape)
        assert np.array_equal(q.dequantize().view(np.uint32), want.view(np.uint32))
        assert np.array_equal(getattr(f32.weights, field)[i], want)
        cb = np.arange(-8, 8) if rt.tensor_type == T.Q4_0 else KVALUES_IQ4NL
        assert np.array_equal(q.codebook, cb)
    outs = []
    for tier in TIERS:
        e = Engine(m, threads=1, kernel=tier)
        outs.append(e.prefill(TOKS, all_logits=True).copy())
        assert np.array_equal(outs[-1].view(np.uint32), outs[0].view(np.uint32)), tier
    ref = Engine(f32, threads=1).prefill(TOKS, all_logits=True)
    assert np.abs(outs[0] - ref).max() < 0.05 * np.abs(ref).max() + 0.05


def test_iq4_xs_split_matches_gguf():
    from isaforge.quant.ggml import q4_split
    rng = np.random.default_rng(6)
    raw = _iq4_raw(rng, 3, 512, True)
    q = q4_split(raw.reshape(-1), 23, 3, 512)
    want = gguf.quants.dequantize(raw, T.IQ4_XS).reshape(3, 512)
    assert q.group_size == 32 and q.s.shape == (3, 16)
    assert np.array_equal(q.dequantize().view(np.uint32), want.view(np.uint32))
    assert np.array_equal(q.nibbles.reshape(3, 2, 8, 16), raw.reshape(3, 2, 136)[:, :, 8:]
                          .reshape(3, 2, 8, 16))


def test_q4_0_made_here_equals_gguf_package():
    rng = np.random.default_rng(8)
    w = rng.normal(size=(4, 96)).astype(np.float32)
    q = quantize_q4_0(w)
    want = gguf.quants.dequantize(gguf.quants.quantize(w, T.Q4_0), T.Q4_0)
    assert np.array_equal(q.dequantize(), want)


# ---- CQ4 .isaf ----

@pytest.fixture(scope="module")
def cq4_isaf(tmp_path_factory):
    from isaforge.converter import convert
    p = tmp_path_factory.mktemp("isaf") / "s.isaf"
    convert(STORIES, p, quant="cq4-128")
    return p


def _header(p: Path) -> tuple[dict, bytes]:
    data = p.read_bytes()
    (n,) = struct.unpack_from("<Q", data)
    return json.loads(data[8:8 + n]), data[8 + n:]


def _rewrite(p: Path, out: Path, edit) -> Path:
    h, body = _header(p)
    info = json.loads(h["__metadata__"]["isaforge"])
    edit(h, info)
    h["__metadata__"]["isaforge"] = json.dumps(info)
    raw = json.dumps(h).encode()
    raw += b" " * (-(8 + len(raw)) % 64)
    out.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
    return out


@pytest.mark.skipif(not STORIES.exists(), reason="stories260K not in /work/shared/models")
def test_cq4_isaf_round_trip_mmap(cq4_isaf):
    m = read_model(cq4_isaf)
    w = m.weights.w2[0]
    assert isinstance(w, Q4Tensor) and w.kpad == 256 and w.signs is not None
    assert not w.nibbles.flags.owndata and not w.nibbles.flags.writeable  # a view of the map
    a = Engine(m, threads=1).prefill(TOKS_S, all_logits=True)
    b = Engine(read_model(STORIES, "cq4-128"), threads=1).prefill(TOKS_S, all_logits=True)
    assert np.array_equal(a, b)


@pytest.mark.skipif(not STORIES.exists(), reason="stories260K not in /work/shared/models")
@pytest.mark.parametrize("case, match", [
    ("codebook_size", r"codebook_size is 17"),
    ("codebook_shape", r"tensor 'layers.0.wq.codebook' is I8 \[8\], expected I8 \[16\]"),
    ("short_scales", r"tensor 'layers.1.w2.scales' is F32 \[64, 1\], expected F32 \[64, 2\]"),
    ("rotation", r"tensor layers.0.w1: unknown rotation 'givens'"),
    ("group", r"tensor layers.0.w2: group size 96 must be a multiple of 32 dividing the padded"),
    ("minus128", r"tensor layers.0.wq.codebook holds -128"),
])
def test_cq4_isaf_bad_input_names_the_tensor(cq4_isaf, tmp_path, case, match):
    def edit(h, info):
        q4 = info["quantization"]["q4"]
        if case == "codebook_size":
            q4["codebook_size"] = 17
        elif case == "codebook_shape":
            h["layers.0.wq.codebook"]["shape"] = [8]
            h["layers.0.wq.codebook"]["data_offsets"][1] -= 8
        elif case == "short_scales":
            h["layers.1.w2.scales"]["shape"] = [64, 1]
            h["layers.1.w2.scales"]["dtype"] = "F32"  # the file's is F16 (CQ4 scales)
            o = h["layers.1.w2.scales"]["data_offsets"]
            o[1] = o[0] + 64 * 4
        elif case == "rotation":
            q4["tensors"]["layers.0.w1"]["rotation"] = "givens"
        elif case == "group":
            q4["tensors"]["layers.0.w2"]["group_size"] = 96
    p = _rewrite(cq4_isaf, tmp_path / "bad.isaf", edit)
    if case == "minus128":
        h, body = _header(p)
        data = bytearray(p.read_bytes())
        start = len(data) - len(body) + h["layers.0.wq.codebook"]["data_offsets"][0]
        data[start] = 0x80
        p.write_bytes(bytes(data))
    with pytest.raises(ModelFormatError, match=match):
        read_model(p)


# ---- isaforge eval ----

@pytest.mark.skipif(not STORIES.exists(), reason="stories260K not in /work/shared/models")
def test_eval_cli(tmp_path, capsys):
    from isaforge.cli import main
    text = tmp_path / "t.txt"
    text.write_text("Once upon a time, there was a little girl named Lily. She loved to play "
                    "outside in the sun. One day, she saw a big dog in the park.")
    out = tmp_path / "r.json"
    assert main(["eval", str(STORIES), "--text", str(text), "--quant", "f32", "cq4-128",
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    same, cq4 = rows
    assert same["kl_mean"] == 0.0 and same["top1"] == 1.0 and same["ppl"] == same["ref_ppl"]
    assert cq4["kl_mean"] > 0 and 0 < cq4["top1"] <= 1 and cq4["positions"] == same["positions"]
    assert "| cq4-128 |" in capsys.readouterr().out


# ---- error-compensating assignment (GPTQ in the rotated domain) ----

def test_gptq_lowers_the_output_error():
    from isaforge.quant.cq4 import gptq_cq4
    rng = np.random.default_rng(11)
    cols = 160  # padded to 256 at 128
    mix = rng.normal(size=(cols, cols)) * np.linspace(3, 0.1, cols)  # correlated, uneven inputs
    x = rng.normal(size=(4000, cols)) @ mix
    h = x.T @ x
    w = rng.normal(size=(48, cols))

    def out_err(t):
        d = t.dequantize().astype(np.float64) - w
        return float(np.einsum("ij,jk,ik->", d, h, d) / np.einsum("ij,jk,ik->", w, h, w))
    for gs in (32, 128):
        rtn, g = out_err(quantize_cq4(w, gs)), out_err(gptq_cq4(w, h, gs))
        assert g < 0.8 * rtn, (gs, g, rtn)
        assert out_err(gptq_cq4(w, h, gs, scale="lsq")) < rtn


def test_gptq_needs_calibration():
    from isaforge.quant.cq4 import to_4bit
    with pytest.raises(ValueError, match="needs a calibration text"):
        to_4bit(read_model(STORIES, "f32"), parse_quant("cq4-128-gptq"))


@pytest.mark.skipif(not STORIES.exists(), reason="stories260K not in /work/shared/models")
def test_stories260k_gptq_identical_across_tiers():
    m = read_model(STORIES, "cq4-128-gptq")
    pre0, dec0 = _logits(m, "scalar")
    assert np.array_equal(pre0, dec0)
    for tier in TIERS[1:]:
        pre, _ = _logits(m, tier)
        assert np.array_equal(pre.view(np.uint32), pre0.view(np.uint32)), tier


@pytest.mark.skipif(not STORIES.exists(), reason="stories260K not in /work/shared/models")
def test_generated_calibration_tokens_deterministic():
    from isaforge.runtime.calibrate import generated_tokens
    m = read_model(STORIES, "f32")
    prompt = list(range(1, 40))
    a, b = generated_tokens(m, prompt, 64, 2), generated_tokens(m, prompt, 64, 2)
    assert a == b and len(a) == 64 and a[:8] == prompt[:8]
    assert all(0 <= t < m.config.vocab_size for t in a)


# ---- the 4-bit weight arena: a converted model's nibbles move into the core ----

def _in_memory_copy(m):
    """m with every 4-bit matrix's nibbles copied into Python-owned arrays (as a conversion
    makes them); a tied table stays the classifier's object."""
    from dataclasses import replace

    from isaforge.types import LAYER_MATRICES
    w = m.weights
    for name in LAYER_MATRICES:
        lst = getattr(w, name)
        for i, t in enumerate(lst):
            lst[i] = replace(t, nibbles=np.array(t.nibbles))
    tied = w.tok_embeddings is w.wcls
    if isinstance(w.wcls, Q4Tensor):
        w.wcls = replace(w.wcls, nibbles=np.array(w.wcls.nibbles))
        if tied:
            w.tok_embeddings = w.wcls
    return m


@pytest.mark.skipif(not STORIES.exists(), reason="stories260K not in /work/shared/models")
@pytest.mark.parametrize("classifier", ["q8", "4bit"])
def test_converted_nibbles_move_into_the_arena(tmp_path, classifier):
    """In-memory nibbles are copied into the core's arena and released on the Python side
    (one resident copy, read back unchanged through the model); a mapped file's stay mapped;
    both give the same bits, a tied 4-bit table included (its rows then come from the arena
    copy: reading the released array would be a use after free)."""
    from isaforge.converter import convert
    from isaforge.runtime.engine import _PackedQ4
    p = tmp_path / "s.isaf"
    convert(STORIES, p, quant="cq4-64", classifier=classifier)
    mapped = read_model(p)
    mine = _in_memory_copy(read_model(p))
    was = {i: np.array(t.nibbles) for i, t in enumerate(mine.weights.w2)}
    cls = np.array(mine.weights.wcls.nibbles) if classifier == "4bit" else None
    for tier in TIERS:
        a = Engine(mapped, threads=1, kernel=tier)
        assert all(type(t) is Q4Tensor for t in mapped.weights.w2)  # a file's: not copied
        fresh = _in_memory_copy(read_model(p))
        given = [t.nibbles for t in fresh.weights.w1 + fresh.weights.w2 + [fresh.weights.wcls]
                 if isinstance(t, Q4Tensor)]
        b = Engine(fresh, threads=2, kernel=tier)
        for a4 in given:  # the core must not read the caller's nibbles once packed
            a4[...] = 0x5A
        packs = b.kernels["prefill"]["q4_gemm_packs"]
        assert all(type(t) is _PackedQ4 for t in fresh.weights.w2)  # released either way
        if classifier == "4bit":
            assert fresh.weights.tok_embeddings is fresh.weights.wcls
            assert b.embedding["dtype"] == "q4" and b.embedding["tied"]
        ta = a.prefill(TOKS_S, all_logits=True).copy()
        tb = b.prefill(TOKS_S, all_logits=True).copy()
        assert np.array_equal(ta.view(np.uint32), tb.view(np.uint32)), (tier, packs)
    Engine(mine, threads=1)
    for i, t in enumerate(mine.weights.w2):  # the nibbles read back from the arena
        assert type(t) is _PackedQ4 and np.array_equal(t.nibbles, was[i])
    if cls is not None:
        assert np.array_equal(mine.weights.wcls.nibbles, cls)
