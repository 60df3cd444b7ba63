"""Model file readers and writers; `read_any`, which picks the reader for a path, and
`with_context`, the context a loaded model runs at."""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import struct
from pathlib import Path

import numpy as np

from ..quant.ggml import KQTensor
from ..quant.mapped import MappedQ8
from ..quant.q4 import Q4Tensor
from ..types import LAYER_MATRICES, LoadedModel, ModelFormatError, Q8Tensor, check_regular
from .gguf import read_gguf
from .hf import read_hf
from .llama2c import (
    detect_format as detect_llama2c,
)
from .llama2c import (
    read_llama2c,
    v2_tensor_specs,
    v2_tensors_of,
    write_llama2c_v1,
    write_llama2c_v2,
)
from .tables import quantized_table

DEFAULT_CTX = 4096  # default cap on the context (KV cache) of real models; --ctx to change

__all__ = [
    "detect_format",
    "read_any",
    "read_gguf",
    "read_hf",
    "read_llama2c",
    "with_context",
    "v2_tensor_specs",
    "v2_tensors_of",
    "write_llama2c_v1",
    "write_llama2c_v2",
]


def _safetensors_metadata(path: Path) -> dict | None:
    """The __metadata__ of a file that looks like safetensors, else None (not validated)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(9)
        if len(head) < 9 or head[8:9] != b"{":
            return None
        (n,) = struct.unpack_from("<Q", head)
        if n > size - 8 or n > 100 << 20:
            return None
        f.seek(8)
        try:
            h = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
    return (h.get("__metadata__") or {}) if isinstance(h, dict) else None


def detect_format(path: str | os.PathLike) -> str:
    """"gguf", "hf" (a folder with config.json), "isaf", or for llama2.c files the version
    ("llama2c-v0", "llama2c-v1", "llama2c-v2", after validating the header). Raises
    FileNotFoundError or ModelFormatError."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such model file or folder")
    if p.is_dir():
        if (p / "config.json").is_file():
            return "hf"
        raise ModelFormatError(f"{p}: is a directory without config.json "
                               "(not a Hugging Face model folder)")
    check_regular(p)
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return "gguf"
    if p.suffix.lower() == ".gguf":  # named GGUF but not one: say so, not llama2.c's sizes
        size = p.stat().st_size
        raise ModelFormatError(f"{p}: not a GGUF file: " + (
            "it is empty" if size == 0 else
            f"it starts with {magic!r}, not the magic b'GGUF' ({size} bytes)"))
    if p.suffix == ".isaf":
        return "isaf"
    meta = _safetensors_metadata(p)
    if meta is not None:
        if "isaforge" in meta:
            return "isaf"
        raise ModelFormatError(f"{p}: a bare safetensors file; pass the Hugging Face folder "
                               "holding it and its config.json")
    return detect_llama2c(p)


def read_any(path: str | os.PathLike, quant: str = "auto") -> LoadedModel:
    """Read any supported model: HF folder, GGUF, .isaf, else llama2.c .bin. `quant` ("q8" or
    "f32"; "auto": GGUF K-quant and legacy blocks in place, else "q8") applies to GGUF and HF;
    llama2.c and .isaf files load as they are stored. A 4-bit quant (quant.cq4.parse_quant: cq4...,
    q4_0) applies to every format."""
    from ..quant.cq4 import parse_quant, to_4bit

    spec = parse_quant(quant)
    fmt = detect_format(path)
    if spec.kind == "auto" and fmt != "gguf":  # only GGUF stores K-quant blocks to run in place
        quant = "q8"
    if spec.four_bit and fmt != "gguf":  # GGUF keeps its 4-bit tensors (read_gguf)
        loaded = read_any(path, "f32" if fmt == "hf" else "q8")
        return quantized_table(to_4bit(loaded, spec))
    if fmt == "hf":
        loaded = read_hf(path, quant=quant)
    elif fmt == "gguf":
        loaded = read_gguf(path, quant=quant)
    elif fmt == "isaf":
        from .isaf import read_isaf

        loaded = read_isaf(path)
    else:
        loaded = read_llama2c(path)
    check_finite(loaded)
    return quantized_table(loaded)


