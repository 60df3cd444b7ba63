"""llama2.c checkpoints: legacy v0 (fp32), v1 (fp32 with a 256-byte header) and v2 (Q8_0).

Layouts follow upstream run.c / runq.c / export.py. Tensor data is memory-mapped, never copied
(except the v2 token table, which is dequantized to fp32 exactly as runq.c does). Every header
field and the total size are validated before any tensor is touched.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import types as _types
from ..quant.q8 import pick_group_size, quantize_q8
from ..types import LAYER_MATRICES, Config, LoadedModel, ModelFormatError, Q8Tensor, Weights

MAGIC = 0x616B3432  # "ak42" as a little-endian uint32 (bytes b"24ka" on disk)
HEADER_SIZE = 256  # v1 / v2 header, zero padded
V0_HEADER = struct.Struct("<7i")
V1_HEADER = struct.Struct("<Ii7iB")
V2_HEADER = struct.Struct("<Ii7iBi")
SUPPORTED = "llama2.c v0 (legacy, no magic), v1 and v2 (magic 0x616b3432 'ak42')"

# Sanity caps: far above any real Llama, low enough that sizes cannot overflow anything.
_CAPS = {
    "dim": 1 << 16,
    "hidden_dim": 1 << 20,
    "n_layers": 1024,
    "n_heads": 1 << 16,
    "n_kv_heads": 1 << 16,
    "vocab_size": 1 << 24,
    "seq_len": 1 << 20,
}
_F32 = np.dtype("<f4")
_MATS = LAYER_MATRICES  # v1/v2 store the layer matrices in the core's order


@dataclass(frozen=True)
class _Seg:
    """One contiguous run of the file: fp32 tensor, Q8 tensor (q then s) or skipped bytes."""

    name: str
    kind: str  # "f32" | "q8" | "skip"
    shape: tuple[int, ...]
    layer: int | None = None

    def nbytes(self, gs: int) -> int:
        n = int(np.prod(self.shape, dtype=object))
        return n * 4 if self.kind != "q8" else n + 4 * (n // gs)


def _fail(path: object, reason: str) -> ModelFormatError:
    return ModelFormatError(f"{path}: {reason}")


def _mat_shapes(c: Config) -> dict[str, tuple[int, int]]:
    d, h, kv = c.dim, c.hidden_dim, c.kv_dim
    return {
        "wq": (d, d),
        "wk": (kv, d),
        "wv": (kv, d),
        "wo": (d, d),
        "w1": (h, d),
        "w2": (d, h),
        "w3": (h, d),
    }


def _layout(c: Config, version: int) -> list[_Seg]:
    L, d, v = c.n_layers, c.dim, c.vocab_size
    ms = _mat_shapes(c)
    segs: list[_Seg] = []
    if version == 0:
        segs.append(_Seg("tok_embeddings", "f32", (v, d)))
        segs.append(_Seg("rms_att", "f32", (L, d)))
        segs += [_Seg(n, "f32", (L, *ms[n])) for n in ("wq", "wk", "wv", "wo")]
        segs.append(_Seg("rms_ffn", "f32", (L, d)))
        segs += [_Seg(n, "f32", (L, *ms[n])) for n in ("w1", "w2", "w3")]
        segs.append(_Seg("rms_final", "f32", (d,)))
        segs.append(_Seg("rope_tables", "skip", (2, c.seq_len, c.head_size // 2)))
    elif version == 1:
        segs += [_Seg("rms_att", "f32", (L, d)), _Seg("rms_ffn", "f32", (L, d))]
        segs += [_Seg("rms_final", "f32", (d,)), _Seg("tok_embeddings", "f32", (v, d))]
        segs += [_Seg(n, "f32", (L, *ms[n])) for n in _MATS]
    else:
        segs += [_Seg("rms_att", "f32", (L, d)), _Seg("rms_ffn", "f32", (L, d))]
        segs += [_Seg("rms_final", "f32", (d,))]
        segs += [_Seg(n, "q8", s, li) for n, li, s in v2_tensor_specs(c)]
        return segs  # v2_tensor_specs already includes wcls when unshared
    if not c.shared_classifier:
        segs.append(_Seg("wcls", "f32", (v, d)))
    return segs


def v2_tensor_specs(config: Config) -> list[tuple[str, int | None, tuple[int, int]]]:
    """The Q8 tensors of a v2 file in file order: (name, layer or None, (rows, cols))."""
    ms = _mat_shapes(config)
    specs: list[tuple[str, int | None, tuple[int, int]]] = [
        ("tok_embeddings", None, (config.vocab_size, config.dim))
    ]
    specs += [(n, li, ms[n]) for n in _MATS for li in range(config.n_layers)]
    if not config.shared_classifier:
        specs.append(("wcls", None, (config.vocab_size, config.dim)))
    return specs


def _check_config(path: object, c: Config, gs: int | None) -> None:
    for name, cap in _CAPS.items():
        val = getattr(c, name)
        if val <= 0:
            raise _fail(path, f"{name}={val} must be positive")
        if val > cap:
            raise _fail(path, f"{name}={val} is implausibly large (limit {cap})")
    if c.dim % c.n_heads:
        raise _fail(path, f"n_heads={c.n_heads} does not divide dim={c.dim}")
    if c.n_heads % c.n_kv_heads:
        raise _fail(path, f"n_kv_heads={c.n_kv_heads} does not divide n_heads={c.n_heads}")
    if c.head_size % 2:
        raise _fail(path, f"head_size={c.head_size} (dim/n_heads) is odd; RoPE needs pairs")
    if gs is not None:
        if gs <= 0:
            raise _fail(path, f"group_size={gs} must be positive")
        bad = [f"{n}={getattr(c, n)}" for n in ("dim", "hidden_dim") if getattr(c, n) % gs]
        if bad:
            raise _fail(path, f"group_size={gs} does not divide {' and '.join(bad)}")


def _parse_header(path: object, head: bytes) -> tuple[int, Config, int | None, int]:
    """Return (version, config, group_size or None, offset of the first tensor)."""
    if len(head) < V0_HEADER.size:
        raise _fail(
            path,
            f"file too short for a header: {len(head)} bytes, a v0 header needs "
            f"{V0_HEADER.size} and a v1/v2 header {HEADER_SIZE}",
        )
    (magic,) = struct.unpack_from("<I", head)
    if magic != MAGIC:
        dim, hidden, layers, heads, kv, vocab, seq = V0_HEADER.unpack_from(head)
        if dim > _CAPS["dim"]:
            raise _fail(
                path,
                f"unrecognised header: first 4 bytes {head[:4]!r} (0x{magic:08x}) "
                f"are neither the magic 0x{MAGIC:08x} nor a plausible v0 dim; "
                f"supported: {SUPPORTED}",
            )
        # legacy: a negative vocab_size flags an unshared classifier
        c = Config(dim, hidden, layers, heads, kv, abs(vocab), seq, shared_classifier=vocab > 0)
        _check_config(path, c, None)
        return 0, c, None, V0_HEADER.size
    (version,) = struct.unpack_from("<i", head, 4)
    if version not in (1, 2):
        raise _fail(path, f"unsupported llama2.c version {version}; supported: {SUPPORTED}")
    if len(head) < HEADER_SIZE:
        raise _fail(
            path, f"file too short for the {HEADER_SIZE}-byte v{version} header ({len(head)} bytes)"
        )
    gs: int | None = None
    if version == 1:
        _, _, *p, shared = V1_HEADER.unpack_from(head)
    else:
        _, _, *p, shared, gs = V2_HEADER.unpack_from(head)
    if shared not in (0, 1):
        raise _fail(path, f"shared_classifier flag is {shared}, expected 0 or 1")
    c = Config(*p, shared_classifier=bool(shared))
    _check_config(path, c, gs)
    return version, c, gs, HEADER_SIZE


def _size_mismatch(c: Config, version: int, gs: int | None, off: int, need: int, size: int
                   ) -> str:
    """Why a file's size is not the one its header implies, with the likely reason."""
    other = dataclasses.replace(c, shared_classifier=not c.shared_classifier)
    alt = off + sum(s.nbytes(gs or 1) for s in _layout(other, version))
    what = (f"{c.dim}x{c.hidden_dim}, {c.n_layers} layers, {c.n_heads}/{c.n_kv_heads} heads, "
            f"vocab {c.vocab_size}, seq_len {c.seq_len}, "
            f"{'shared' if c.shared_classifier else 'unshared'} classifier")
    if size == alt:
        return (f"v{version} with this header ({what}) needs {need} bytes, the file has {size}:"
                f" the size of an {'unshared' if c.shared_classifier else 'shared'} classifier,"
                " which the header's flag contradicts")
    if size < need:
        return (f"file is truncated: v{version} with this header needs {need} bytes, file has "
                f"{size} ({what})")
    return (f"v{version} with this header ({what}) needs {need} bytes, the file has {size}: "
            f"{size - need} bytes too many (the header does not describe this file)")


