"""Strict headers: a file whose header contradicts its size, non-finite weights in
any format, and config fields of the wrong type are refused with the file and the reason."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fuzz import seeds  # noqa: E402
from isaforge.formats import read_any  # noqa: E402
from isaforge.formats.llama2c import V1_HEADER, write_llama2c_v1  # noqa: E402
from isaforge.types import Config, ModelFormatError  # noqa: E402

C = seeds.C


def v1_file(tmp_path: Path, c: Config = C, name: str = "m.bin") -> Path:
    w = seeds._weights(c)
    if not c.shared_classifier:
        w.wcls = np.ones_like(w.tok_embeddings)
    p = tmp_path / name
    write_llama2c_v1(p, c, w)
    return p


def patch_header(p: Path, **fields) -> None:
    """Rewrite named v1 header fields in place."""
    names = ["magic", "version", "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
             "vocab_size", "seq_len", "shared"]
    b = bytearray(p.read_bytes())
    vals = dict(zip(names, V1_HEADER.unpack_from(b), strict=True))
    vals.update(fields)
    V1_HEADER.pack_into(b, 0, *(vals[n] for n in names))
    p.write_bytes(bytes(b))


@pytest.mark.parametrize("field,value", [("hidden_dim", 16), ("n_kv_heads", 1),
                                         ("n_layers", 0), ("vocab_size", 39)])
def test_llama2c_header_smaller_than_the_file(tmp_path, field, value):
    c = Config(**{**C.__dict__, "n_kv_heads": 2}) if field == "n_kv_heads" else C
    p = v1_file(tmp_path, c)
    patch_header(p, **{field: value})
    with pytest.raises(ModelFormatError, match=str(p.name)):
        read_any(p)


def test_llama2c_header_smaller_says_too_many_bytes(tmp_path):
    p = v1_file(tmp_path)
    patch_header(p, hidden_dim=16)
    with pytest.raises(ModelFormatError, match="bytes too many"):
        read_any(p)


def test_llama2c_shared_flag_contradicting_the_size(tmp_path):
    p = v1_file(tmp_path, Config(**{**C.__dict__, "shared_classifier": False}))
    read_any(p)  # as written: fine
    patch_header(p, shared=1)
    with pytest.raises(ModelFormatError, match="unshared classifier.*contradicts"):
        read_any(p)


def _poison_f32(p: Path, at: int, value: float) -> None:
    b = bytearray(p.read_bytes())
    struct.pack_into("<f", b, at, value)
    p.write_bytes(bytes(b))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_llama2c_non_finite_weight(tmp_path, value):
    p = v1_file(tmp_path)
    # v1 layout: rms_att (L, d), rms_ffn, rms_final, tok_embeddings, then the matrices
    off = 256 + 4 * (2 * C.n_layers * C.dim + C.dim + C.vocab_size * C.dim + 5)
    _poison_f32(p, off, value)
    with pytest.raises(ModelFormatError, match=r"layers\.0\.wq has a non-finite value"):
        read_any(p)


def test_q8_non_finite_scale_llama2c_v2(tmp_path):
    p = tmp_path / "q.bin"
    p.write_bytes(seeds.llama2c_model(2))
    read_any(p)
    # v2: rms_att, rms_ffn, rms_final, then tok_embeddings q (v*d bytes) and its scales
    off = 256 + 4 * (2 * C.n_layers * C.dim + C.dim) + C.vocab_size * C.dim
    _poison_f32(p, off + 4 * 3, float("inf"))
    with pytest.raises(ModelFormatError, match="non-finite"):
        read_any(p)


def test_gguf_non_finite_weight(tmp_path):
    import gguf

    p = tmp_path / "m.gguf"
    p.write_bytes(seeds.gguf_model())
    r = gguf.GGUFReader(str(p))
    t = next(t for t in r.tensors if t.name == "blk.0.ffn_up.weight")
    b = bytearray(p.read_bytes())
    struct.pack_into("<f", b, int(t.data_offset) + 8, float("nan"))
    p.write_bytes(bytes(b))
    with pytest.raises(ModelFormatError, match="non-finite|NaN|nan"):
        read_any(p, quant="f32")


def hf_folder(tmp_path: Path, config: dict | None = None, tc: dict | None = None,
              st: bytes | None = None) -> Path:
    d = tmp_path / "hf"
    d.mkdir(exist_ok=True)
    files = seeds.hf_files()
    if config is not None:
        files["config.json"] = json.dumps(config).encode()
    if tc is not None:
        files["tokenizer_config.json"] = json.dumps(tc).encode()
    if st is not None:
        files["model.safetensors"] = st
    for n, b in files.items():
        (d / n).write_bytes(b)
    return d


def test_hf_non_finite_weight(tmp_path):
    from safetensors.numpy import load, save

    t = load(seeds.hf_files()["model.safetensors"])
    t["model.layers.0.mlp.up_proj.weight"][3, 4] = np.inf
    with pytest.raises(ModelFormatError, match="non-finite"):
        read_any(hf_folder(tmp_path, st=save(t)), quant="f32")


@pytest.mark.parametrize("key,value", [("tie_word_embeddings", "yes"),
                                       ("tie_word_embeddings", 1),
                                       ("sliding_window", "4096"),
                                       ("architectures", [["LlamaForCausalLM"]])])
def test_hf_config_wrong_types_name_the_key(tmp_path, key, value):
    cfg = {**seeds.HF_CONFIG, key: value}
    with pytest.raises(ModelFormatError, match=key if key != "architectures" else "architect"):
        read_any(hf_folder(tmp_path, config=cfg))


def test_hf_non_string_chat_template_is_an_error(tmp_path):
    with pytest.raises(ModelFormatError, match="chat_template must be a string"):
        read_any(hf_folder(tmp_path, tc={"chat_template": 42}))


def test_safetensors_list_dtype_is_an_error(tmp_path):
    raw = seeds.hf_files()["model.safetensors"]
    (n,) = struct.unpack_from("<Q", raw)
    head = json.loads(raw[8:8 + n])
    head["model.norm.weight"]["dtype"] = ["F32"]
    h = json.dumps(head).encode().ljust(n)
    with pytest.raises(ModelFormatError, match="unknown dtype"):
        read_any(hf_folder(tmp_path, st=struct.pack("<Q", len(h)) + h + raw[8 + n:]))


def test_fifo_model_path_is_refused_without_blocking(tmp_path):
    import os

    f = tmp_path / "model.bin"
    os.mkfifo(f)
    with pytest.raises(ModelFormatError, match="not a regular file"):
        read_any(f)


def test_fifo_refused_by_the_llama2c_entry_points(tmp_path):
    """quantize_model, read_llama2c and the tokenizer loader refuse a FIFO before opening it
    (opening one for reading would block until a writer comes)."""
    import os

    from isaforge.formats.llama2c import quantize_model, read_llama2c
    from isaforge.text.llama2c import Llama2cTokenizer

    f = tmp_path / "fifo"
    os.mkfifo(f)
    for call in (lambda: quantize_model(f, tmp_path / "out.bin"), lambda: read_llama2c(f),
                 lambda: Llama2cTokenizer.load(f, 32)):
        with pytest.raises(ModelFormatError, match="not a regular file"):
            call()
    assert not (tmp_path / "out.bin").exists()
