"""Q8_0 weight quantization, arithmetic identical to upstream llama2.c export.py quantize_q80.

Per group of `group_size` consecutive values along a row: wmax = max|w| and scale = wmax / 127
in float32, q = round-half-to-even(w / scale) in float32 (torch.round), stored as int8.
Deviation from upstream: an all-zero group (or one whose scale underflows to 0) gets scale 0 and
q 0, where upstream would divide by zero; q is clipped to [-127, 127], which only matters for
subnormal scales.
"""

from __future__ import annotations

import math

import numpy as np

from ..types import Config, Q8Tensor

MAX_AUTO_GROUP = 64
READ_GROUP = 32  # GGUF's Q8_0 block: what the GGUF and HF readers quantize at


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


def halved_group(gs: int, *lengths: int) -> int:
    """gs halved (floor) until it divides every length (at worst 1)."""
    while any(n % gs for n in lengths):
        gs //= 2
    return gs


def pick_group_size(config: Config, requested: int | None) -> int:
    """The requested group size if it divides dim and hidden_dim, else a ValueError.

    With None, the largest power of two <= 64 dividing both.
    """
    if requested is None:
        return halved_group(MAX_AUTO_GROUP, config.dim, config.hidden_dim)
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


def read_group_size(config: Config) -> int:
    """The Q8 group size the GGUF and HF readers hold non-Q8 matrices at: 32 (a Q8_0 file's
    own, so its tensors are taken as they are), or the largest power of two below 32 that
    divides dim and hidden_dim."""
    return min(READ_GROUP, pick_group_size(config, None))


def as_q8(m, group_size: int) -> Q8Tensor:
    """A matrix as Q8 at `group_size`: a Q8Tensor already at it is kept as it is; float32, or
    Q8 at another group size (dequantized first), is quantized."""
    if isinstance(m, Q8Tensor):
        if m.group_size == group_size:
            return m
        m = m.dequantize()
    return quantize_q8(m, group_size)[0]
