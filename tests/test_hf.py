"""Hugging Face folders: a tiny random Llama written with safetensors, checked against an
independent float64 forward pass in the HF convention (rotate_half RoPE on the unpermuted
weights); Q8 exactness; sharding, dtypes, metadata; corrupted safetensors headers."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from isaforge.formats import detect_format, read_any
from isaforge.formats.hf import read_hf
from isaforge.quant.q8 import quantize_q8
from isaforge.runtime.engine import Engine
from isaforge.types import LoadedModel, ModelFormatError, Weights

CFG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
       "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
       "num_key_value_heads": 2, "vocab_size": 50, "max_position_embeddings": 64,
       "rope_theta": 500.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
       "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "rope_scaling": None}
TOKS = [1, 7, 33, 2, 49, 0, 12, 12, 40, 5, 18]


def hf_tensors(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    d, h, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = d // cfg["num_attention_heads"] * cfg["num_key_value_heads"]

    def m(r: int, k: int) -> np.ndarray:
        return (rng.standard_normal((r, k)) / np.sqrt(k)).astype(np.float32)

    t = {"model.embed_tokens.weight": m(v, d),
         "model.norm.weight": rng.uniform(0.5, 1.5, d).astype(np.float32)}
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = m(v, d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = rng.uniform(0.5, 1.5, d).astype(np.float32)
        t[p + "post_attention_layernorm.weight"] = rng.uniform(0.5, 1.5, d).astype(np.float32)
        for n, s in {"self_attn.q_proj": (d, d), "self_attn.k_proj": (kv, d),
                     "self_attn.v_proj": (kv, d), "self_attn.o_proj": (d, d),
                     "mlp.gate_proj": (h, d), "mlp.up_proj": (h, d),
                     "mlp.down_proj": (d, h)}.items():
            t[p + n + ".weight"] = m(*s)
    return t


def write_folder(folder: Path, cfg: dict, tensors: dict, shards: int = 1, extra: dict | None
                 = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    names = sorted(tensors)
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
    else:
        wm = {}
        for k in range(shards):
            fn = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[k::shards]}
            save_file(part, str(folder / fn))
            wm.update({n: fn for n in part})
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    for name, text in (extra or {}).items():
        (folder / name).write_text(text)
    return folder


# ---- the independent oracle: HF's Llama forward pass in float64 ----

def hf_forward(cfg: dict, t: dict[str, np.ndarray], tokens: list[int]) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in t.items()}
    d, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hs, n, eps = d // nh, len(tokens), cfg["rms_norm_eps"]

    def norm(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))

    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, hs, 2) / hs)
    ang = np.arange(n)[:, None] * inv[None, :]
    cos, sin = np.cos(np.concatenate([ang, ang], 1)), np.sin(np.concatenate([ang, ang], 1))

    def rope(x: np.ndarray) -> np.ndarray:  # (heads, n, hs), rotate_half convention
        rot = np.concatenate([-x[..., hs // 2:], x[..., :hs // 2]], -1)
        return x * cos + rot * sin

    x = f["model.embed_tokens.weight"][tokens]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        hn = norm(x, f[p + "input_layernorm.weight"])
        q = (hn @ f[p + "self_attn.q_proj.weight"].T).reshape(n, nh, hs).transpose(1, 0, 2)
        k = (hn @ f[p + "self_attn.k_proj.weight"].T).reshape(n, nkv, hs).transpose(1, 0, 2)
        v = (hn @ f[p + "self_attn.v_proj.weight"].T).reshape(n, nkv, hs).transpose(1, 0, 2)
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, nh // nkv, 0), np.repeat(v, nh // nkv, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hs) + mask
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        o = (a @ v).transpose(1, 0, 2).reshape(n, d)
        x = x + o @ f[p + "self_attn.o_proj.weight"].T
        hn = norm(x, f[p + "post_attention_layernorm.weight"])
        g = hn @ f[p + "mlp.gate_proj.weight"].T
        u = hn @ f[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ f[p + "mlp.down_proj.weight"].T
    x = norm(x, f["model.norm.weight"])
    head = f["model.embed_tokens.weight" if cfg["tie_word_embeddings"] else "lm_head.weight"]
    return x @ head.T


def logits(m: LoadedModel) -> np.ndarray:
    return Engine(m, threads=1).prefill(TOKS, all_logits=True)


@pytest.mark.parametrize("tied", [False, True])
def test_f32_logits_match_hf_forward(tmp_path: Path, tied: bool) -> None:
    cfg = {**CFG, "tie_word_embeddings": tied}
    t = hf_tensors(cfg)
    m = read_hf(write_folder(tmp_path / "m", cfg, t), quant="f32")
    assert m.format == "hf" and m.config.shared_classifier == tied
    assert (m.config.dim, m.config.hidden_dim, m.config.n_kv_heads, m.config.rope_theta) == \
        (64, 96, 2, 500.0)
    ref = hf_forward(cfg, t, TOKS)
    got = logits(m)
    assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    # Without the q/k permutation the same check fails: the oracle can tell layouts apart.
    bad = {**t}
    for i in range(2):
        for n in ("q_proj", "k_proj"):
            bad[f"model.layers.{i}.self_attn.{n}.weight"] = m.weights.__dict__[
                "wq" if n == "q_proj" else "wk"][i]
    assert np.abs(hf_forward(cfg, bad, TOKS) - ref).max() > 1e-2 * np.abs(ref).max()


def interleave_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """rotate_half rows -> interleaved pairs, by explicit index loops."""
    hs = w.shape[0] // heads
    out = np.empty_like(w)
    for h in range(heads):
        for i in range(hs // 2):
            out[h * hs + 2 * i] = w[h * hs + i]
            out[h * hs + 2 * i + 1] = w[h * hs + hs // 2 + i]
    return out


def test_q8_equals_direct_quantization(tmp_path: Path) -> None:
    t = hf_tensors(CFG)
    m = read_hf(write_folder(tmp_path / "m", CFG, t), quant="q8")
    assert m.weights.group_size == 32
    # a quantized model's untied token table is Q8 too (rows dequantized on lookup)
    w = Weights(tok_embeddings=quantize_q8(t["model.embed_tokens.weight"], 32)[0],
                rms_att=np.stack([t[f"model.layers.{i}.input_layernorm.weight"]
                                  for i in range(2)]),
                rms_ffn=np.stack([t[f"model.layers.{i}.post_attention_layernorm.weight"]
                                  for i in range(2)]),
                rms_final=t["model.norm.weight"],
                wcls=quantize_q8(t["lm_head.weight"], 32)[0])
    names = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
             "wo": "self_attn.o_proj", "w1": "mlp.gate_proj", "w2": "mlp.down_proj",
             "w3": "mlp.up_proj"}
    for f, n in names.items():
        for i in range(2):
            a = t[f"model.layers.{i}.{n}.weight"]
            if f in ("wq", "wk"):
                a = interleave_rows(a, 4 if f == "wq" else 2)
            getattr(w, f).append(quantize_q8(a, 32)[0])
    direct = LoadedModel(m.config, w, "direct", "synthetic")
    assert np.array_equal(logits(m), logits(direct))
    ref = hf_forward(CFG, t, TOKS)  # and Q8 stays near the float64 oracle
    assert np.abs(logits(m) - ref).max() <= 0.05 * np.abs(ref).max()


def test_sharded_and_half_precision(tmp_path: Path) -> None:
    t = hf_tensors(CFG)
    one = logits(read_hf(write_folder(tmp_path / "a", CFG, t), quant="f32"))
    sharded = write_folder(tmp_path / "b", CFG, t, shards=3)
    assert len(list(sharded.glob("*.safetensors"))) == 3
    assert np.array_equal(logits(read_hf(sharded, quant="f32")), one)
    h = {k: v.astype(np.float16) for k, v in t.items()}
    mh = read_hf(write_folder(tmp_path / "c", CFG, h), quant="f32")
    assert np.array_equal(mh.weights.w2[1], h["model.layers.1.mlp.down_proj.weight"]
                          .astype(np.float32))
    # BF16: written by hand (numpy has no bfloat16): the top 16 bits of each float32.
    bf = {k: (v.view(np.uint32) >> 16).astype("<u2") for k, v in t.items()}
    folder = tmp_path / "d"
    write_folder(folder, CFG, {"x": np.zeros(1, np.float32)})
    write_raw(folder / "model.safetensors", {k: ("BF16", v) for k, v in bf.items()})
    mb = read_hf(folder, quant="f32")
    want = (bf["model.layers.0.self_attn.v_proj.weight"].astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(mb.weights.wv[0], want)


def write_raw(path: Path, tensors: dict[str, tuple[str, np.ndarray]], lie: dict | None = None,
              pad: int = 0) -> None:
    """A safetensors file by hand; `lie` overrides header entries."""
    head, blobs, off = {}, [], 0
    for name, (dtype, a) in tensors.items():
        b = a.tobytes()
        head[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    for name, e in (lie or {}).items():
        head[name] = {**head.get(name, {}), **e}
    h = json.dumps(head).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs) + bytes(pad))


def test_metadata_tokenizer_files(tmp_path: Path) -> None:
    tok = {"model": {"type": "BPE", "vocab": {"<s>": 0, "a": 3}},
           "added_tokens": [{"id": 11, "content": "<|start|>"}, {"id": 12, "content": "<|end|>"}]}
    tc = {"bos_token": "<|start|>", "eos_token": {"content": "<|end|>"},
          "chat_template": "{{ messages }}"}
    extra = {"tokenizer.json": json.dumps(tok), "tokenizer_config.json": json.dumps(tc)}
    m = read_hf(write_folder(tmp_path / "m", CFG, hf_tensors(CFG), extra=extra))
    md = m.metadata
    assert md["hf_config"] == CFG and md["tokenizer.huggingface.json"] == json.dumps(tok)
    assert md["tokenizer.chat_template"] == "{{ messages }}"
    assert md["tokenizer.ggml.bos_token_id"] == 11 and md["tokenizer.ggml.eos_token_id"] == 12
    m2 = read_hf(write_folder(tmp_path / "n", {**CFG, "eos_token_id": [9, 2]}, hf_tensors(CFG)))
    assert m2.metadata["tokenizer.ggml.bos_token_id"] == 1
    assert m2.metadata["tokenizer.ggml.eos_token_id"] == 9
    assert "tokenizer.huggingface.json" not in m2.metadata


def test_detect_and_read_any(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "m", CFG, hf_tensors(CFG))
    assert detect_format(folder) == "hf" and read_any(folder, quant="f32").format == "hf"
    with pytest.raises(ModelFormatError, match="bare safetensors file"):
        detect_format(folder / "model.safetensors")
    with pytest.raises(ModelFormatError, match="directory without config.json"):
        detect_format(tmp_path)
    with pytest.raises(FileNotFoundError):
        read_any(tmp_path / "nothing")


# ---- malformed folders and files ----

def fails(folder: Path, match: str) -> None:
    with pytest.raises(ModelFormatError, match=match) as e:
        read_hf(folder)
    assert str(folder) in str(e.value) and "\n" not in str(e.value)


def test_lying_safetensors_headers(tmp_path: Path) -> None:
    t = hf_tensors(CFG)
    folder = write_folder(tmp_path / "m", CFG, {"x": np.zeros(1, np.float32)})
    st = folder / "model.safetensors"
    raw = {k: ("F32", v) for k, v in t.items()}
    q = "model.layers.0.self_attn.q_proj.weight"
    cases = [
        ({q: {"shape": [64, 65]}}, 0, r"q_proj.weight: data_offsets .* span 16384 bytes, but "
                                      r"shape \[64, 65\] of F32 needs 16640"),
        ({q: {"dtype": "F16"}}, 0, "span 16384 bytes, but shape .* of F16 needs 8192"),
        ({q: {"dtype": "Q4"}}, 0, "unknown dtype 'Q4'"),
        ({q: {"data_offsets": [0, 1 << 40]}}, 0, "span"),
        ({q: {"data_offsets": [10, 5]}}, 0, "invalid data_offsets"),
        ({q: {"shape": [-64, 64]}}, 0, "invalid shape"),
        ({q: {"data_offsets": [0, 16384]}}, 0, "overlap"),
        ({"extra": {"dtype": "F32", "shape": [4], "data_offsets": [10 ** 9, 10 ** 9 + 16]}}, 0,
         "extra data .* beyond the end of the file"),
        ({q: {"dtype": "I32"}}, 0, "q_proj.weight has dtype I32, not supported"),
    ]
    for lie, pad, match in cases:
        write_raw(st, raw, lie, pad)
        fails(folder, match)
    write_raw(st, raw)
    good = st.read_bytes()
    st.write_bytes(good[:len(good) - 100])
    fails(folder, "beyond the end of the file")
    st.write_bytes(struct.pack("<Q", len(good)) + good[8:])
    fails(folder, "header length .* exceeds the file")
    st.write_bytes(good[:4])
    fails(folder, "truncated")
    (n,) = struct.unpack_from("<Q", good)
    st.write_bytes(good[:8] + b"[" + good[9:])
    fails(folder, "not valid JSON")
    st.write_bytes(good[:8] + b"[" + b" " * (n - 2) + b"]" + good[8 + n:])
    fails(folder, "not a JSON object")


def test_random_header_corruption_gives_clean_errors(tmp_path: Path) -> None:
    """Flipped bytes in the safetensors header: a clean ModelFormatError or a loaded model."""
    folder = write_folder(tmp_path / "m", CFG, hf_tensors(CFG))
    st = folder / "model.safetensors"
    good = st.read_bytes()
    (n,) = struct.unpack_from("<Q", good)
    rng, errors = np.random.default_rng(7), 0
    for k in range(120):
        b = bytearray(good)
        for at in rng.integers(0, 8 + n, 1 + k % 3):
            b[at] = rng.choice([rng.integers(0, 256), ord("1"), ord("]"), ord('"')])
        st.write_bytes(bytes(b))
        try:
            read_hf(folder, quant="f32")
        except ModelFormatError as e:
            assert str(folder) in str(e)
            errors += 1
    assert errors > 40


def test_folder_problems(tmp_path: Path) -> None:
    t = hf_tensors(CFG)
    fails(tmp_path, "no config.json")
    f = write_folder(tmp_path / "a", CFG, {k: v for k, v in t.items() if "norm" not in k[:12]})
    fails(f, "missing tensor model.norm.weight")
    t2 = {**t, "model.layers.1.mlp.up_proj.weight": np.zeros((96, 32), np.float32)}
    fails(write_folder(tmp_path / "b", CFG, t2),
          r"up_proj.weight has shape \[96, 32\], expected \[96, 64\]")
    f = write_folder(tmp_path / "c", CFG, t, shards=2)
    (f / "model-00002-of-00002.safetensors").unlink()
    fails(f, "shard model-00002-of-00002.safetensors listed in weight_map does not exist")
    (f / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "../x"}}))
    fails(f, "plain file names")
    f = write_folder(tmp_path / "d", CFG, t)
    (f / "config.json").write_text("{nope")
    fails(f, "config.json: not valid JSON")


@pytest.mark.parametrize("change, match", [
    ({"architectures": ["GPT2LMHeadModel"]}, r"architectures \['GPT2LMHeadModel'\] not "
                                             r"supported \(supported: LlamaForCausalLM"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 8.0}},
     r"rope_scaling.rope_type 'yarn' is not supported \(supported: default, llama3"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling.rope_type 'linear'"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": -1}},
     "rope_scaling.factor must be a positive number"),
    ({"hidden_size": None}, "missing required key hidden_size"),
    ({"num_hidden_layers": 0}, "num_hidden_layers must be a positive integer"),
    ({"num_key_value_heads": 3}, "inconsistent heads"),
    ({"head_dim": 15}, "inconsistent heads.*head_dim 15"),
    ({"head_dim": 32}, r"q_proj.weight has shape \[64, 64\], expected \[128, 64\]"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"attention_bias": True}, "biases"),
    ({"vocab_size": 51}, r"embed_tokens.weight has shape \[50, 64\], expected \[51, 64\]"),
])
def test_config_refusals(tmp_path: Path, change: dict, match: str) -> None:
    cfg = {k: v for k, v in {**CFG, **change}.items() if v is not None or k == "rope_scaling"}
    fails(write_folder(tmp_path / "m", cfg, hf_tensors(CFG)), match)


def test_rope_scaling_default_and_mistral_accepted(tmp_path: Path) -> None:
    cfg = {**CFG, "architectures": ["MistralForCausalLM"], "sliding_window": 16,
           "rope_scaling": {"rope_type": "default"}}
    m = read_hf(write_folder(tmp_path / "m", cfg, hf_tensors(CFG)))
    assert m.config.seq_len == 16  # full attention only up to the window


def test_bad_quant_mode(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="quant must be one of q8, f32"):
        read_hf(write_folder(tmp_path / "m", CFG, hf_tensors(CFG)), quant="int4")
