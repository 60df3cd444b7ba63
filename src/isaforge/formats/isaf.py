"""isaforge's own `.isaf` format: one safetensors file, tensors already in the kernel layout.

    u64 N | N bytes of JSON header (space padded: the data starts at a multiple of 64) | data

The header is standard safetensors (readable by `safetensors.safe_open(..., "numpy")`); its
`__metadata__["isaforge"]` is a JSON string: format version, config, quantization (scheme,
group size), the packed layout name, tokenizer metadata (GGUF-style `tokenizer.*` keys, or an
embedded llama2.c tokenizer) and the chat template.

Layout "rowmajor-q8-v1" (what the C kernels read, so loading is a mmap and no copy):
  tok_embeddings             F32 (vocab, dim)      token table, stored once, as metadata
                                                   "tok_embeddings" says: "f32" (this tensor;
                                                   float32 models, and every version 1 file),
                                                   "wcls" (a quantized model's tied classifier:
                                                   its tensors are the table, no tensor here) or
                                                   "q8" (an untied quantized model's table:
  tok_embeddings.q/.scales   I8 / F32              Q8 at metadata tok_group_size)
  rms_att, rms_ffn           F32 (n_layers, dim)
  rms_final                  F32 (dim,)
  layers.{i}.{w}.scales      F32 (rows, cols / gs) Q8 scale per group of gs along a row
  layers.{i}.{w}             F32 (rows, cols)      fp32 matrices (scheme "f32")
  wcls.scales / wcls         as above; absent when the classifier is the fp32 token table
  layers.{i}.{w}.q, wcls.q   I8  (rows, cols)      Q8 values, row-major, w ~= q * scale
  __pad{k}                   U8  (n,)              filler so every tensor starts 64-aligned
with w in wq, wk, wv, wo, w1, w2, w3 ((out, in) as in llama2.c). Float32 tensors come first.

Scheme "q4" (4-bit layer matrices: CQ4, or GGUF Q4_0 / IQ4_NL / IQ4_XS as they were; the
classifier Q8 at quantization.group_size), layout "rowmajor-q4-v1", per layer matrix:
  layers.{i}.{w}.nibbles     U8  (rows, kpad / 2)  the kernels' layout (isaforge.h if_q4_gemv_fn)
  layers.{i}.{w}.scales      F32 (rows, kpad / g)  one scale per group of g along the padded row
  layers.{i}.{w}.codebook    I8  (16,)             the values the nibbles index, in [-127, 127]
  rotation.signs.{kpad}      F32 (kpad,)           +-1 of the Hadamard rotation of padded rows
                                                   of kpad (one per padded length in use)
and metadata quantization.q4 = {"codebook_size": 16, "seed": s, "tensors": {"layers.{i}.{w}":
{"group_size": g, "kpad": kpad, "rotation": "hadamard" | "none", "kind": "cq4" | "q4_0" |
"iq4_nl" | "iq4_xs"}}}; kpad is the row length rounded up to a multiple of g and of 32.

Metadata lists of BLOB_MIN_ITEMS or more values (a GGUF tokenizer's tokens, token types and
merges: in JSON inside the header they were 1.6 MB of SmolLM2's 2.0 MB header) are stored as
  metadata.{key}             U8  (n,)              zlib of the list's JSON
with their keys in metadata "metadata_blobs" (version 3); the loader inflates them (at most
MAX_BLOB bytes each) back into the metadata.

Scales (every `*.scales` tensor) are F32, or F16 when every value of the array is exactly a
float16 (GGUF's Q8_0 / Q4_0 / IQ4_NL scales; CQ4's, which its quantizer rounds to float16);
the loader widens F16 scales to a float32 copy (a few % of the bytes; the int8 and nibble
arrays stay mapped). A reader from before F16 scales refuses such a file naming the tensor.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from ..quant.q4 import Q4Tensor, padded_length
from ..types import (
    LAYER_MATRICES,
    LAYER_VECTORS,
    Config,
    LoadedModel,
    ModelFormatError,
    Q8Tensor,
    Weights,
)
from .hf import SafeTensor, parse_safetensors_header

VERSION = 3  # 2: the token table stored once, quantized (metadata "tok_embeddings");
# 3: long metadata lists (the tokenizer's tokens, types, merges) as zlib blob tensors
VERSIONS = (1, 2, 3)  # version 1 files (a float32 table beside the classifier) still load
TOK_KINDS = ("f32", "wcls", "q8")
LAYOUT = "rowmajor-q8-v1"
LAYOUT_Q4 = "rowmajor-q4-v1"
ROTATIONS = ("hadamard", "none")
Q4_KINDS = ("cq4", "q4_0", "iq4_nl", "iq4_xs")
ALIGN = 64
MAX_HEADER = 256 << 20  # header cap given to parse_safetensors_header (HF files: 100 MiB)
BLOB_MIN_ITEMS = 256  # a metadata list this long goes into a blob tensor (version 3)
MAX_BLOB = 256 << 20  # the most a metadata blob may inflate to
MATS = LAYER_MATRICES
SCHEMES = ("q8", "f32", "q4")
_DTYPES = {"F32": np.dtype("<f4"), "I8": np.dtype("i1"), "U8": np.dtype("u1"),
           "F16": np.dtype("<f2")}  # F16: scales only (_check_tensors)
_NAMES = {v: k for k, v in _DTYPES.items()}
# metadata carried from the source: what the tokenizer and chat layers read
KEEP_PREFIXES = ("tokenizer.", "general.", "isaforge.")


def _fail(path: object, reason: str) -> ModelFormatError:
    return ModelFormatError(f"{path}: {reason}")


def _mat_shapes(c: Config) -> dict[str, tuple[int, int]]:
    d, h, kv, qd = c.dim, c.hidden_dim, c.kv_dim, c.q_dim
    return {"wq": (qd, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, qd), "w1": (h, d),
            "w2": (d, h), "w3": (h, d)}


def _vector_len(c: Config, name: str) -> int:
    return {"q_norm": c.head_size, "k_norm": c.head_size, "bq": c.q_dim, "bk": c.kv_dim,
            "bv": c.kv_dim}.get(name, c.dim)


def _layer_expected(c: Config, vectors: list, rope_freqs: bool) -> dict[str, tuple]:
    """The layer description's tensors: vectors.<name> (n_layers, length) for each optional
    per-layer vector the model has, and rope_freqs (head_size / 2) when it has Llama 3 RoPE."""
    out = {f"vectors.{n}": ("F32", (c.n_layers, _vector_len(c, n))) for n in vectors}
    if rope_freqs:
        out["rope_freqs"] = ("F32", (c.head_size // 2,))
    return out


def _layer_arrays(loaded: LoadedModel) -> tuple[list, dict]:
    """(arrays, info entries) of the model's layer description (none for a Llama model)."""
    w, arrays = loaded.weights, []
    for name, per_layer in sorted(w.vectors.items()):
        if name not in LAYER_VECTORS or any(a is None for a in per_layer):
            raise ValueError(f"{loaded.path}: vector {name}: .isaf stores a known layer vector "
                             f"({', '.join(LAYER_VECTORS)}) for every layer or for none")
        arrays.append((f"vectors.{name}", np.stack([np.asarray(a, np.float32)
                                                    for a in per_layer])))
    if w.rope_freqs is not None:
        arrays.append(("rope_freqs", w.rope_freqs))
    return arrays, {"vectors": sorted(w.vectors), "rope_freqs": w.rope_freqs is not None}


