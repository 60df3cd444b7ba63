"""The .isaf format: round trips with bit-identical logits, zero-copy loading, safetensors
compatibility, and clear errors for every kind of broken file."""

from __future__ import annotations

import json
import mmap
import os
import re
import struct
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from conftest import cli
from isaforge.converter import convert
from isaforge.formats.isaf import read_isaf
from isaforge.model import read_model
from isaforge.runtime.engine import Engine
from isaforge.types import Config, ModelFormatError, Q8Tensor

PROMPT_IDS = [1, 403, 407, 261, 378, 41, 313, 270, 420, 350, 260, 2]  # arbitrary stories ids


def logits(loaded, tokens) -> np.ndarray:
    return Engine(loaded, threads=1).prefill(tokens, 0, all_logits=True)


def tensors_of(loaded) -> list[np.ndarray]:
    w, out = loaded.weights, []
    for n in ("wq", "wk", "wv", "wo", "w1", "w2", "w3"):
        for m in getattr(w, n):
            out += [m.q, m.s] if isinstance(m, Q8Tensor) else [m]
    tok = w.tok_embeddings  # a quantized model's tied table is the classifier (stored once)
    out += [] if tok is w.wcls and isinstance(tok, Q8Tensor) else \
        [tok.q, tok.s] if isinstance(tok, Q8Tensor) else [tok]
    out += [w.rms_att, w.rms_ffn, w.rms_final]
    return out + ([w.wcls.q, w.wcls.s] if isinstance(w.wcls, Q8Tensor) else [w.wcls])


