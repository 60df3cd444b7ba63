"""Q8_0 weight quantization, arithmetic identical to upstream llama2.c export.py quantize_q80.

Per group of `group_size` consecutive values along a row: wmax = max|w| and scale = wmax / 127
in float32, q = round-half-to-even(w / scale) in float32 (torch.round), stored as int8.
Deviation from upstream: an all-zero group (or one whose scale underflows to 0) gets scale 0 and
q 0, where upstream would divide by zero; q is clipped to [-127, 127], which only matters for
subnormal scales.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from isaforge.formats.llama2c import (
    detect_format,
    read_llama2c,
    v2_tensor_specs,
    write_llama2c_v2,
)
from isaforge.types import Config, Q8Tensor

MAX_AUTO_GROUP = 64


def quantize_q8(w: np.ndarray, group_size: int) -> tuple[Q8Tensor, float]:
    """Quantize a (rows, cols) float32 matrix; returns (tensor, max |q*s - w|)."""
    w32 = np.asarray(w, dtype=np.float32)
    if w32.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {w32.shape}")
    rows, cols = w32.shape
    if group_size <= 0 or cols % group_size:
        raise ValueError(f"group size {group_size} does not divide the row length {cols}")
    if not np.isfinite(w32).all():
        raise ValueError("cannot quantize a tensor containing NaN or infinity")
    g = w32.reshape(rows, cols // group_size, group_size)
    scale = np.abs(g).max(axis=2) / np.float32(127.0)  # float32 / float32 -> float32
    zero = scale == 0
    div = np.where(zero, np.float32(1.0), scale)[..., None]
    qf = np.rint(g / div)  # float32 division, round half to even like torch.round
    qf[zero] = 0
    q = np.clip(qf, -127, 127).astype(np.int8)
    err = np.abs(q.astype(np.float32) * scale[..., None] - g)
    t = Q8Tensor(q.reshape(rows, cols), scale.astype(np.float32), group_size)
    return t, float(err.max()) if err.size else 0.0


def _valid_group_sizes(config: Config) -> list[int]:
    g = math.gcd(config.dim, config.hidden_dim)
    return [d for d in range(1, g + 1) if g % d == 0]


def pick_group_size(config: Config, requested: int | None) -> int:
    """The requested group size if it divides dim and hidden_dim, else a ValueError.

    With None, the largest power of two <= 64 dividing both.
    """
    if requested is None:
        gs = MAX_AUTO_GROUP
        while config.dim % gs or config.hidden_dim % gs:
            gs //= 2
        return gs
    if requested <= 0:
        raise ValueError(f"group size must be a positive integer, got {requested}")
    bad = [
        f"{n}={getattr(config, n)}" for n in ("dim", "hidden_dim") if getattr(config, n) % requested
    ]
    if bad:
        valid = _valid_group_sizes(config)
        shown = ", ".join(map(str, valid[:24])) + (", ..." if len(valid) > 24 else "")
        raise ValueError(
            f"group size {requested} does not divide {' and '.join(bad)}; "
            f"valid choices for this model: {shown}"
        )
    return requested


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
