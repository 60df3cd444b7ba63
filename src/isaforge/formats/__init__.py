"""Model file readers and writers; `read_any`, which picks the reader for a path, and
`with_context`, the context a loaded model runs at."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from pathlib import Path

from isaforge.formats.gguf import read_gguf
from isaforge.formats.hf import read_hf
from isaforge.formats.llama2c import (
    detect_format as detect_llama2c,
)
from isaforge.formats.llama2c import (
    read_llama2c,
    v2_tensor_specs,
    v2_tensors_of,
    write_llama2c_v1,
    write_llama2c_v2,
)
from isaforge.types import LoadedModel, ModelFormatError

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
    with open(p, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        return "gguf"
    if p.suffix == ".isaf":
        return "isaf"
    meta = _safetensors_metadata(p)
    if meta is not None:
        if "isaforge" in meta:
            return "isaf"
        raise ModelFormatError(f"{p}: a bare safetensors file; pass the Hugging Face folder "
                               "holding it and its config.json")
    return detect_llama2c(p)


def read_any(path: str | os.PathLike, quant: str = "q8") -> LoadedModel:
    """Read any supported model: HF folder, GGUF, .isaf, else llama2.c .bin. `quant` ("q8" or
    "f32") applies to GGUF and HF; llama2.c and .isaf files load as they are stored."""
    fmt = detect_format(path)
    if fmt == "hf":
        return read_hf(path, quant=quant)
    if fmt == "gguf":
        return read_gguf(path, quant=quant)
    if fmt == "isaf":
        from isaforge.formats.isaf import read_isaf

        return read_isaf(path)
    return read_llama2c(path)


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