def _expected(c: Config, scheme: str, gs: int, wcls_stored: bool, tok: str = "f32",
              tok_gs: int = 0) -> dict[str, tuple]:
    """name -> (dtype name, shape) of every tensor a valid file holds (tok: TOK_KINDS)."""
    out: dict[str, tuple] = {
        "rms_att": ("F32", (c.n_layers, c.dim)),
        "rms_ffn": ("F32", (c.n_layers, c.dim)),
        "rms_final": ("F32", (c.dim,)),
    }
    if tok == "f32":
        out["tok_embeddings"] = ("F32", (c.vocab_size, c.dim))
    elif tok == "q8":
        out["tok_embeddings.scales"] = ("F32", (c.vocab_size, c.dim // tok_gs))
        out["tok_embeddings.q"] = ("I8", (c.vocab_size, c.dim))
    mats = [(f"layers.{i}.{n}", s) for i in range(c.n_layers) for n, s in _mat_shapes(c).items()]
    if wcls_stored:
        mats.append(("wcls", (c.vocab_size, c.dim)))
    for name, (rows, cols) in mats:
        if scheme == "q4" and name != "wcls":
            continue  # _expected_q4
        if scheme in ("q8", "q4"):
            out[f"{name}.scales"] = ("F32", (rows, cols // gs))
            out[f"{name}.q"] = ("I8", (rows, cols))
        else:
            out[name] = ("F32", (rows, cols))
    return out


def _json_default(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (bytes, bytearray)):
        return o.decode("utf-8", "surrogateescape")
    raise TypeError(f"cannot store {type(o).__name__} in .isaf metadata")


def _q4_entries(path, c: Config, q4) -> tuple[dict[str, dict], dict[str, tuple]]:
    """The checked per-matrix entries of metadata quantization.q4 and the tensors they imply
    (name -> (dtype, shape)); ModelFormatError naming the tensor for anything inconsistent."""
    if not isinstance(q4, dict):
        raise _fail(path, "metadata quantization.q4 is missing or not an object")
    n = q4.get("codebook_size")
    if n != 16:
        raise _fail(path, f"quantization.q4.codebook_size is {n!r}; the 4-bit kernels index a "
                          "16-entry codebook")
    ents = q4.get("tensors")
    if not isinstance(ents, dict):
        raise _fail(path, "metadata quantization.q4.tensors is missing or not an object")
    out: dict[str, tuple] = {}
    kpads = set()
    mats = [(f"layers.{i}.{m}", shape) for i in range(c.n_layers)
            for m, shape in _mat_shapes(c).items()]
    if "wcls" in ents:  # a 4-bit (tied) classifier
        mats.append(("wcls", (c.vocab_size, c.dim)))
    for name, (rows, cols) in mats:
        e = ents.get(name)
        if not isinstance(e, dict):
            raise _fail(path, f"tensor {name}: no 4-bit entry in quantization.q4.tensors")
        g, kpad, rot = e.get("group_size"), e.get("kpad"), e.get("rotation")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (g, kpad)) \
                or g < 32 or g % 32 or kpad < cols or kpad % g or kpad - cols >= g:
            raise _fail(path, f"tensor {name}: group size {g!r} must be a multiple of 32 "
                              f"dividing the padded row length {kpad!r} (the row length "
                              f"{cols} rounded up to a multiple of it)")
        if rot not in ROTATIONS:
            raise _fail(path, f"tensor {name}: unknown rotation {rot!r} (known: "
                              f"{', '.join(ROTATIONS)})")
        if rot == "hadamard" and g & (g - 1):
            raise _fail(path, f"tensor {name}: the Hadamard rotation needs a power-of-two "
                              f"group size, got {g}")
        if e.get("kind") not in Q4_KINDS:
            raise _fail(path, f"tensor {name}: unknown 4-bit kind {e.get('kind')!r}")
        out[f"{name}.scales"] = ("F32", (rows, kpad // g))
        out[f"{name}.nibbles"] = ("U8", (rows, kpad // 2))
        out[f"{name}.codebook"] = ("I8", (16,))
        if rot == "hadamard":
            kpads.add(kpad)
    for k in sorted(kpads):
        out[f"rotation.signs.{k}"] = ("F32", (k,))
    extra = sorted(set(ents) - {n for n, _ in mats})
    if extra:
        raise _fail(path, f"quantization.q4.tensors names unknown tensors {extra[:3]}")
    return ents, out


# ---------------------------------------------------------------------------------------------
# writing


@dataclass
class ConvertSummary:
    path: str
    scheme: str
    group_size: int  # 0 for f32
    n_tensors: int
    n_bytes: int


def write_isaf(path: str | os.PathLike, loaded: LoadedModel, metadata: dict | None = None
               ) -> ConvertSummary:
    """Write `loaded` (all matrices Q8 with one group size, or all float32) as a .isaf file.
    `metadata` (default: the tokenizer/general keys of loaded.metadata) goes into the header."""
    c, w = loaded.config, loaded.weights
    mats = [(f"layers.{i}.{n}", getattr(w, n)[i]) for i in range(c.n_layers) for n in MATS]
    if isinstance(mats[0][1], Q4Tensor):
        return _write_q4(path, loaded, mats, metadata)
    q8 = isinstance(mats[0][1], Q8Tensor)
    gs = mats[0][1].group_size if q8 else 0
    wcls_stored = not (not q8 and c.shared_classifier and w.wcls is w.tok_embeddings)
    if wcls_stored:
        mats.append(("wcls", w.wcls))
    for name, m in mats:
        if isinstance(m, Q8Tensor) != q8 or (q8 and m.group_size != gs):
            raise ValueError(f"{name}: every matrix must be Q8 with group size {gs}" if q8
                             else f"{name}: every matrix must be float32")
    tok, tok_gs, f32, i8 = _table_entries(w)
    f32 += [("rms_att", w.rms_att), ("rms_ffn", w.rms_ffn), ("rms_final", w.rms_final)]
    for name, m in mats:
        if q8:
            f32.append((f"{name}.scales", m.s))
            i8.append((f"{name}.q", m.q))
        else:
            f32.append((name, m))
    expected = _expected(c, "q8" if q8 else "f32", gs, wcls_stored, tok, tok_gs)
    fields = {"quantization": {"scheme": "q8" if q8 else "f32", "group_size": gs},
              "layout": LAYOUT, "wcls": "wcls" if wcls_stored else "tok_embeddings",
              "tok_embeddings": tok, "tok_group_size": tok_gs}
    return _write_checked(path, loaded, f32, i8, expected, metadata, fields,
                          "q8" if q8 else "f32", gs)


def _table_entries(w: Weights) -> tuple[str, int, list, list]:
    """(kind, Q8 group size, float32 entries, int8 entries) of the token table: "wcls" when
    it is the quantized classifier's matrix (stored once, as the classifier), "q8" for a Q8
    table of its own, "f32" for a float32 one."""
    t = w.tok_embeddings
    if t is w.wcls and isinstance(t, (Q8Tensor, Q4Tensor)):
        return "wcls", 0, [], []
    if isinstance(t, Q8Tensor):
        return "q8", t.group_size, [("tok_embeddings.scales", t.s)], [("tok_embeddings.q", t.q)]
    if isinstance(t, Q4Tensor):
        raise ValueError("tok_embeddings: a 4-bit token table is stored only as the tied "
                         "classifier")
    return "f32", 0, [("tok_embeddings", t)], []


def _write_checked(path, loaded: LoadedModel, f32: list, rest: list, expected: dict,
                   metadata: dict | None, fields: dict, scheme: str, gs: int) -> ConvertSummary:
    """Write the entries f32, the layer description's and rest, each checked against
    `expected` (dtype, shape), under a header of the common keys and `fields`."""
    c = loaded.config
    layer_arrays, layer_info = _layer_arrays(loaded)
    expected.update(_layer_expected(c, layer_info["vectors"], layer_info["rope_freqs"]))
    arrays: list[tuple[str, np.ndarray]] = []
    for name, a in f32 + layer_arrays + rest:
        want_dtype, want_shape = expected[name]
        arr = np.ascontiguousarray(a, dtype=_DTYPES[want_dtype])
        if arr.shape != want_shape:
            raise ValueError(f"{name}: shape {arr.shape}, expected {want_shape}")
        arrays.append((name, _f16_if_exact(arr) if name.endswith(".scales") else arr))
    if metadata is None:
        metadata = {k: v for k, v in loaded.metadata.items() if k.startswith(KEEP_PREFIXES)}
    blobs = sorted(k for k, v in metadata.items()
                   if isinstance(v, (list, tuple)) and len(v) >= BLOB_MIN_ITEMS)
    for k in blobs:
        raw = json.dumps(metadata[k], separators=(",", ":"), default=_json_default).encode()
        arrays.append((f"metadata.{k}", np.frombuffer(zlib.compress(raw, 9), np.uint8)))
    info = {"format": "isaf", "version": VERSION, "config": asdict(c), **fields,
            "source": {"path": str(loaded.path), "format": loaded.format},
            "chat_template": metadata.get("tokenizer.chat_template"),
            "metadata": {k: v for k, v in metadata.items() if k not in blobs},
            "metadata_blobs": blobs, **layer_info}
    header: dict = {"__metadata__": {"isaforge": json.dumps(info, default=_json_default)}}
    return _write_entries(path, header, arrays, scheme, gs)


def _f16_if_exact(a: np.ndarray) -> np.ndarray:
    """A float32 scale array as float16 when that is lossless (every value finite and exactly
    a float16), else unchanged."""
    with np.errstate(over="ignore"):
        h = a.astype(np.float16)
    return h if np.isfinite(h).all() and np.array_equal(h, a) else a


def _write_entries(path, header: dict, arrays, scheme: str, gs: int) -> ConvertSummary:
    """Lay `arrays` out 64-aligned after the header, write the file atomically."""
    entries, off, pad = [], 0, 0
    for name, arr in arrays:
        if off % ALIGN:
            gap = ALIGN - off % ALIGN
            entries.append((f"__pad{pad}", np.zeros(gap, np.uint8)))
            pad += 1
            off += gap
        entries.append((name, arr))
        off += arr.nbytes
    off = 0
    for name, arr in entries:
        header[name] = {"dtype": _NAMES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + arr.nbytes]}
        off += arr.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % ALIGN)
    tmp = Path(f"{os.fspath(path)}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(raw)))
            f.write(raw)
            for _, arr in entries:
                f.write(memoryview(arr).cast("B"))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return ConvertSummary(os.fspath(path), scheme, gs, len(arrays), 8 + len(raw) + off)


def _write_q4(path, loaded: LoadedModel, mats, metadata) -> ConvertSummary:
    c, w = loaded.config, loaded.weights
    if not isinstance(w.wcls, (Q8Tensor, Q4Tensor)):
        raise ValueError("wcls: a 4-bit .isaf holds the classifier as Q8 or 4-bit")
    cls4 = isinstance(w.wcls, Q4Tensor)
    if cls4:
        mats = mats + [("wcls", w.wcls)]
    seeds = {m.seed for _, m in mats if isinstance(m, Q4Tensor) and m.signs is not None}
    if len(seeds) > 1:
        raise ValueError(f"rotated matrices with different seeds {sorted(seeds)}")
    ents, signs = {}, {}
    tok, tok_gs, f32, rest = _table_entries(w)
    f32 += [("rms_att", w.rms_att), ("rms_ffn", w.rms_ffn), ("rms_final", w.rms_final)]
    if not cls4:
        f32.append(("wcls.scales", w.wcls.s))
        rest.append(("wcls.q", w.wcls.q))
    for name, m in mats:
        if not isinstance(m, Q4Tensor):
            raise ValueError(f"{name}: every layer matrix must be 4-bit")
        if m.kpad != padded_length(m.cols, m.group_size):
            raise ValueError(f"{name}: padded length {m.kpad} is not {m.cols} rounded up to "
                             f"{m.group_size}")
        ents[name] = {"group_size": m.group_size, "kpad": m.kpad,
                      "rotation": "none" if m.signs is None else "hadamard", "kind": m.kind}
        if m.signs is not None:
            prev = signs.setdefault(m.kpad, m.signs)
            if not np.array_equal(prev, m.signs):
                raise ValueError(f"{name}: another rotation for rows of {m.kpad}")
        f32.append((f"{name}.scales", m.s))
        rest += [(f"{name}.nibbles", m.nibbles), (f"{name}.codebook", m.codebook)]
    f32 += [(f"rotation.signs.{k}", v) for k, v in sorted(signs.items())]
    q4 = {"codebook_size": 16, "seed": seeds.pop() if seeds else None, "tensors": ents}
    expected = {**_expected(c, "q4", w.wcls.group_size, not cls4, tok, tok_gs),
                **_q4_entries(path, c, q4)[1]}
    fields = {"quantization": {"scheme": "q4", "group_size": w.wcls.group_size, "q4": q4},
              "layout": LAYOUT_Q4, "wcls": "wcls", "tok_embeddings": tok,
              "tok_group_size": tok_gs}
    return _write_checked(path, loaded, f32, rest, expected, metadata, fields, "q4",
                          w.wcls.group_size)


# ---------------------------------------------------------------------------------------------
# reading


# Config fields of the layer description (types.Config after sliding_window/n_sinks)
_LAYER_FIELDS = ("head_dim", "act", "rope_neox", "swa_pattern", "rope_theta_swa", "embed_scale",
                 "attn_scale", "logit_softcap")


def _config_from(path, d) -> Config:
    if not isinstance(d, dict):
        raise _fail(path, "metadata 'config' is missing or not an object")
    kw = {}
    for f in fields(Config):
        if f.name not in d:
            if f.name in _LAYER_FIELDS:  # absent in files without a layer description: Llama's
                continue
            raise _fail(path, f"metadata config lacks {f.name!r}")
        v = d[f.name]
        if f.name == "shared_classifier":
            ok = isinstance(v, bool)
        elif isinstance(f.default, float):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
                and (v > 0 if f.name in ("rope_theta", "norm_eps") else v >= 0)
        else:
            ok = isinstance(v, int) and not isinstance(v, bool)
        if not ok:
            raise _fail(path, f"metadata config {f.name}={v!r} has the wrong type or value")
        kw[f.name] = v
    unknown = sorted(set(d) - set(kw))
    if unknown:
        raise _fail(path, f"metadata config has unknown keys {unknown}")
    return Config(**kw)


def _isaf_info(path, meta: dict) -> dict:
    """The isaforge metadata of a parsed safetensors header, after checking format/version."""
    if not isinstance(meta.get("isaforge"), str):
        raise _fail(path, "not an isaforge .isaf file (no __metadata__['isaforge'])")
    try:
        info = json.loads(meta["isaforge"])
    except ValueError as e:
        raise _fail(path, f"__metadata__['isaforge'] is not valid JSON: {e}") from None
    if not isinstance(info, dict) or info.get("format") != "isaf":
        raise _fail(path, "__metadata__['isaforge'] is not isaf metadata")
    if info.get("version") not in VERSIONS:
        raise _fail(path, f"unsupported .isaf version {info.get('version')!r} "
                          f"(this isaforge reads versions {', '.join(map(str, VERSIONS))}); "
                          "re-run isaforge convert")
    return info


def read_isaf(path: str | os.PathLike) -> LoadedModel:
    """Memory-map a .isaf file; every tensor is a numpy view of the map (no copy). Raises
    ModelFormatError naming the file and the reason for anything malformed."""
    from .llama2c import _check_config

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
    try:
        header, meta = parse_safetensors_header(path, b"" if mm is None else mm, MAX_HEADER)
        info = _isaf_info(path, meta)
        c = _config_from(path, info.get("config"))
        q = info.get("quantization")
        if not isinstance(q, dict) or q.get("scheme") not in SCHEMES:
            raise _fail(path, f"unknown quantization {q!r}; supported schemes: {SCHEMES}")
        scheme, gs = q["scheme"], q.get("group_size")
        if scheme in ("q8", "q4") and (not isinstance(gs, int) or isinstance(gs, bool)
                                       or gs < 1):
            raise _fail(path, f"Q8 group size {gs!r} must be a positive integer")
        _check_config(path, c, gs if scheme == "q8" else None)
        cls4 = scheme == "q4" and isinstance(q.get("q4"), dict) and \
            isinstance(q["q4"].get("tensors"), dict) and "wcls" in q["q4"]["tensors"]
        if scheme == "q4" and not cls4 and c.dim % gs:
            raise _fail(path, f"classifier Q8 group size {gs} does not divide dim={c.dim}")
        layout = LAYOUT_Q4 if scheme == "q4" else LAYOUT
        if info.get("layout") != layout:
            raise _fail(path, f"unknown packed layout {info.get('layout')!r} "
                              f"(this isaforge reads {layout} for scheme {scheme})")
        if info.get("wcls") not in ("wcls", "tok_embeddings") or (
                info["wcls"] == "tok_embeddings" and (scheme != "f32" or not c.shared_classifier)):
            raise _fail(path, f"bad classifier entry wcls={info.get('wcls')!r}")
        metadata = info.get("metadata")
        if not isinstance(metadata, dict):
            raise _fail(path, "metadata 'metadata' is missing or not an object")
        blobs = info.get("metadata_blobs", [])
        if not isinstance(blobs, list) or not all(isinstance(k, str) for k in blobs) or \
                len(set(blobs)) != len(blobs) or any(k in metadata for k in blobs):
            raise _fail(path, f"bad metadata_blobs {blobs!r} (distinct key names, not also in "
                              "metadata)")
        tok, tok_gs = _table_kind(path, info, c, scheme)
        expected = _expected(c, scheme, gs if scheme != "f32" else 0,
                             info["wcls"] == "wcls" and not cls4, tok, tok_gs)
        vectors, rope_freqs = info.get("vectors", []), info.get("rope_freqs", False)
        if not isinstance(vectors, list) or not all(v in LAYER_VECTORS for v in vectors) or \
                len(set(vectors)) != len(vectors) or type(rope_freqs) is not bool:
            raise _fail(path, f"bad layer description vectors={vectors!r} rope_freqs="
                              f"{rope_freqs!r} (vectors: names from {', '.join(LAYER_VECTORS)})")
        expected.update(_layer_expected(c, vectors, rope_freqs))
        q4ents = None
        if scheme == "q4":
            q4ents, more = _q4_entries(path, c, q.get("q4"))
            expected.update(more)
        for k in blobs:  # any length: checked when inflated
            e = header.get(f"metadata.{k}")
            expected[f"metadata.{k}"] = ("U8", e.shape if e is not None and len(e.shape) == 1
                                         else (0,))
        found = _check_tensors(path, header, expected)
        metadata = dict(metadata)
        for k in blobs:
            metadata[k] = _inflate(path, f"metadata.{k}", mm, found[f"metadata.{k}"])
    except BaseException:
        if mm is not None:
            mm.close()
        raise
    t = {name: np.frombuffer(mm, _DTYPES[e.dtype], math.prod(e.shape), e.offset).reshape(e.shape)
         for name, e in found.items()}
    for name, e in found.items():
        if e.dtype == "F16":  # scales: the kernels read float32 (a small copy, read-only)
            t[name] = t[name].astype(np.float32)
            t[name].flags.writeable = False

    if q4ents is not None:
        try:
            _check_q4_values(path, t, q4ents)
        except BaseException:
            t.clear()
            try:
                mm.close()
            except BufferError:
                pass  # a view is still referenced (the traceback); the collector unmaps it
            raise

    def matrix(name: str):
        if q4ents is not None and name in q4ents:
            e = q4ents[name]
            rot = e["rotation"] == "hadamard"
            return Q4Tensor(t[f"{name}.nibbles"], t[f"{name}.scales"], t[f"{name}.codebook"],
                            e["group_size"], _mat_cols(c, name),
                            t[f"rotation.signs.{e['kpad']}"] if rot else None,
                            e["kind"], q["q4"].get("seed") if rot else None)
        if scheme in ("q8", "q4"):
            return Q8Tensor(t[f"{name}.q"], t[f"{name}.scales"], gs)
        return t[name]

    wcls = matrix("wcls") if info["wcls"] == "wcls" else t["tok_embeddings"]
    table = wcls if tok == "wcls" else t["tok_embeddings"] if tok == "f32" else \
        Q8Tensor(t["tok_embeddings.q"], t["tok_embeddings.scales"], tok_gs)
    w = Weights(tok_embeddings=table, rms_att=t["rms_att"], rms_ffn=t["rms_ffn"],
                rms_final=t["rms_final"],
                **{n: [matrix(f"layers.{i}.{n}") for i in range(c.n_layers)] for n in MATS},
                wcls=wcls,
                vectors={n: list(t[f"vectors.{n}"]) for n in vectors},
                rope_freqs=t["rope_freqs"] if rope_freqs else None)
    return LoadedModel(c, w, str(path), "isaf", keepalive=[mm], metadata=metadata)


def _inflate(path, name: str, mm, e: SafeTensor) -> list:
    """The list a metadata blob tensor holds (zlib of its JSON), inflating at most MAX_BLOB
    bytes; ModelFormatError naming the tensor otherwise."""
    raw = bytes(memoryview(mm)[e.offset:e.offset + e.nbytes]) if mm is not None else b""
    d = zlib.decompressobj()
    try:
        out = d.decompress(raw, MAX_BLOB)
    except zlib.error as err:
        raise _fail(path, f"tensor {name}: not a zlib stream ({err})") from None
    if d.unconsumed_tail:
        raise _fail(path, f"tensor {name}: inflates to more than {MAX_BLOB} bytes")
    if not d.eof:
        raise _fail(path, f"tensor {name}: truncated zlib stream")
    try:
        value = json.loads(out)
    except ValueError as err:
        raise _fail(path, f"tensor {name}: not JSON once inflated ({err})") from None
    if not isinstance(value, list):
        raise _fail(path, f"tensor {name}: holds {type(value).__name__}, expected a list")
    return value


def _table_kind(path, info: dict, c: Config, scheme: str) -> tuple[str, int]:
    """(kind, Q8 group size) of the token table a header describes (version 1: "f32")."""
    if info["version"] == 1:
        return "f32", 0
    tok, tgs = info.get("tok_embeddings"), info.get("tok_group_size")
    if tok not in TOK_KINDS:
        raise _fail(path, f"tensor tok_embeddings: unknown table kind {tok!r} (known: "
                          f"{', '.join(TOK_KINDS)})")
    if tok == "wcls" and (scheme == "f32" or info["wcls"] != "wcls" or
                          not c.shared_classifier):
        raise _fail(path, "tensor tok_embeddings: the table is the classifier's matrix only "
                          "for a quantized model with a tied, stored classifier")
    if tok == "q8" and (not isinstance(tgs, int) or isinstance(tgs, bool) or tgs < 1 or
                        c.dim % tgs):
        raise _fail(path, f"tensor tok_embeddings: Q8 group size {tgs!r} must be a positive "
                          f"integer dividing dim={c.dim}")
    return tok, tgs if tok == "q8" else 0


def _mat_cols(c: Config, name: str) -> int:
    if name == "wcls":
        return c.dim
    return _mat_shapes(c)[name.rsplit(".", 1)[1]][1]


def _check_q4_values(path, t: dict, ents: dict) -> None:
    """What the shapes cannot say: codebook values in [-127, 127] (the kernels' range), the
    rotation signs all +1 or -1. ModelFormatError naming the tensor."""
    for name in ents:
        cb = t[f"{name}.codebook"]
        if (cb == -128).any():
            raise _fail(path, f"tensor {name}.codebook holds -128 (the 4-bit kernels take "
                              "codebook values in [-127, 127])")
    for name, a in t.items():
        if name.startswith("rotation.signs.") and not (np.abs(a) == 1).all():
            raise _fail(path, f"tensor {name}: rotation signs must all be +1 or -1")


def _check_tensors(path, header: dict[str, SafeTensor], expected: dict
                   ) -> dict[str, SafeTensor]:
    """The expected tensors of a header parse_safetensors_header has checked (dtypes, sizes,
    extents, overlaps), after the .isaf checks: every entry of a dtype isaforge maps, no
    unexpected names, each expected tensor with its dtype and shape, aligned, none missing.
    A `*.scales` tensor may be F16 instead of F32 (widened at load)."""
    for name, e in header.items():
        scales = name.endswith(".scales")
        if e.dtype not in _DTYPES or (e.dtype == "F16" and not scales):
            raise _fail(path, f"tensor {name!r}: unsupported dtype {e.dtype!r}"
                        + (" (F16 is for scales only)" if e.dtype == "F16" else ""))
        if name.startswith("__pad"):
            continue
        if name not in expected:
            raise _fail(path, f"unexpected tensor {name!r}")
        want = expected[name]
        ok = (want[0], "F16") if scales and want[0] == "F32" else (want[0],)
        if e.dtype not in ok or e.shape != want[1]:
            raise _fail(path, f"tensor {name!r} is {e.dtype} {list(e.shape)}, expected {want[0]} "
                              f"{list(want[1])}" + (" (scales: F32 or F16)" if len(ok) > 1 else ""))
        if e.offset % _DTYPES[e.dtype].itemsize:
            raise _fail(path, f"tensor {name!r} at byte {e.offset} is not "
                              f"{_DTYPES[e.dtype].itemsize}-byte aligned")
    missing = [n for n in expected if n not in header]
    if missing:
        raise _fail(path, f"missing tensors: {', '.join(missing[:5])}"
                          + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    return {n: header[n] for n in expected}


# ---------------------------------------------------------------------------------------------
# convert


def requantize(loaded: LoadedModel, scheme: str, group_size: int | None,
                log: Callable[[str], None]) -> tuple[LoadedModel, int]:
    """All matrices as Q8 with one group size (or float32). Q8 tensors already at the target
    group size are kept as they are; fp32 models are quantized like `isaforge quantize`.
    The token table follows (formats.quantized_table): a quantized model's tied classifier is
    its table (one copy), an untied one's is Q8; float32 models keep a float32 table."""
    from dataclasses import replace

    from ..quant.q8 import as_q8, pick_group_size
    from .tables import quantized_table

    c, w = loaded.config, loaded.weights
    if scheme not in ("q8", "f32"):  # a 4-bit spec (quant.cq4.parse_quant)
        from ..quant.cq4 import parse_quant, to_4bit
        if group_size is not None:
            raise ValueError("--group-size only applies to --quant q8 (CQ4: cq4-32/64/128)")
        spec = parse_quant(scheme)
        done = all(isinstance(m, Q4Tensor) for n in MATS for m in getattr(w, n))
        new = loaded if done and isinstance(w.wcls, Q8Tensor) else to_4bit(loaded, spec, log=log)
        return quantized_table(new), new.weights.wcls.group_size
    if scheme == "f32":
        def conv(m):
            return m.dequantize() if isinstance(m, (Q8Tensor, Q4Tensor)) else m
        tok = conv(w.tok_embeddings)
        wcls = tok if c.shared_classifier and (w.wcls is w.tok_embeddings or not isinstance(
            w.wcls, Q8Tensor)) else conv(w.wcls)
        new = replace(w, tok_embeddings=tok, wcls=wcls,
                      **{n: [conv(m) for m in getattr(w, n)] for n in MATS})
        return replace(loaded, weights=new), 0
    have = w.wq[0].group_size if isinstance(w.wq[0], Q8Tensor) else None
    if group_size is not None:
        gs = pick_group_size(c, group_size)
    else:
        gs = have or pick_group_size(c, None)
    if have and have != gs:
        log(f"requantizing Q8 group size {have} to {gs} (the result differs from the source)")
    tok, wcls = w.tok_embeddings, as_q8(w.wcls, gs)
    tok = wcls if c.shared_classifier else as_q8(
        tok.dequantize() if isinstance(tok, Q4Tensor) else tok, gs)
    new = replace(w, tok_embeddings=tok, wcls=wcls,
                  **{n: [as_q8(m, gs) for m in getattr(w, n)] for n in MATS})
    return replace(loaded, weights=new), gs
