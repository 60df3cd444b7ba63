"""Hugging Face folders: config.json + *.safetensors (+ tokenizer files) of Llama, Mistral,
Qwen2/2.5, Qwen3 and Gemma 3 (text) models.

safetensors: u64 header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin,
end]}, "__metadata__": {...}}, then the data; offsets are relative to byte 8 + N. The header
is parsed and checked here (length within the file, dtypes, sizes = shape x dtype, inside the
file, no overlaps) before anything is mapped.

HF q_proj/k_proj rows are in the "rotate_half" RoPE layout (per head, dimension i pairs with
i + head_size/2); isaforge, like llama2.c and GGUF, rotates interleaved pairs (2i, 2i+1) for
Llama. Llama/Mistral rows are permuted back per head: interleaved row 2i+j = HF row
j*head_size/2 + i. Qwen and Gemma run with NEOX RoPE (the rotate-half pairs), unpermuted, as
llama.cpp's GGUF files of them. Gemma's RMSNorm multiplies by (1 + weight): its norm weights
get the 1 added at load (as llama.cpp's converter does).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..quant.q8 import as_q8, read_group_size
from ..types import LAYER_MATRICES, Config, LoadedModel, ModelFormatError, Weights

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "Gemma3ForCausalLM")
_MODEL_TYPES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                "gemma3_text": "Gemma3ForCausalLM"}
ROPE_SCALING_TYPES = ("default", "llama3")
QUANT_MODES = ("q8", "f32")
MAX_HEADER = 100 << 20
# safetensors dtypes: name -> bytes per element; the loader decodes the first three.
DTYPE_SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "U64": 8, "I32": 4,
               "U32": 4, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1,
               "F8_E5M2": 1}
FLOAT_DTYPES = ("F32", "F16", "BF16")
_LAYER = {"rms_att": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
          "wv": "self_attn.v_proj", "wo": "self_attn.o_proj",
          "rms_ffn": "post_attention_layernorm", "w1": "mlp.gate_proj", "w2": "mlp.down_proj",
          "w3": "mlp.up_proj"}
# per architecture: the layer's tensors that differ from _LAYER, and its extra ones (Weights
# names -> HF names inside model.layers.N, ".weight" unless given)
_EXTRA = {
    "Qwen2ForCausalLM": {"bq": "self_attn.q_proj.bias", "bk": "self_attn.k_proj.bias",
                         "bv": "self_attn.v_proj.bias"},
    "Qwen3ForCausalLM": {"q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"},
    "Gemma3ForCausalLM": {"rms_ffn": "pre_feedforward_layernorm",
                          "rms_post_att": "post_attention_layernorm",
                          "rms_post_ffn": "post_feedforward_layernorm",
                          "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"},
}


def _fail(path, reason: str) -> ModelFormatError:
    return ModelFormatError(f"{path}: {reason}")


@dataclass(frozen=True)
class SafeTensor:
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int  # absolute file offset
    nbytes: int
    file: str


def parse_safetensors_header(path: str | os.PathLike, buf, max_header: int = MAX_HEADER
                             ) -> tuple[dict[str, SafeTensor], dict]:
    """Validate a safetensors header in `buf` (the whole file): ({name: tensor}, metadata).
    Checked: header length (within the file, at most `max_header` bytes), JSON object,
    __metadata__ an object, each entry's dtype, shape and data_offsets, sizes = shape x dtype,
    every tensor inside the file, no two overlapping. Shared by the HF and .isaf readers;
    raises ModelFormatError naming `path` and the reason."""
    size = len(buf)
    if size < 8:
        raise _fail(path, f"file is truncated: {size} bytes, a safetensors header needs 8")
    (n,) = struct.unpack_from("<Q", buf, 0)
    if n > size - 8 or n > max_header:
        raise _fail(path, f"safetensors header length {n} exceeds the file ({size} bytes)"
                    if n > size - 8 else f"safetensors header length {n} is too large")
    try:
        head = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(path, f"safetensors header is not valid JSON ({e})") from None
    if not isinstance(head, dict):
        raise _fail(path, "safetensors header is not a JSON object")
    meta = head.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise _fail(path, "safetensors __metadata__ is not an object")
    start, tensors = 8 + n, {}
    for name, e in head.items():
        if not isinstance(e, dict):
            raise _fail(path, f"tensor {name}: header entry is not an object")
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_SIZES:
            raise _fail(path, f"tensor {name} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise _fail(path, f"tensor {name} has invalid shape {shape!r}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(type(o) is int for o in offs)
                and 0 <= offs[0] <= offs[1]):
            raise _fail(path, f"tensor {name} has invalid data_offsets {offs!r}")
        want = math.prod(shape) * DTYPE_SIZES[dtype]
        if offs[1] - offs[0] != want:
            raise _fail(path, f"tensor {name}: data_offsets {offs} span {offs[1] - offs[0]} "
                        f"bytes, but shape {shape} of {dtype} needs {want}")
        if start + offs[1] > size:
            raise _fail(path, f"tensor {name} data [{start + offs[0]}, {start + offs[1]}) lies "
                        f"beyond the end of the file (size {size}; truncated?)")
        tensors[name] = SafeTensor(name, dtype, tuple(shape), start + offs[0], want,
                                   os.fspath(path))
    spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in tensors.values())
    for (_a0, a1, an), (b0, _b1, bn) in zip(spans, spans[1:], strict=False):
        if b0 < a1:
            raise _fail(path, f"tensors {an} and {bn} overlap in the file")
    return tensors, meta


def _float32(mm, t: SafeTensor) -> np.ndarray:
    n = math.prod(t.shape)
    if t.dtype == "F32":
        a = np.frombuffer(mm, "<f4", n, t.offset)
    elif t.dtype == "F16":
        a = np.frombuffer(mm, "<f2", n, t.offset).astype(np.float32)
    elif t.dtype == "BF16":
        a = (np.frombuffer(mm, "<u2", n, t.offset).astype(np.uint32) << 16).view(np.float32)
    else:
        raise AssertionError(t.dtype)  # checked by _weights
    return a.reshape(t.shape)


def unpermute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF rotate_half rows -> interleaved-pair rows, per head: out[2i+j] = w[j*hs/2 + i]."""
    rows, cols = w.shape
    hs = rows // n_heads
    return np.ascontiguousarray(w.reshape(n_heads, 2, hs // 2, cols).transpose(0, 2, 1, 3)
                                ).reshape(rows, cols)


# ---- config ----

def _cfg_int(cfg: dict, key: str, path, default=None) -> int:
    v = cfg.get(key, default)
    if v is None:
        raise _fail(path, f"config.json: missing required key {key}")
    if type(v) is not int or v <= 0:
        raise _fail(path, f"config.json: {key} must be a positive integer, got {v!r}")
    return v


def _cfg_float(cfg: dict, key: str, path, default: float) -> float:
    v = cfg.get(key, default)
    v = default if v is None else v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
        raise _fail(path, f"config.json: {key} must be a positive number, got {v!r}")
    return float(v)


def hf_architecture(cfg: dict, path) -> str:
    """The supported architecture a config.json names (or its model_type implies)."""
    archs = cfg.get("architectures") or []
    if not archs and cfg.get("model_type") in _MODEL_TYPES:
        archs = [_MODEL_TYPES[cfg["model_type"]]]
    if not isinstance(archs, list) or not any(isinstance(a, str) and a in ARCHITECTURES
                                              for a in archs):
        raise _fail(path, f"config.json: architectures {archs!r} not supported "
                    f"(supported: {', '.join(ARCHITECTURES)})")
    return next(a for a in archs if a in ARCHITECTURES)


def llama3_rope_divisors(head_size: int, theta: float, scaling: dict, path) -> np.ndarray:
    """Llama 3's RoPE frequency divisors (rope_scaling type llama3): per pair j of a head,
    frequency f = theta^(-2j / head_size), wavelength 2 pi / f; short waves (below
    original_max_position_embeddings / high_freq_factor) keep f, long ones (above .. /
    low_freq_factor) become f / factor, and between them f is blended smoothly."""
    def num(key: str, default: float) -> float:
        v = scaling.get(key, default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and
                                                                           v > 0):
            raise _fail(path, f"config.json: rope_scaling.{key} must be a positive number, "
                        f"got {v!r}")
        return float(v)
    factor, low, high = num("factor", 8.0), num("low_freq_factor", 1.0), \
        num("high_freq_factor", 4.0)
    ctx = num("original_max_position_embeddings", 8192)
    if high <= low:
        raise _fail(path, f"config.json: rope_scaling.high_freq_factor {high} must exceed "
                    f"low_freq_factor {low}")
    freq = 1.0 / theta ** (np.arange(0, head_size, 2, dtype=np.float64) / head_size)
    wavelen = 2 * math.pi / freq
    smooth = (ctx / wavelen - low) / (high - low)
    div = 1.0 / ((1 - smooth) / factor + smooth)
    div = np.where(wavelen < ctx / high, 1.0, np.where(wavelen > ctx / low, factor, div))
    return div.astype(np.float32)


def _gemma3_swa_pattern(cfg: dict, n_layers: int, path) -> int:
    """Every n-th layer global: from layer_types, else sliding_window_pattern (default 6)."""
    types = cfg.get("layer_types")
    if types is None:
        n = cfg.get("sliding_window_pattern", 6)
        if type(n) is not int or n <= 0:
            raise _fail(path, f"config.json: sliding_window_pattern must be a positive "
                        f"integer, got {n!r}")
        return n
    full = [i for i, t in enumerate(types or []) if t == "full_attention"] \
        if isinstance(types, list) else []
    n = full[0] + 1 if full else 0
    want = ["full_attention" if (i + 1) % n == 0 else "sliding_attention"
            for i in range(n_layers)] if n else None
    if types != want:
        raise _fail(path, "config.json: layer_types must be sliding_attention layers with "
                    "every n-th one full_attention (n_layers entries)")
    return n


def hf_config(cfg: dict, path) -> Config:
    """isaforge Config from a transformers config.json dict; refuses what isaforge lacks."""
    arch = hf_architecture(cfg, path)
    dim = _cfg_int(cfg, "hidden_size", path)
    heads = _cfg_int(cfg, "num_attention_heads", path)
    kv = _cfg_int(cfg, "num_key_value_heads", path, heads)
    seq = _cfg_int(cfg, "max_position_embeddings", path)
    window = cfg.get("sliding_window")
    if window is not None and (type(window) is not int or window < 0):
        raise _fail(path, f"config.json: sliding_window must be null or a non-negative "
                    f"integer, got {window!r}")
    if arch.startswith("Qwen") and not cfg.get("use_sliding_window", False):
        window = None  # Qwen2/3 configs carry a window they do not use
    tied = cfg.get("tie_word_embeddings", False)
    if type(tied) is not bool:
        raise _fail(path, f"config.json: tie_word_embeddings must be true or false, got "
                    f"{tied!r}")
    gemma = arch == "Gemma3ForCausalLM"
    if window and window < seq and not gemma:
        seq = window  # attention is full up to the window: cap the context there
    head_dim = cfg.get("head_dim")
    if head_dim is not None:
        head_dim = _cfg_int(cfg, "head_dim", path)
    if heads % kv or (head_dim is None and dim % heads) or (head_dim or dim // heads) % 2:
        raise _fail(path, f"config.json: inconsistent heads: hidden_size {dim}, "
                    f"num_attention_heads {heads}, num_key_value_heads {kv}, head_dim "
                    f"{head_dim} (head_dim must be even; without it num_attention_heads must "
                    "divide hidden_size)")
    hs = head_dim or dim // heads
    n_layers = _cfg_int(cfg, "num_hidden_layers", path)
    theta = _cfg_float(cfg, "rope_theta", path, 1e6 if gemma else 10000.0)
    layer: dict = {"head_dim": hs if hs != dim // heads or dim % heads else 0}
    if arch != "LlamaForCausalLM" and arch != "MistralForCausalLM":
        layer["rope_neox"] = 1
    if gemma:
        if not window:
            raise _fail(path, "config.json: sliding_window is required for Gemma 3")
        softcap = cfg.get("final_logit_softcapping")
        layer.update(act=1, embed_scale=float(np.sqrt(np.float32(dim))), sliding_window=window,
                     swa_pattern=_gemma3_swa_pattern(cfg, n_layers, path),
                     rope_theta_swa=_cfg_float(cfg, "rope_local_base_freq", path, 10000.0),
                     attn_scale=1.0 / math.sqrt(_cfg_float(cfg, "query_pre_attn_scalar", path, hs)),
                     logit_softcap=0.0 if softcap is None else
                     _cfg_float(cfg, "final_logit_softcapping", path, 0.0))
    c = Config(dim=dim, hidden_dim=_cfg_int(cfg, "intermediate_size", path),
               n_layers=n_layers, n_heads=heads, n_kv_heads=kv,
               vocab_size=_cfg_int(cfg, "vocab_size", path), seq_len=seq,
               shared_classifier=tied if "tie_word_embeddings" in cfg or not gemma else True,
               rope_theta=theta, norm_eps=_cfg_float(cfg, "rms_norm_eps", path, 1e-6), **layer)
    scaling = cfg.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, dict):
        raise _fail(path, f"config.json: rope_scaling must be null or an object, got "
                    f"{scaling!r}")
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind not in ROPE_SCALING_TYPES or (kind == "llama3" and gemma):
        raise _fail(path, f"config.json: rope_scaling.rope_type {kind!r} is not supported "
                    f"(supported: {', '.join(ROPE_SCALING_TYPES)}; llama3 not for Gemma)")
    act_key = "hidden_activation" if gemma else "hidden_act"
    act = cfg.get(act_key, cfg.get("hidden_act") if gemma else "silu")
    if act != ("gelu_pytorch_tanh" if gemma else "silu"):
        raise _fail(path, f"config.json: {act_key} {act!r} is not supported")
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise _fail(path, "config.json: attention_bias / mlp_bias (biases on every "
                    "projection) are not supported")
    return c


def hf_rope_divisors(cfg: dict, c: Config, path) -> np.ndarray | None:
    """Llama 3 RoPE divisors when config.json's rope_scaling asks for them, else None."""
    scaling = cfg.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) != "llama3":
        return None
    return llama3_rope_divisors(c.head_size, c.rope_theta, scaling, path)


# ---- the folder ----

def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _fail(path, f"not valid JSON ({e})") from None


def _shard_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        spec = _load_json(index)
        wm = spec.get("weight_map") if isinstance(spec, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
            raise _fail(index, "weight_map missing or malformed")
        names = sorted(set(wm.values()))
        bad = [n for n in names if Path(n).name != n or n in ("", ".", "..")]
        if bad:
            raise _fail(index, f"shard names must be plain file names, got {bad[0]!r}")
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise _fail(index, f"shard {missing[0]} listed in weight_map does not exist")
        return [folder / n for n in names]
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    found = sorted(folder.glob("*.safetensors"))
    if len(found) != 1:
        raise _fail(folder, "no model.safetensors (or model.safetensors.index.json) found"
                    if not found else "several .safetensors files but no "
                    "model.safetensors.index.json")
    return found


def _token_id(tok: object, vocab: dict[str, int]) -> int | None:
    if isinstance(tok, dict):
        tok = tok.get("content")
    return vocab.get(tok) if isinstance(tok, str) else None


def hf_metadata(folder: Path, cfg: dict) -> dict:
    """Tokenizer/chat metadata under the key names the GGUF reader also uses."""
    md: dict = {"hf_config": cfg}
    vocab: dict[str, int] = {}
    tj = folder / "tokenizer.json"
    if tj.is_file():
        try:
            text = tj.read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            raise _fail(tj, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
        md["tokenizer.huggingface.json"] = text
        try:
            spec = json.loads(text)
            v = (spec.get("model") or {}).get("vocab")
            if isinstance(v, dict):
                vocab.update(v)
            for t in spec.get("added_tokens") or []:
                vocab[t["content"]] = t["id"]
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError):
            pass  # the tokenizer loader reports a broken tokenizer.json itself
    tc_path = folder / "tokenizer_config.json"
    tc = _load_json(tc_path) if tc_path.is_file() else {}
    tc = tc if isinstance(tc, dict) else {}
    tmpl = tc.get("chat_template")
    if isinstance(tmpl, list):  # [{"name": ..., "template": ...}]: take "default", else first
        named = {t.get("name"): t.get("template") for t in tmpl if isinstance(t, dict)}
        tmpl = named.get("default", next(iter(named.values()), None))
    if isinstance(tmpl, str):
        md["tokenizer.chat_template"] = tmpl
    elif tmpl is not None:
        raise _fail(tc_path, f"chat_template must be a string or a list of {{name, template}}"
                    f" objects, got {type(tmpl).__name__}")
    for which in ("bos", "eos"):
        tid = _token_id(tc.get(f"{which}_token"), vocab)
        if tid is None:
            v = cfg.get(f"{which}_token_id")
            tid = v[0] if isinstance(v, list) and v else v
        if type(tid) is int and tid >= 0:
            md[f"tokenizer.ggml.{which}_token_id"] = tid
    return md


def read_hf(folder: str | os.PathLike, quant: str = "q8") -> LoadedModel:
    """Load a LlamaForCausalLM-style Hugging Face folder. quant="q8": matrices quantized with
    quant.q8 at group 32 (or the largest valid group below); quant="f32": float32 matrices."""
    if quant not in QUANT_MODES:
        raise ValueError(f"quant must be one of {', '.join(QUANT_MODES)}, got {quant!r}")
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise _fail(folder, "not a Hugging Face model folder (no config.json)")
    cfg = _load_json(folder / "config.json")
    if not isinstance(cfg, dict):
        raise _fail(folder / "config.json", "not a JSON object")
    c = hf_config(cfg, folder / "config.json")
    arch = hf_architecture(cfg, folder / "config.json")
    divisors = hf_rope_divisors(cfg, c, folder / "config.json")
    tensors: dict[str, SafeTensor] = {}
    maps: dict[str, mmap.mmap] = {}
    try:
        for shard in _shard_files(folder):
            with open(shard, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    raise _fail(shard, "file is empty")
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            maps[os.fspath(shard)] = mm
            found, _ = parse_safetensors_header(shard, mm)
            for name, t in found.items():
                if name in tensors:
                    raise _fail(shard, f"tensor {name} also appears in {tensors[name].file}")
                tensors[name] = t
        w = _weights(c, tensors, maps, quant, folder, arch)
        w.rope_freqs = divisors
    except BaseException:
        for mm in maps.values():
            try:
                mm.close()
            except BufferError:
                pass  # arrays still view it; the garbage collector unmaps it
        raise
    return LoadedModel(c, w, os.fspath(folder), "hf", keepalive=list(maps.values()),
                       metadata=hf_metadata(folder, cfg))


def _weights(c: Config, tensors: dict[str, SafeTensor], maps: dict, quant: str,
             folder: Path, arch: str = "LlamaForCausalLM") -> Weights:
    d, h, kv, qd, hs = c.dim, c.hidden_dim, c.kv_dim, c.q_dim, c.head_size
    shapes = {"rms_att": (d,), "wq": (qd, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, qd),
              "rms_ffn": (d,), "w1": (h, d), "w2": (d, h), "w3": (h, d),
              "rms_post_att": (d,), "rms_post_ffn": (d,), "q_norm": (hs,), "k_norm": (hs,),
              "bq": (qd,), "bk": (kv,), "bv": (kv,)}
    names = {f: n if n.endswith(".bias") else n + ".weight"
             for f, n in {**_LAYER, **_EXTRA.get(arch, {})}.items()}
    need = {"model.embed_tokens.weight": (c.vocab_size, d), "model.norm.weight": (d,)}
    if not c.shared_classifier:
        need["lm_head.weight"] = (c.vocab_size, d)
    for i in range(c.n_layers):
        need.update({f"model.layers.{i}.{n}": shapes[f] for f, n in names.items()})
    for name, shape in need.items():  # every name, shape and dtype before any conversion
        t = tensors.get(name)
        if t is None:
            raise _fail(folder, f"missing tensor {name}")
        if t.shape != shape:
            raise _fail(t.file, f"tensor {name} has shape {list(t.shape)}, expected "
                        f"{list(shape)} for this config")
        if t.dtype not in FLOAT_DTYPES:
            raise _fail(t.file, f"tensor {name} has dtype {t.dtype}, not supported "
                        f"(supported: {', '.join(FLOAT_DTYPES)})")
    gs = read_group_size(c)

    gemma = arch == "Gemma3ForCausalLM"

    def get(name: str) -> np.ndarray:
        return _float32(maps[tensors[name].file], tensors[name])

    def norm(name: str) -> np.ndarray:  # Gemma: x * (1 + w)
        a = np.asarray(get(name), np.float32)
        return a + np.float32(1.0) if gemma else a

    def mat(a: np.ndarray):
        return np.ascontiguousarray(a, np.float32) if quant == "f32" else as_q8(a, gs)

    tok = np.ascontiguousarray(get("model.embed_tokens.weight"), np.float32)
    layers: dict[str, list] = {f: [] for f in names}
    for i in range(c.n_layers):
        for f, n in names.items():
            name = f"model.layers.{i}.{n}"
            if f.startswith("w"):
                a = get(name)
                if f in ("wq", "wk") and not c.rope_neox:
                    a = unpermute_rope(a, c.n_heads if f == "wq" else c.n_kv_heads)
                layers[f].append(mat(a))
            else:  # norms (Gemma's + 1) and biases
                layers[f].append(np.asarray(get(name), np.float32) if f.startswith("b")
                                 else norm(name))
    wcls = (tok if quant == "f32" else mat(tok)) if c.shared_classifier else \
        mat(get("lm_head.weight"))
    # a quantized model's token table: the tied classifier's matrix (one copy), else Q8
    tok = wcls if c.shared_classifier else tok if quant == "f32" else as_q8(tok, gs)
    return Weights(tok_embeddings=tok, rms_att=np.stack(layers.pop("rms_att")),
                   rms_ffn=np.stack(layers.pop("rms_ffn")),
                   rms_final=norm("model.norm.weight"), wcls=wcls,
                   **{f: layers.pop(f) for f in LAYER_MATRICES},
                   vectors=layers)
