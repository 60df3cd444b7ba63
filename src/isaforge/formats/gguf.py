"""GGUF reader for llama, gemma3, qwen2 and qwen3 models.

GGUF (v2/v3, little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, the
key/values (string key, u32 value type, value), the tensor infos (string name, u32 n_dims,
u64 dims[n_dims] innermost first, u32 ggml type, u64 offset from the data section), padding to
general.alignment (default 32), then the tensor data. A tensor with dims [ne0, ne1] is the
row-major numpy matrix (ne1, ne0): one output per row, as isaforge wants.

The header is parsed here with struct rather than by gguf.GGUFReader: every count and size is
checked against the bytes left before anything is read or allocated (GGUFReader loops over
an array count taken from the file, so a hostile count of 2**60 numbers never ends), and the
53k-element tokenizer arrays come out with one numpy call instead of one per element. The
gguf package supplies the type tables for tensor types this module does not decode.

llama.cpp's converter already permutes llama q/k weights into the interleaved-pair RoPE layout
that isaforge and llama2.c use, so no permutation happens here; gemma3 and qwen files keep
HF's rotate-half layout and run with NEOX RoPE. Gemma's norm weights are stored with the
+1 of its RMSNorm already added by the converter (checked on Gemma 3 270M: the weights are
about 1 to 40, not around 0), so they are used as they are.

Architectures differ only in the layer description (Config's fields and Weights.vectors):
ARCHITECTURES lists, per architecture, the extra tensors each layer must have.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .. import _native, settings
from ..quant.cq4 import GGMLMatrix, parse_quant, to_4bit
from ..quant.ggml import (
    GGML_TYPES,
    KQ_NATIVE,
    Q4_NATIVE,
    SUPPORTED_NAMES,
    dequantize,
    kq_split,
    q4_split,
)
from ..quant.mapped import GROUP, MappedQ8
from ..quant.q8 import read_group_size
from ..types import Config, LoadedModel, ModelFormatError, Q8Tensor, Weights

MAGIC = b"GGUF"
# architecture -> the layer's extra tensors, Weights.vectors name -> GGUF name in blk.N (each
# required)
ARCHITECTURES = {
    "llama": {},
    "gemma3": {"q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
               "rms_post_att": "post_attention_norm.weight",
               "rms_post_ffn": "post_ffw_norm.weight"},
    "qwen2": {"bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias"},
    "qwen3": {"q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight"},
}
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)
GEMMA3_SWA_PATTERN, GEMMA3_LOCAL_ROPE_BASE = 6, 10000.0  # llama.cpp's (not in the file)
QUANT_MODES = ("q8", "auto", "f32", "cq4", "q4_0")  # cq4 takes suffixes (quant.cq4.parse_quant)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_NESTING = 4

# GGUF scalar value types: id -> (struct format, numpy dtype); 8 = string, 9 = array.
_SCALARS = {0: ("<B", "u1"), 1: ("<b", "i1"), 2: ("<H", "<u2"), 3: ("<h", "<i2"),
            4: ("<I", "<u4"), 5: ("<i", "<i4"), 6: ("<f", "<f4"), 7: ("<?", "?"),
            10: ("<Q", "<u8"), 11: ("<q", "<i8"), 12: ("<d", "<f8")}
_STRING, _ARRAY = 8, 9
_MIN_SIZE = {**{k: struct.calcsize(v[0]) for k, v in _SCALARS.items()}, _STRING: 8, _ARRAY: 12}

_LAYER_TENSORS = {  # isaforge name -> GGUF name inside blk.N
    "rms_att": "attn_norm", "wq": "attn_q", "wk": "attn_k", "wv": "attn_v",
    "wo": "attn_output", "rms_ffn": "ffn_norm", "w1": "ffn_gate", "w2": "ffn_down",
    "w3": "ffn_up",
}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # numpy order (outermost first)
    type_id: int
    type_name: str
    offset: int  # absolute file offset
    nbytes: int


@dataclass
class GGUFFile:
    """A validated GGUF header; tensor data not touched yet."""

    path: str
    version: int
    metadata: dict
    tensors: dict[str, TensorInfo]
    alignment: int
    data_start: int
    size: int


def _ggml_type_sizes(type_id: int) -> tuple[str, int, int] | None:
    """(name, block, bytes) of any ggml type the gguf package knows, else None."""
    t = GGML_TYPES.get(type_id)
    if t is not None:
        return t.name, t.block, t.nbytes
    try:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        qt = GGMLQuantizationType(type_id)
        block, nbytes = GGML_QUANT_SIZES[qt]
        return qt.name, block, nbytes
    except (ImportError, ValueError, KeyError):
        return None


class _Cursor:
    """Bounds-checked little-endian reads over the mapped file."""

    def __init__(self, buf, path: str):
        self.buf, self.path, self.pos, self.size = buf, path, 0, len(buf)

    def fail(self, reason: str) -> ModelFormatError:
        return ModelFormatError(f"{self.path}: {reason}")

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise self.fail(f"file is truncated: {what} at offset {self.pos} needs {n} bytes, "
                            f"{self.size - self.pos} left (file size {self.size})")

    def unpack(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self.need(n, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v[0] if len(v) == 1 else v

    def string(self, what: str) -> str:
        n = self.unpack("<Q", what)
        self.need(n, what)
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def value(self, vtype: int, what: str, depth: int = 0):
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype][0], what)
        if vtype == _STRING:
            return self.string(what)
        if vtype != _ARRAY:
            raise self.fail(f"{what} has unknown value type {vtype}")
        if depth >= MAX_NESTING:
            raise self.fail(f"{what}: arrays nested deeper than {MAX_NESTING}")
        etype, count = self.unpack("<IQ", what)
        if etype not in _MIN_SIZE:
            raise self.fail(f"{what} is an array of unknown value type {etype}")
        # Every element takes at least _MIN_SIZE bytes: an absurd count fails here, at once.
        self.need(count * _MIN_SIZE[etype], f"{what} (array of {count})")
        if etype in _SCALARS:
            a = np.frombuffer(self.buf, np.dtype(_SCALARS[etype][1]), count, self.pos)
            self.pos += a.nbytes
            return a.tolist()
        if etype == _STRING:
            return self.strings(count, what)
        return [self.value(etype, f"{what}[{i}]", depth + 1) for i in range(count)]

    def strings(self, count: int, what: str) -> list[str]:
        """`count` strings in a row (a 262k-token vocabulary in a fraction of a second); the
        same checks and messages as string() for each."""
        buf, pos, size, out, length = self.buf, self.pos, self.size, [], struct.Struct("<Q")
        for i in range(count):
            n = length.unpack_from(buf, pos)[0] if size - pos >= 8 else size
            try:
                if n > size - pos - 8:
                    raise ValueError
                out.append(buf[pos + 8:pos + 8 + n].decode("utf-8"))
            except ValueError:  # truncated, or not UTF-8 (UnicodeDecodeError)
                self.pos = pos
                self.string(f"{what}[{i}]")  # raises the error string() gives
                raise
            pos += 8 + n
        self.pos = pos
        return out


def parse_gguf(path: str | os.PathLike, buf) -> GGUFFile:
    """Validate a GGUF header in `buf` (the whole file) and return it; ModelFormatError if not.

    Checks magic, version, every count and string length against the bytes left, value and
    tensor types, alignment, and that each tensor's data is aligned and inside the file."""
    path = os.fspath(path)
    cur = _Cursor(buf, path)
    cur.need(24, "GGUF header")
    if bytes(buf[:4]) != MAGIC:
        raise cur.fail(f"not a GGUF file (magic {bytes(buf[:4])!r}, expected {MAGIC!r})")
    cur.pos = 4
    version = cur.unpack("<I", "version")
    if version & 0xFFFF == 0 and version:
        raise cur.fail("big-endian GGUF files are not supported")
    if version not in (2, 3):
        raise cur.fail(f"unsupported GGUF version {version} (supported: 2, 3)")
    n_tensors, n_kv = cur.unpack("<QQ", "tensor and key/value counts")
    cur.need(n_kv * 13, f"{n_kv} key/values")
    metadata: dict = {}
    for i in range(n_kv):
        key = cur.string(f"key #{i}")
        vtype = cur.unpack("<I", f"type of {key}")
        if key in metadata:
            raise cur.fail(f"duplicate key {key!r}")
        metadata[key] = cur.value(vtype, f"value of {key}")
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
        raise cur.fail(f"general.alignment must be a power of two, got {alignment!r}")
    cur.need(n_tensors * 32, f"{n_tensors} tensor infos")
    infos = []
    for i in range(n_tensors):
        name = cur.string(f"name of tensor #{i}")
        n_dims = cur.unpack("<I", f"dims of tensor {name}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.fail(f"tensor {name} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
        dims = cur.unpack(f"<{n_dims}Q", f"dims of tensor {name}")
        dims = dims if isinstance(dims, tuple) else (dims,)
        type_id, offset = cur.unpack("<IQ", f"type and offset of tensor {name}")
        infos.append((name, dims, type_id, offset))
    data_start = -(-cur.pos // alignment) * alignment
    tensors: dict[str, TensorInfo] = {}
    for name, dims, type_id, offset in infos:
        if name in tensors:
            raise cur.fail(f"duplicate tensor {name!r}")
        sizes = _ggml_type_sizes(type_id)
        if sizes is None:
            raise cur.fail(f"tensor {name} has unknown type {type_id} "
                           f"(supported: {', '.join(SUPPORTED_NAMES)})")
        tname, block, tsize = sizes
        if any(d == 0 for d in dims) or math.prod(dims) > 1 << 48:
            raise cur.fail(f"tensor {name} has invalid dimensions {list(dims)}")
        if dims[0] % block:
            raise cur.fail(f"tensor {name}: row length {dims[0]} is not a multiple of the "
                           f"{tname} block size {block}")
        nbytes = math.prod(dims) // block * tsize
        if offset % alignment:
            raise cur.fail(f"tensor {name} data offset {offset} is not a multiple of the "
                           f"alignment {alignment}")
        start = data_start + offset
        if start + nbytes > cur.size:
            raise cur.fail(f"tensor {name} data [{start}, {start + nbytes}) lies beyond the "
                           f"end of the file (size {cur.size}; truncated?)")
        tensors[name] = TensorInfo(name, tuple(reversed(dims)), type_id, tname, start, nbytes)
    spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in tensors.values())
    for (_a0, a1, an), (b0, _b1, bn) in zip(spans, spans[1:], strict=False):
        if b0 < a1:
            raise cur.fail(f"tensors {an} and {bn} overlap in the file")
    return GGUFFile(path, version, metadata, tensors, alignment, data_start, cur.size)


def _open(path: str | os.PathLike) -> tuple[GGUFFile, mmap.mmap]:
    p = os.fspath(path)
    with open(p, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise ModelFormatError(f"{p}: file is truncated: {size} bytes, a GGUF header "
                                   "needs at least 24")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return parse_gguf(p, mm), mm
    except ModelFormatError:
        mm.close()
        raise
    except (ValueError, IndexError, struct.error, OverflowError, MemoryError, TypeError) as e:
        mm.close()
        raise ModelFormatError(f"{p}: malformed GGUF: {e}") from None


# ---- config ----

def _get(g: GGUFFile, key: str, kind: type, default=None):
    if key not in g.metadata:
        if default is None:
            raise ModelFormatError(f"{g.path}: missing required key {key}")
        return default
    v = g.metadata[key]
    ok = isinstance(v, kind) and not isinstance(v, bool) if kind is int else (
        isinstance(v, (int, float)) and not isinstance(v, bool) if kind is float else
        isinstance(v, kind))
    if not ok or (kind in (int, float) and not (math.isfinite(v) and v > 0)):
        raise ModelFormatError(f"{g.path}: key {key} must be a positive {kind.__name__}, "
                               f"got {v!r}")
    return v


def gguf_config(g: GGUFFile) -> Config:
    """The llama Config from a GGUF header's keys, checked against each other."""
    md, path = g.metadata, g.path
    arch = md.get("general.architecture")
    if arch is None:
        raise ModelFormatError(f"{path}: missing required key general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelFormatError(f"{path}: architecture {arch!r} is not supported "
                               f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    k = f"{arch}."
    dim = _get(g, k + "embedding_length", int)
    heads = _get(g, k + "attention.head_count", int)
    kv_heads = _get(g, k + "attention.head_count_kv", int, heads)
    toks = md.get("tokenizer.ggml.tokens")
    if not isinstance(md.get("tokenizer.ggml.model"), str) or not isinstance(toks, list) or \
            not toks or not all(isinstance(t, str) for t in toks):
        raise ModelFormatError(f"{path}: missing tokenizer metadata (tokenizer.ggml.model and "
                               "tokenizer.ggml.tokens are required)")
    vocab = _get(g, k + "vocab_size", int, len(toks))
    if vocab != len(toks):
        raise ModelFormatError(f"{path}: {k}vocab_size is {vocab} but tokenizer.ggml.tokens "
                               f"has {len(toks)} entries")
    head_dim = _get(g, k + "attention.key_length", int, 0)
    if heads % kv_heads or (head_dim == 0 and dim % heads) or (head_dim or dim // heads) % 2:
        raise ModelFormatError(
            f"{path}: inconsistent heads: embedding_length {dim}, head_count {heads}, "
            f"head_count_kv {kv_heads}" + (f", attention.key_length {head_dim}" if head_dim
                                           else " (head_count must divide embedding_length)"))
    layer = _layer_description(g, arch, dim, heads, head_dim or dim // heads)
    c = Config(
        dim=dim, hidden_dim=_get(g, k + "feed_forward_length", int),
        n_layers=_get(g, k + "block_count", int), n_heads=heads, n_kv_heads=kv_heads,
        vocab_size=vocab, seq_len=_get(g, k + "context_length", int),
        shared_classifier="output.weight" not in g.tensors,
        rope_theta=float(_get(g, k + "rope.freq_base", float, 10000.0)),
        norm_eps=float(_get(g, k + "attention.layer_norm_rms_epsilon", float)),
        head_dim=head_dim if head_dim and head_dim != dim // heads else 0, **layer,
    )
    if c.swa_pattern and c.n_layers == 62:  # Gemma 3 27B scales by dim / heads (llama.cpp)
        c = dataclasses.replace(c, attn_scale=1.0 / math.sqrt(dim // heads))
    for key in ("rope.dimension_count", "attention.value_length"):
        v = md.get(k + key)
        if v is not None and v != c.head_size:
            raise ModelFormatError(f"{path}: {k}{key} is {v}, isaforge needs the head size "
                                   f"{c.head_size} (partial RoPE / odd head sizes unsupported)")
    scaling = md.get(k + "rope.scaling.type", "none")
    factor = md.get(k + "rope.scaling.factor", 1.0)
    freqs = "rope_freqs.weight" in g.tensors
    if scaling != "none" or factor not in (0, 0.0, 1, 1.0) or (freqs and arch != "llama"):
        what = f"type {scaling!r}, factor {factor}" if not freqs \
            else f"per-frequency factors (rope_freqs) in a {arch} file"
        raise ModelFormatError(f"{path}: RoPE scaling ({what}) is not supported (supported: "
                               "none; llama's rope_freqs, Llama 3 scaling)")
    if md.get(k + "expert_count", 0):
        raise ModelFormatError(f"{path}: mixture-of-experts models are not supported")
    return c


def _layer_description(g: GGUFFile, arch: str, dim: int, heads: int, head_size: int) -> dict:
    """The Config fields that make `arch`'s layer (none for llama)."""
    k = f"{arch}."
    if arch in ("qwen2", "qwen3"):
        return {"rope_neox": 1}
    if arch != "gemma3":
        return {}
    window = _get(g, k + "attention.sliding_window", int)
    return {"rope_neox": 1, "act": 1, "embed_scale": float(np.sqrt(np.float32(dim))),
            "sliding_window": window, "swa_pattern": GEMMA3_SWA_PATTERN,
            "rope_theta_swa": GEMMA3_LOCAL_ROPE_BASE,
            "attn_scale": 1.0 / math.sqrt(head_size),
            "logit_softcap": float(_get(g, k + "final_logit_softcapping", float, 0.0)
                                   if k + "final_logit_softcapping" in g.metadata else 0.0)}


# ---- tensors ----

def _needs(arch: str) -> list[str]:
    return [n + ".weight" for n in _LAYER_TENSORS.values()] + list(ARCHITECTURES[arch].values())


def _tensor_names(c: Config, arch: str) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    """(isaforge field, GGUF tensor name, expected numpy shape), lazily (block_count comes
    from the file: a hostile 2**32 must fail at the first missing tensor, not build a list)."""
    d, h, kv, qd, hs = c.dim, c.hidden_dim, c.kv_dim, c.q_dim, c.head_size
    shapes = {"rms_att": (d,), "wq": (qd, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, qd),
              "rms_ffn": (d,), "w1": (h, d), "w2": (d, h), "w3": (h, d),
              "rms_post_att": (d,), "rms_post_ffn": (d,), "q_norm": (hs,), "k_norm": (hs,),
              "bq": (qd,), "bk": (kv,), "bv": (kv,)}
    extra = ARCHITECTURES[arch]
    yield "tok_embeddings", "token_embd.weight", (c.vocab_size, d)
    yield "rms_final", "output_norm.weight", (d,)
    if not c.shared_classifier:
        yield "wcls", "output.weight", (c.vocab_size, d)
    for i in range(c.n_layers):
        for f, n in _LAYER_TENSORS.items():
            yield f, f"blk.{i}.{n}.weight", shapes[f]
        for f, n in extra.items():
            yield f, f"blk.{i}.{n}", shapes[f]


def _check_tensors(g: GGUFFile, c: Config, arch: str) -> None:
    names = _tensor_names(c, arch)
    if "rope_freqs.weight" in g.tensors:
        names = itertools.chain(names, [("rope_freqs", "rope_freqs.weight", (c.head_size // 2,))])
    for _field, name, shape in names:
        t = g.tensors.get(name)
        if t is None:
            raise ModelFormatError(f"{g.path}: missing tensor {name} (a {arch} layer needs "
                                   f"{', '.join(_needs(arch))})")
        if t.shape != shape:
            raise ModelFormatError(f"{g.path}: tensor {name} has shape {list(t.shape)}, "
                                   f"expected {list(shape)} for this config")
        if t.type_id not in GGML_TYPES:
            raise ModelFormatError(f"{g.path}: tensor {name} has type {t.type_name}, not "
                                   f"supported (supported: {', '.join(SUPPORTED_NAMES)})")


def _raw(mm, t: TensorInfo) -> np.ndarray:
    return np.frombuffer(mm, np.uint8, t.nbytes, t.offset)


def _float32(mm, t: TensorInfo) -> np.ndarray:
    """float32 values of t (a zero-copy view of the file for F32 tensors)."""
    rows, cols = (1, t.shape[0]) if len(t.shape) == 1 else t.shape
    a = dequantize(_raw(mm, t), GGML_TYPES[t.type_id], rows, cols)
    return a.reshape(t.shape)


def _matrix(mm, t: TensorInfo, quant: str, gs: int, threads: int = 1, mapped: bool = False,
            stream: bool = False):
    """t as the model runs it. mapped (a matrix the core multiplies by, not the token table):
    Q8 at group 32 is made by the core from the file's bytes when the model is made. stream
    (a 4-bit quant): a matrix to quantize goes to to_4bit as a GGMLMatrix over the file's
    blocks, its pages dropped once quantized, instead of as float32."""
    if quant == "auto":  # K-quant / legacy blocks in place: a view of the mapping, pages kept
        if t.type_name in KQ_NATIVE:
            return kq_split(_raw(mm, t), t.type_id, *t.shape)
        quant = "q8"  # every other type as q8
    if mapped and quant == "q8" and gs == GROUP and t.shape[1] % GROUP == 0:
        return MappedQ8(_raw(mm, t), t.type_id, t.shape, t.name)
    if quant not in ("q8", "f32"):  # 4-bit: Q4_0/IQ4_* as they are for cq4, else float32
        if t.type_name in Q4_NATIVE and parse_quant(quant).kind == "cq4":
            return q4_split(_raw(mm, t), t.type_id, *t.shape)
        if stream:
            return GGMLMatrix(t.type_id, _raw(mm, t), *t.shape,
                              release=functools.partial(_drop_pages, mm, t))
        return _float32(mm, t)
    if quant == "f32":
        return _float32(mm, t)
    return _q8(mm, t, gs, threads)


def _q8(mm, t: TensorInfo, gs: int, threads: int) -> Q8Tensor:
    """t as Q8 at group gs, converted by the C core from the mapped blocks a row at a time
    (never the matrix in float32) on `threads` threads, the same bits as
    as_q8(dequantize(...), gs); a Q8_0 tensor at group 32 is taken as stored unless a quant is
    -128 (the kernels need [-127, 127]). The tensor's pages then leave this process's
    resident set."""
    rows, cols = t.shape
    q = np.empty((rows, cols), np.int8)
    s = np.empty((rows, cols // gs), np.float32)
    try:
        _native.ggml_to_q8(t.type_id, _raw(mm, t), rows, cols, gs, q, s,
                           threads=threads, keep_q8_0=True)
    except ValueError as e:
        raise ValueError(f"tensor {t.name}: {e}") from None
    _drop_pages(mm, t)
    return Q8Tensor(q, s, gs)


def _drop_pages(mm, t: TensorInfo) -> None:
    """Drop the whole pages of t's bytes from the resident set: the map is read-only and
    file-backed, so a later read faults them back in from the file."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    start = -(-t.offset // page) * page
    end = (t.offset + t.nbytes) // page * page
    if end > start:
        try:
            mm.madvise(mmap.MADV_DONTNEED, start, end - start)
        except (OSError, ValueError):
            pass  # only a memory saving


def stored_types(path: str | os.PathLike) -> dict[str, str]:
    """The GGML type name of each isaforge matrix as the file stores it ("layers.N.wq", ...,
    "wcls", "tok_embeddings"; the header alone is read)."""
    g, mm = _open(path)
    try:
        t = g.tensors
        out = {f"layers.{i}.{f}": t[f"blk.{i}.{n}.weight"].type_name
               for i in range(gguf_config(g).n_layers) for f, n in _LAYER_TENSORS.items()
               if not f.startswith("rms") and f"blk.{i}.{n}.weight" in t}
        if "token_embd.weight" in t:
            out["tok_embeddings"] = t["token_embd.weight"].type_name
        out["wcls"] = t.get("output.weight", t.get("token_embd.weight")).type_name
        return out
    finally:
        mm.close()


def read_gguf(path: str | os.PathLike, quant: str = "q8", stream: bool = False,
              progress=None) -> LoadedModel:
    """Load a llama GGUF file. quant="q8": matrices as Q8 (Q8_0 tensors taken as they are,
    others dequantized and requantized at group 32, or the largest valid group below);
    quant="auto": Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS matrices (the
    token table too) as
    views of the file's blocks
    that the K-quant kernels run in place, the others as for "q8";
    quant="f32": every matrix dequantized to float32. A 4-bit quant quantizes the layer
    matrices from float32, or with stream=True (isaforge convert) one at a time from the
    file's blocks, calling progress(done, total) after each (quant.cq4.to_4bit). Raises
    ModelFormatError naming the file and the reason for anything malformed or unsupported."""
    spec = parse_quant(quant)  # ValueError naming the valid forms
    quant = str(spec)
    threads = settings.default_threads()  # the Q8 conversion's (ISAFORGE_THREADS, or cores)
    g, mm = _open(path)
    try:
        c = gguf_config(g)
        arch = g.metadata["general.architecture"]
        _check_tensors(g, c, arch)
        gs = read_group_size(c)
        t = g.tensors
        # the token table: float32 for quant f32, else quantized as the classifier (tied: the
        # classifier's own matrix, one copy; untied: Q8 at the model's group size)
        tok = np.ascontiguousarray(_float32(mm, t["token_embd.weight"])) if quant == "f32" \
            else None
        layers = {f: [] for f in _LAYER_TENSORS}
        for i in range(c.n_layers):
            for f, n in _LAYER_TENSORS.items():
                ti = t[f"blk.{i}.{n}.weight"]
                layers[f].append(_float32(mm, ti) if f.startswith("rms") else
                                 _matrix(mm, ti, quant, gs, threads, mapped=True,
                                         stream=stream))
        if c.shared_classifier:
            wcls = tok if quant == "f32" else _matrix(
                mm, t["token_embd.weight"], "q8" if spec.four_bit else quant, gs, threads,
                mapped=not stream)  # streamed: written out, so made once as Q8 here
            tok = wcls
        else:
            wcls = _matrix(mm, t["output.weight"], "q8" if spec.four_bit else quant, gs,
                           threads, mapped=not stream)
            if tok is None:
                tok = _matrix(mm, t["token_embd.weight"], "auto" if quant == "auto" else "q8",
                              gs, threads)
        vectors = {f: [_float32(mm, t[f"blk.{i}.{n}"]) for i in range(c.n_layers)]
                   for f, n in ARCHITECTURES[arch].items()}
        freqs = t.get("rope_freqs.weight")
        if freqs is not None:
            freqs = _float32(mm, freqs)
            if not (np.isfinite(freqs).all() and (freqs > 0).all()):
                raise ModelFormatError(f"{g.path}: rope_freqs.weight must be positive and "
                                       "finite")
        w = Weights(
            tok_embeddings=tok, rms_att=np.stack(layers.pop("rms_att")),
            rms_ffn=np.stack(layers.pop("rms_ffn")),
            rms_final=_float32(mm, t["output_norm.weight"]), wcls=wcls, vectors=vectors,
            rope_freqs=freqs, **layers)
    except (ValueError, IndexError, struct.error, OverflowError, TypeError) as e:
        try:
            mm.close()
        except BufferError:
            pass  # arrays still view it; the garbage collector unmaps it
        if isinstance(e, ModelFormatError):
            raise
        raise ModelFormatError(f"{g.path}: malformed GGUF: {e}") from None
    loaded = LoadedModel(c, w, g.path, "gguf", keepalive=[mm], metadata=dict(g.metadata))
    return to_4bit(loaded, spec, progress=progress) if spec.four_bit else loaded