_FINITE_CHUNK = 1 << 22  # values per isfinite pass: bounded scratch on any model size


def _first_non_finite(a: np.ndarray) -> int | None:
    flat = a.reshape(-1)
    for i in range(0, flat.size, _FINITE_CHUNK):
        bad = ~np.isfinite(flat[i:i + _FINITE_CHUNK])
        if bad.any():
            return i + int(np.argmax(bad))
    return None


def check_finite(loaded: LoadedModel) -> None:
    """Refuse a model with a NaN or infinite weight (float32 values, Q8 scales), naming the
    tensor and the first bad index: every format, at load, one pass over the float data."""
    w = loaded.weights

    def tensors():
        for name in ("tok_embeddings", "rms_att", "rms_ffn", "rms_final", "wcls"):
            yield name, getattr(w, name)
        for name in LAYER_MATRICES:
            for i, m in enumerate(getattr(w, name)):
                yield f"layers.{i}.{name}", m
        for name, per_layer in w.vectors.items():  # the layer description's norms, biases
            for i, v in enumerate(per_layer):
                yield f"layers.{i}.{name}", v
        yield "rope_freqs", w.rope_freqs
    for name, t in tensors():
        if t is None or isinstance(t, MappedQ8):  # the core checks it as it converts it
            continue
        arr = t.s if isinstance(t, (Q8Tensor, Q4Tensor)) else np.asarray(t)
        if arr.dtype.kind != "f":
            continue
        at = _first_non_finite(arr)
        if at is not None:
            what = "scale" if isinstance(t, (Q8Tensor, Q4Tensor)) else "value"
            v = arr.reshape(-1)[at]
            raise ModelFormatError(f"{loaded.path}: tensor {name} has a non-finite {what} "
                                   f"({v}) at flat index {at}")


def with_context(loaded: LoadedModel, ctx: int | None = None) -> LoadedModel:
    """`loaded` at the context it runs at (the KV cache is sized by it): `ctx`, at most the
    model's own, or by default min(the model's, DEFAULT_CTX)."""
    if ctx is not None and ctx < 1:
        raise ValueError(f"ctx must be >= 1, got {ctx}")
    model_ctx = loaded.config.seq_len
    if ctx is not None and ctx > model_ctx:
        raise ValueError(f"ctx {ctx} exceeds the model's context length {model_ctx}")
    n_ctx = ctx if ctx is not None else min(model_ctx, DEFAULT_CTX)
    if n_ctx == model_ctx:
        return loaded
    return dataclasses.replace(loaded, config=dataclasses.replace(loaded.config, seq_len=n_ctx))


def _in_place_spans(loaded: LoadedModel) -> list[tuple[int, int]]:
    """(address, end) of the K-quant matrices run in place (KQTensor: views of the file)."""
    w = loaded.weights
    mats = [w.tok_embeddings, w.wcls, *(t for n in LAYER_MATRICES for t in getattr(w, n))]
    spans = {id(t): t.raw for t in mats if isinstance(t, KQTensor)}
    return sorted((a.__array_interface__["data"][0],
                   a.__array_interface__["data"][0] + a.nbytes) for a in spans.values())


def drop_file_pages(loaded: LoadedModel) -> None:
    """Let the model file's resident pages go from this process (madvise MADV_DONTNEED on its
    read-only mappings): once the weights were converted or packed, most of them are never
    read again. Nothing is lost: a page still in use faults back in from the file. The pages of
    matrices run in place (KQTensor) stay: decode reads all of them every token."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if advice is None:
        return
    keep = _in_place_spans(loaded)
    for mm in loaded.keepalive:
        if not isinstance(mm, mmap.mmap) or mm.closed:
            continue
        if not keep:
            mm.madvise(advice)
            continue
        view = np.frombuffer(mm, np.uint8)
        base = view.__array_interface__["data"][0]
        del view  # no export left on the mapping
        lo, page = 0, mmap.PAGESIZE
        for a, b in [*keep, (base + len(mm), base + len(mm))]:
            if not base <= a <= base + len(mm):
                continue
            hi = (a - base) // page * page  # the gap before this span, whole pages only
            if hi > lo:
                mm.madvise(advice, lo, hi - lo)
            lo = max(lo, -(-(b - base) // page) * page)