@pytest.fixture(scope="module")
def stories_isaf(stories, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("isaf") / "stories_q8.isaf"
    convert(stories / "stories260K.bin", out, quant="q8", group_size=4)
    return out


def test_q8_round_trip_equals_isaforge_quantize_bit_for_bit(stories, stories_q8, stories_isaf):
    direct = read_model(stories_q8)  # llama2.c v2 written by `isaforge quantize --group-size 4`
    packed = read_isaf(stories_isaf)
    assert packed.config == direct.config and packed.weights.group_size == 4
    for a, b in zip(tensors_of(direct), tensors_of(packed), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert np.array_equal(logits(direct, PROMPT_IDS), logits(packed, PROMPT_IDS))


def test_v2_source_round_trip(stories_q8, tmp_path):
    out = tmp_path / "from_v2.isaf"
    convert(stories_q8, out)  # group size taken from the source (4)
    direct, packed = read_model(stories_q8), read_isaf(out)
    assert np.array_equal(logits(direct, PROMPT_IDS), logits(packed, PROMPT_IDS))


def test_f32_isaf_gives_the_run_c_golden(stories, tmp_path):
    out = tmp_path / "f32.isaf"
    convert(stories / "stories260K.bin", out, quant="f32")
    assert read_isaf(out).weights.group_size == 0
    r = cli("run", str(out), "-t", "0", "--steps", "200", "-i", "Once upon a time")
    assert r.returncode == 0, r.stderr  # the llama2.c tokenizer is embedded: no -z
    assert r.stdout == (stories / "golden_t0_n200.txt").read_bytes()


def test_mapped_without_copying(stories_isaf):
    m = read_isaf(stories_isaf)
    (mm,) = m.keepalive
    assert isinstance(mm, mmap.mmap)
    whole = np.frombuffer(mm, np.uint8)
    arrays = tensors_of(m)
    assert len(arrays) == 2 * 7 * 5 + 3 + 2  # the tied Q8 table is the classifier's q and s
    for a in arrays:
        assert np.shares_memory(a, whole) and not a.flags.writeable
        base = a
        while isinstance(base, np.ndarray):
            base = base.base
        assert (base.obj if isinstance(base, memoryview) else base) is mm


def test_readable_by_safetensors_and_aligned(stories_isaf):
    from safetensors import safe_open

    m = read_isaf(stories_isaf)
    with safe_open(str(stories_isaf), framework="numpy") as f:
        info = json.loads(f.metadata()["isaforge"])
        assert info["version"] == 3 and info["quantization"] == {"scheme": "q8", "group_size": 4}
        assert info["config"]["hidden_dim"] == 172 and info["layout"] == "rowmajor-q8-v1"
        assert np.array_equal(f.get_tensor("layers.3.w2.q"), m.weights.w2[3].q)
        assert np.array_equal(f.get_tensor("wcls.scales"), m.weights.wcls.s)
    raw = stories_isaf.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__")
    starts = sorted((e["data_offsets"][0], e["dtype"]) for e in header.values())
    assert all((8 + n + a) % 64 == 0 for a, _ in starts)
    kinds = [dt for _, dt in starts if dt != "U8"]  # float32 tensors come first
    assert kinds == sorted(kinds, key=lambda d: d != "F32")


# ---- a tiny GGUF (Q8_0 token table, Q4_1 and F16 matrices), written with gguf.GGUFWriter ----

TINY = Config(dim=64, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=48,
              seq_len=64, rope_theta=10000.0, norm_eps=float(np.float32(1e-5)))
T = gguf.GGMLQuantizationType


TINY_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def write_tiny_gguf(path: Path, c: Config = TINY, template: str = TINY_TEMPLATE,
                    seed: int = 7) -> Path:
    """A random llama model with a byte-level BPE vocab of <s>, </s>, <|im_end|> and runs of
    one letter ("a".."z", "aa".."ss"); EOS is <|im_end|>."""
    rng = np.random.default_rng(seed)
    d, h, kv = c.dim, c.hidden_dim, c.kv_dim
    w = gguf.GGUFWriter(str(path), "llama")
    for k, v in {"llama.embedding_length": d, "llama.feed_forward_length": h,
                 "llama.block_count": c.n_layers, "llama.attention.head_count": c.n_heads,
                 "llama.attention.head_count_kv": c.n_kv_heads, "llama.context_length": c.seq_len,
                 "llama.rope.dimension_count": c.head_size}.items():
        w.add_uint32(k, v)
    w.add_float32("llama.rope.freq_base", c.rope_theta)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", c.norm_eps)
    tokens = ["<s>", "</s>", "<|im_end|>"] + [chr(ord("a") + i % 26) * (1 + i // 26)
                                            for i in range(c.vocab_size - 3)]
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [3, 3, 3] + [1] * (c.vocab_size - 3))
    w.add_array("tokenizer.ggml.merges", ["a a"])
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    w.add_string("tokenizer.chat_template", template)

    def mat(rows, cols, kind):
        a = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        if kind == "F16":
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, T[kind]), raw_dtype=T[kind])

    name = "token_embd.weight"
    mat(c.vocab_size, d, "Q8_0")
    if not c.shared_classifier:
        name = "output.weight"
        mat(c.vocab_size, d, "Q4_1")
    w.add_tensor("output_norm.weight", rng.uniform(0.5, 1.5, d).astype(np.float32))
    shapes = {"attn_q": (d, d), "attn_k": (kv, d), "attn_v": (kv, d), "attn_output": (d, d),
              "ffn_gate": (h, d), "ffn_down": (d, h), "ffn_up": (h, d)}
    for i in range(c.n_layers):
        for n in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{n}.weight", rng.uniform(0.5, 1.5, d).astype(np.float32))
        for j, (n, s) in enumerate(shapes.items()):
            name = f"blk.{i}.{n}.weight"
            mat(*s, ("Q4_1", "Q8_0", "F16")[j % 3])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("quant", ["q8", "f32"])
@pytest.mark.parametrize("tied", [True, False])
def test_gguf_round_trip_bit_identical(tmp_path, quant, tied):
    c = replace(TINY, shared_classifier=tied)
    src = write_tiny_gguf(tmp_path / "tiny.gguf", c)
    out = tmp_path / "tiny.isaf"
    convert(src, out, quant=quant)
    direct, packed = read_model(src, quant), read_isaf(out)
    assert packed.config == direct.config == c
    ids = [0, 5, 9, 17, 33, 40, 47, 3]
    assert np.array_equal(logits(direct, ids), logits(packed, ids))
    for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.chat_template",
              "tokenizer.ggml.eos_token_id"):
        assert packed.metadata[k] == direct.metadata[k]


