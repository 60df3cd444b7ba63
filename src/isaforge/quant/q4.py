"""4-bit weights: a 16-entry int8 codebook indexed by nibbles, one float32 scale per group.

One tensor type serves CQ4 (quant/cq4.py: levels for a rotated, normalized group), GGUF Q4_0
(codebook -8..7, block 32, fp16 scale), IQ4_NL (its non-linear table, block 32) and IQ4_XS (the
same table with 6-bit sub-block scales under an fp16 super-block scale, expanded to one float
per 32 at load). The nibbles are in the kernels' layout (isaforge.h, if_q4_gemv_fn), which is
GGUF's own: per block of 32 values along a row, byte j holds value j in its low nibble and value
j + 16 in its high nibble, so a GGUF file's nibbles are taken unchanged.

Rows are zero-padded from `cols` to `kpad` (a multiple of 32 and of the group size); with
`signs` (a rotated tensor) each group of the padded row holds H (signs * w) / sqrt(gs), H the
Sylvester Walsh-Hadamard matrix, and the kernels rotate the activations the same way, so
dot products are unchanged. The stored scale of a rotated group already includes the
1 / sqrt(gs) of the unnormalized run-time transform: dequantize() gives w = signs * H v with
v = codebook[nibble] * scale."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK = 32  # values per nibble block (16 bytes)


@dataclass
class Q4Tensor:
    """w ~= codebook[nibble] * s per group of `group_size` along each (padded) row."""

    nibbles: np.ndarray  # uint8 (rows, kpad // 2), the kernels' layout
    s: np.ndarray  # float32 (rows, kpad // group_size)
    codebook: np.ndarray  # int8 (16,), values in [-127, 127]
    group_size: int
    cols: int  # the row length the model sees (<= kpad)
    signs: np.ndarray | None = None  # float32 (kpad,) of +-1: a rotated tensor (CQ4)
    kind: str = "cq4"  # "cq4", "q4_0", "iq4_nl" or "iq4_xs": where the values came from
    seed: int | None = None  # the rotation's seed (CQ4)

    @property
    def kpad(self) -> int:
        return self.nibbles.shape[1] * 2

    @property
    def shape(self) -> tuple[int, int]:
        return (self.nibbles.shape[0], self.cols)

    def indices(self) -> np.ndarray:
        """The 4-bit indices, uint8 (rows, kpad)."""
        return unpack_nibbles(self.nibbles)

    def values(self) -> np.ndarray:
        """codebook[nibble] * scale per group, float32 (rows, kpad): the padded, rotated row."""
        rows, kpad = self.nibbles.shape[0], self.kpad
        v = self.codebook[self.indices()].astype(np.float32)
        g = v.reshape(rows, kpad // self.group_size, self.group_size) * self.s[:, :, None]
        return g.reshape(rows, kpad)

    def rows(self, ids) -> np.ndarray:
        """float32 (len(ids), cols): rows `ids` dequantized (a token table's lookup)."""
        ids = np.asarray(ids)
        sub = Q4Tensor(self.nibbles[ids], self.s[ids], self.codebook, self.group_size, self.cols,
                       self.signs, self.kind, self.seed)
        return sub.dequantize()

    def dequantize(self) -> np.ndarray:
        """float32 (rows, cols): the values, un-rotated (float64 transform) and unpadded."""
        v = self.values()
        if self.signs is not None:
            v = (fwht(v.astype(np.float64), self.group_size) * self.signs).astype(np.float32)
        return np.ascontiguousarray(v[:, : self.cols])


def pack_nibbles(idx: np.ndarray) -> np.ndarray:
    """(rows, K) indices 0..15 (K % 32 == 0) -> (rows, K / 2) uint8 in the kernels' layout."""
    rows, K = idx.shape
    b = np.asarray(idx, np.uint8).reshape(rows, K // BLOCK, 2, BLOCK // 2)
    return np.ascontiguousarray((b[:, :, 0] | (b[:, :, 1] << 4)).reshape(rows, K // 2))


def unpack_nibbles(nib: np.ndarray) -> np.ndarray:
    """The inverse of pack_nibbles."""
    rows, half = nib.shape
    b = nib.reshape(rows, half // 16, 1, 16)
    return np.concatenate([b & 0x0F, b >> 4], axis=2).reshape(rows, half * 2)


def fwht(x: np.ndarray, gs: int) -> np.ndarray:
    """The unnormalized Walsh-Hadamard transform of each group of gs (a power of two) along the
    last axis, in the C kernel's butterfly order (float64 here: the reference)."""
    shape = x.shape
    y = np.array(x, copy=True).reshape(-1, gs)
    h = 1
    while h < gs:
        y = y.reshape(-1, gs // (2 * h), 2, h)
        a, b = y[:, :, 0, :].copy(), y[:, :, 1, :].copy()
        y[:, :, 0, :], y[:, :, 1, :] = a + b, a - b
        h *= 2
    return y.reshape(shape)


def padded_length(cols: int, group_size: int) -> int:
    """cols rounded up to a multiple of the group size (and of 32)."""
    step = int(np.lcm(group_size, BLOCK))
    return -(-cols // step) * step