def detect_format(path: str | os.PathLike) -> str:
    """'llama2c-v0', 'llama2c-v1' or 'llama2c-v2' after validating the header."""
    _types.check_regular(path)
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
    return f"llama2c-v{_parse_header(path, head)[0]}"


def read_llama2c(path: str | os.PathLike) -> LoadedModel:
    """Memory-map a llama2.c v0/v1/v2 checkpoint; raises ModelFormatError if malformed."""
    _types.check_regular(path)
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
        size = os.fstat(f.fileno()).st_size
        version, c, gs, off = _parse_header(path, head)
        segs = _layout(c, version)
        need = off + sum(s.nbytes(gs or 1) for s in segs)
        if size != need:
            raise _fail(path, _size_mismatch(c, version, gs, off, need, size))
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    t: dict[str, object] = {}
    for s in segs:
        n = int(np.prod(s.shape))
        if s.kind == "f32":
            arr = np.frombuffer(mm, _F32, n, off).reshape(s.shape)
            t[s.name] = list(arr) if s.name in _MATS else arr
        elif s.kind == "q8":
            assert gs is not None
            q = np.frombuffer(mm, np.int8, n, off).reshape(s.shape)
            sc = np.frombuffer(mm, _F32, n // gs, off + n).reshape(s.shape[0], -1)
            qt = Q8Tensor(q, sc, gs)
            if s.layer is None:
                t[s.name] = qt
            else:
                t.setdefault(s.name, []).append(qt)  # type: ignore[union-attr]
        off += s.nbytes(gs or 1)
    tok = t["tok_embeddings"]  # a v2 file's Q8 table stays Q8: rows dequantized on lookup
    if c.shared_classifier:
        t["wcls"] = tok
    w = Weights(**t)  # type: ignore[arg-type]
    return LoadedModel(c, w, str(path), f"llama2c-v{version}", keepalive=[mm])


# ---------------------------------------------------------------------------------------------
# writers


def _header(version: int, c: Config, gs: int | None = None) -> bytes:
    p = (c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len)
    if version == 1:
        raw = V1_HEADER.pack(MAGIC, 1, *p, int(c.shared_classifier))
    else:
        raw = V2_HEADER.pack(MAGIC, 2, *p, int(c.shared_classifier), gs)
    return raw + b"\0" * (HEADER_SIZE - len(raw))


def _f32_bytes(a: object, shape: tuple[int, ...], what: str) -> bytes:
    # a quantized matrix (a Q8 token table) as its dequantized values
    arr = a.dequantize() if hasattr(a, "dequantize") else np.asarray(a)
    if arr.shape != shape:
        raise ValueError(f"{what}: shape {arr.shape}, expected {shape}")
    return np.ascontiguousarray(arr, dtype=_F32).tobytes()


def _atomic_write(path: str | os.PathLike, chunks: Iterable[bytes]) -> int:
    """Write chunks to a temporary sibling, then rename over path; returns bytes written."""
    tmp = Path(f"{os.fspath(path)}.tmp{os.getpid()}")
    n = 0
    try:
        with open(tmp, "wb") as f:
            for b in chunks:
                f.write(b)
                n += len(b)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def write_llama2c_v1(path: str | os.PathLike, config: Config, weights: Weights) -> int:
    """Write an fp32 v1 file (export.py's version1_export layout); returns its size."""
    c = config
    ms = _mat_shapes(c)

    def chunks() -> Iterator[bytes]:
        yield _header(1, c)
        yield _f32_bytes(weights.rms_att, (c.n_layers, c.dim), "rms_att")
        yield _f32_bytes(weights.rms_ffn, (c.n_layers, c.dim), "rms_ffn")
        yield _f32_bytes(weights.rms_final, (c.dim,), "rms_final")
        yield _f32_bytes(weights.tok_embeddings, (c.vocab_size, c.dim), "tok_embeddings")
        for n in _MATS:
            mats = getattr(weights, n)
            if len(mats) != c.n_layers:
                raise ValueError(f"{n}: {len(mats)} layers, expected {c.n_layers}")
            for li, m in enumerate(mats):
                yield _f32_bytes(m, ms[n], f"{n}[{li}]")
        if not c.shared_classifier:
            yield _f32_bytes(weights.wcls, (c.vocab_size, c.dim), "wcls")

    return _atomic_write(path, chunks())


def write_llama2c_v2(
    path: str | os.PathLike,
    config: Config,
    *,
    group_size: int,
    rms_att: np.ndarray,
    rms_ffn: np.ndarray,
    rms_final: np.ndarray,
    tensors: Iterable[Q8Tensor],
) -> int:
    """Write a Q8_0 v2 file byte-for-byte like export.py's version2_export; returns its size.

    `tensors` yields the Q8 tensors in `v2_tensor_specs(config)` order (token table, wq of
    every layer, wk, wv, wo, w1, w2, w3, then wcls if unshared). It may be a lazy generator, so
    a quantizer can stream one tensor at a time. Shapes and group sizes are checked as they
    arrive; on any error the partial file is removed and `path` is left untouched.
    """
    c = config
    if c.dim % group_size or c.hidden_dim % group_size:
        raise ValueError(f"group_size {group_size} must divide dim and hidden_dim")
    specs = v2_tensor_specs(c)

    def chunks() -> Iterator[bytes]:
        yield _header(2, c, group_size)
        yield _f32_bytes(rms_att, (c.n_layers, c.dim), "rms_att")
        yield _f32_bytes(rms_ffn, (c.n_layers, c.dim), "rms_ffn")
        yield _f32_bytes(rms_final, (c.dim,), "rms_final")
        it = iter(tensors)
        for name, li, shape in specs:
            what = name if li is None else f"{name}[{li}]"
            t = next(it, None)
            if t is None:
                raise ValueError(f"too few Q8 tensors: missing {what}")
            if t.group_size != group_size or t.q.shape != shape or t.q.dtype != np.int8:
                raise ValueError(
                    f"{what}: got {t.q.dtype} {t.q.shape} gs {t.group_size}, "
                    f"expected int8 {shape} gs {group_size}"
                )
            if t.s.shape != (shape[0], shape[1] // group_size):
                raise ValueError(f"{what}: scales shape {t.s.shape} does not match")
            yield np.ascontiguousarray(t.q).tobytes()
            yield np.ascontiguousarray(t.s, dtype=_F32).tobytes()
        if next(it, None) is not None:
            raise ValueError(f"too many Q8 tensors (expected {len(specs)})")

    return _atomic_write(path, chunks())


def v2_tensors_of(weights: Weights, config: Config) -> list[Q8Tensor]:
    """The Q8 tensors of loaded v2 weights in file order (needs a shared classifier)."""
    if not isinstance(weights.wcls, Q8Tensor) or not config.shared_classifier:
        raise ValueError("the quantized token table is only kept when the classifier is shared")
    out = [weights.wcls]
    for n in _MATS:
        out += list(getattr(weights, n))
    return out


# ---- `isaforge quantize`: an fp32 checkpoint to a v2 (Q8) file ----


@dataclass
class QuantizeSummary:
    group_size: int
    chosen_automatically: bool
    n_tensors: int
    max_error: float
    out_path: str = ""
    n_bytes: int = 0


def quantize_model(
    src_path: str | os.PathLike,
    out_path: str | os.PathLike,
    group_size: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> QuantizeSummary:
    """Quantize an fp32 llama2.c v0/v1 checkpoint to a Q8_0 v2 file, one tensor at a time.

    `log` gets one line per tensor with its max error; `progress(i, n)` is called after each.
    """
    fmt = detect_format(src_path)
    if fmt == "llama2c-v2":
        raise ValueError(
            f"{src_path} is already Q8_0 quantized (llama2c-v2); "
            "quantize the fp32 v0/v1 checkpoint instead"
        )
    if os.path.exists(out_path) and os.path.samefile(src_path, out_path):
        raise ValueError(f"output {out_path} is the input file; choose another path")
    model = read_llama2c(src_path)
    c, w = model.config, model.weights
    gs = pick_group_size(c, group_size)
    specs = v2_tensor_specs(c)
    n = len(specs)
    errors: list[float] = []

    def stream() -> Iterator[Q8Tensor]:
        for i, (name, li, shape) in enumerate(specs, 1):
            m = getattr(w, name) if li is None else getattr(w, name)[li]
            t, err = quantize_q8(m, gs)
            errors.append(err)
            if log:
                what = name if li is None else f"{name}[{li}]"
                log(f"{i}/{n} quantized {what} {shape} to Q8_0 with max error {err:.8g}")
            if progress:
                progress(i, n)
            yield t

    nbytes = write_llama2c_v2(
        out_path,
        c,
        group_size=gs,
        rms_att=w.rms_att,
        rms_ffn=w.rms_ffn,
        rms_final=w.rms_final,
        tensors=stream(),
    )
    worst = max(errors)
    if log:
        log(f"max quantization group error across all weights: {worst:.8g}")
    return QuantizeSummary(gs, group_size is None, n, worst, os.fspath(out_path), nbytes)