def test_real_model_round_trip(smollm2_gguf, tmp_path):
    import isaforge

    out = tmp_path / "smol.isaf"
    convert(smollm2_gguf, out)
    # convert writes Q8 (the file's Q4_1 requantized): equal to the GGUF read as q8, not to the
    # default auto path (Q4_1 in place, activations per 32)
    a, b = isaforge.load(smollm2_gguf, ctx=64, quant="q8"), isaforge.load(out, ctx=64)
    msgs = [{"role": "user", "content": "Write a haiku about the sea. 日本 🌊"}]
    ids = a.chat_tokens(msgs)
    assert ids == b.chat_tokens(msgs) and b.stop_ids == a.stop_ids
    assert np.array_equal(a.logits(ids), b.logits(ids))


# ---- bad input ----

def rewrite(src: Path, dst: Path, edit) -> Path:
    """Copy src with its JSON header passed through edit(header, info) (data unchanged)."""
    raw = src.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8:8 + n])
    info = json.loads(header["__metadata__"]["isaforge"])
    edit(header, info)
    if "__metadata__" in header and "isaforge" in header["__metadata__"]:
        header["__metadata__"]["isaforge"] = json.dumps(info)
    h = json.dumps(header).encode()
    h += b" " * (-(8 + len(h)) % 64)
    dst.write_bytes(struct.pack("<Q", len(h)) + h + raw[8 + n:])
    return dst


def fails(path: Path, match: str) -> None:
    """read_isaf(path) raises ModelFormatError "{path}: {reason}", `match` found in the reason
    (not in the path: tmp_path holds the test's name, e.g. "truncated")."""
    with pytest.raises(ModelFormatError) as e:
        read_isaf(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and re.search(match, msg[len(f"{path}: "):]), msg


def test_truncated_anywhere(stories_isaf, tmp_path):
    raw = stories_isaf.read_bytes()
    for cut in sorted({0, 4, 8, 20, 300} | {len(raw) * i // 10 for i in range(1, 10)}
                      | {len(raw) - 1}):
        p = tmp_path / f"cut{cut}.isaf"
        p.write_bytes(raw[:cut])
        fails(p, r"^file is truncated: \d+ bytes, a safetensors header needs 8$"
                 r"|^safetensors header length \d+ exceeds the file \(\d+ bytes\)$"
                 r"|^tensor \S+ data \[\d+, \d+\) lies beyond the end of the file \(size "
                 r"\d+; truncated\?\)$")


def test_lying_offsets(stories_isaf, tmp_path):
    def grow(h, info):
        a, b = h["layers.0.wq.q"]["data_offsets"]
        h["layers.0.wq.q"]["data_offsets"] = [a, b + 10**9]
    fails(rewrite(stories_isaf, tmp_path / "a.isaf", grow),
          r"tensor layers\.0\.wq\.q: data_offsets \[\d+, \d+\] span 1000004096 bytes, "
          r"but shape \[64, 64\] of I8 needs 4096")

    def move(h, info):
        e = h["wcls.q"]
        size = e["data_offsets"][1] - e["data_offsets"][0]
        e["data_offsets"] = [10**9, 10**9 + size]
    fails(rewrite(stories_isaf, tmp_path / "b.isaf", move),
          r"tensor wcls\.q data \[\d+, \d+\) lies beyond the end of the file")

    def misalign(h, info):
        e = h["rms_final"]
        a, b = e["data_offsets"]
        e["data_offsets"] = [a + 2, b + 2]
    # the shifted tensor now also overlaps the next one, which the safetensors checks catch
    fails(rewrite(stories_isaf, tmp_path / "c.isaf", misalign),
          r"tensors rms_final and layers\.0\.wq\.scales overlap in the file")

    # misaligned without overlapping: the data starts 2 bytes past the 64-byte boundary
    raw = stories_isaf.read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    head = raw[8:8 + n].rstrip(b" ")
    head += b" " * (-(8 + len(head)) % 64 + 2)
    p = tmp_path / "d.isaf"
    p.write_bytes(struct.pack("<Q", len(head)) + head + raw[8 + n:])
    # (the first tensor: rms_att, the tied Q8 token table being the classifier's)
    fails(p, r"tensor 'rms_att' at byte \d+ is not 4-byte aligned")


@pytest.mark.parametrize("edit,match", [
    (lambda h, i: h.pop("__metadata__"), "not an isaforge .isaf file"),
    (lambda h, i: i.update(version=4), "unsupported .isaf version 4"),
    (lambda h, i: i.pop("version"), "unsupported .isaf version None"),
    (lambda h, i: i.update(layout="tiled-amx-v9"), "unknown packed layout 'tiled-amx-v9'"),
    (lambda h, i: i.update(quantization={"scheme": "cq4", "group_size": 32}), "quantization"),
    (lambda h, i: i["quantization"].update(group_size=64), "hidden_dim=172"),
    (lambda h, i: i["config"].pop("dim"), "lacks 'dim'"),
    (lambda h, i: i["config"].update(n_heads=7), "n_heads"),
    (lambda h, i: i["config"].update(bogus=1), "unknown keys"),
    (lambda h, i: i.pop("metadata"), "'metadata' is missing"),
    (lambda h, i: h.pop("layers.1.w3.scales"), "missing tensors: layers.1.w3.scales"),
    # a second entry for rms_final's bytes: the safetensors overlap check fires first
    (lambda h, i: h.update(extra=h["rms_final"]), "tensors extra and rms_final overlap"),
    (lambda h, i: h.update(extra={"dtype": "U8", "shape": [0], "data_offsets": [0, 0]}),
     "unexpected tensor 'extra'"),
    # F16 over F32's bytes: the size check (shape x dtype) fires first
    (lambda h, i: h["rms_final"].update(dtype="F16"),
     r"tensor rms_final: data_offsets \[\d+, \d+\] span 256 bytes, but shape \[64\] of F16 "
     "needs 128"),
    (lambda h, i: h["rms_final"].update(dtype="F16", shape=[128]),
     "tensor 'rms_final': unsupported dtype 'F16'"),
    (lambda h, i: h["rms_att"].update(shape=[64, 5]), "expected F32"),
])
def test_bad_metadata(stories_isaf, tmp_path, edit, match):
    fails(rewrite(stories_isaf, tmp_path / "bad.isaf", edit), match)


def test_absurd_header_size(stories_isaf, tmp_path):
    raw = bytearray(stories_isaf.read_bytes())
    struct.pack_into("<Q", raw, 0, 2**40)
    p = tmp_path / "big.isaf"
    p.write_bytes(raw)
    fails(p, "safetensors header length 1099511627776 exceeds the file")


def test_header_size_cap(stories_isaf, monkeypatch):
    import isaforge.formats.isaf as isaf

    monkeypatch.setattr(isaf, "MAX_HEADER", 1000)  # read_isaf passes its cap to the parser
    fails(stories_isaf, r"safetensors header length \d+ is too large")


def test_cli_errors(stories, tmp_path):
    src = str(stories / "stories260K.bin")
    r = cli("convert", src, "-o", str(tmp_path / "x.isaf"), "--quant", "cq4-48")
    assert r.returncode == 2 and b"CQ4 group size must be one of (32, 64, 128)" in r.stderr
    r = cli("convert", src, "-o", str(tmp_path / "x.isaf"), "--group-size", "64")
    assert r.returncode == 2 and b"hidden_dim=172" in r.stderr and b"Traceback" not in r.stderr
    assert not (tmp_path / "x.isaf").exists()
    bad = tmp_path / "bad.isaf"
    bad.write_bytes(struct.pack("<Q", 10) + b'{"a": 1}  ')
    r = cli("run", str(bad), "-i", "x")
    assert r.returncode == 2 and str(bad).encode() in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_convert_reports(stories, tmp_path):
    out = tmp_path / "s.isaf"
    r = cli("convert", str(stories / "stories260K.bin"), "-o", str(out), "--group-size", "2")
    assert r.returncode == 0, r.stderr
    assert b"q8 group size 2" in r.stdout and read_isaf(out).weights.group_size == 2


def test_gguf_requantized_to_another_group_size(tmp_path):
    from isaforge.quant.q8 import quantize_q8

    src = write_tiny_gguf(tmp_path / "tiny.gguf")
    lines: list = []
    convert(src, tmp_path / "g64.isaf", group_size=64, log=lines.append)
    direct, packed = read_model(src, quant="q8"), read_isaf(tmp_path / "g64.isaf")
    assert direct.weights.group_size == 32 and packed.weights.group_size == 64
    assert any("requantizing Q8 group size 32 to 64" in s for s in lines)
    want = quantize_q8(direct.weights.w2[1].dequantize(), 64)[0]
    assert np.array_equal(packed.weights.w2[1].q, want.q)
    assert np.array_equal(packed.weights.w2[1].s, want.s)
    with pytest.raises(ValueError, match="group size 48 does not divide dim=64"):
        convert(src, tmp_path / "g48.isaf", group_size=48)


def test_hf_folder_round_trip(tmp_path):
    from test_hf import CFG, hf_tensors, write_folder

    cfg = dict(CFG, tie_word_embeddings=True)
    folder = write_folder(tmp_path / "hf", cfg, hf_tensors(cfg, seed=3))
    (folder / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {}}}')
    (folder / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    for quant in ("q8", "f32"):
        out = tmp_path / f"hf_{quant}.isaf"
        convert(folder, out, quant=quant)
        direct, packed = read_model(folder, quant), read_isaf(out)
        assert packed.config == direct.config
        assert np.array_equal(logits(direct, [1, 2, 3, 49, 0]), logits(packed, [1, 2, 3, 49, 0]))
        assert packed.metadata["tokenizer.huggingface.json"] == \
            (folder / "tokenizer.json").read_text()
        assert packed.metadata["tokenizer.chat_template"] == "{{ messages }}"


def _mapping_rss_kib(addr: int) -> int:
    """Rss (KiB) of the mapping holding address addr, from /proc/self/smaps."""
    rss, inside = None, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= addr < hi
            elif inside and line.startswith("Rss:"):
                rss = int(line.split()[1])
    assert rss is not None, "no mapping holds the address"
    return rss


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc")
def test_released_mapped_matrix_pages_leave_the_resident_set(tmp_path):
    """_drop_mapped (the engine's release of a packed, file-mapped matrix): the array's whole
    pages leave the resident set, its partial edge pages and the rest of the file stay, and
    the values read back unchanged (a dropped page faults in from the file)."""
    from isaforge.runtime.engine import _drop_mapped

    page = mmap.PAGESIZE
    data = np.random.default_rng(0).integers(0, 256, 64 * page, dtype=np.uint8)
    p = tmp_path / "m.bin"
    p.write_bytes(data.tobytes())
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    a = np.frombuffer(mm, np.uint8)
    assert int(a.sum(dtype=np.int64)) == int(data.sum(dtype=np.int64))  # every page resident
    addr = a.__array_interface__["data"][0]
    before = _mapping_rss_kib(addr)
    assert before >= 64 * page // 1024
    part = a[page // 2: 40 * page + page // 2]  # 39 whole pages inside, two partial ones
    _drop_mapped(part, [mm])
    assert before - _mapping_rss_kib(addr) == 39 * page // 1024
    assert np.array_equal(a, data)
    del a, part
    mm.close()
