"""GGML tensor types: block layouts and vectorized numpy dequantizers to float32.

A GGML row of `cols` values is stored as cols / block consecutive blocks of `nbytes` bytes.
Little-endian throughout; fp16 fields are IEEE half. Each dequantizer takes the raw bytes of a
(rows, cols) tensor and returns float32 (rows, cols), with ggml's arithmetic in float32:
    Q8_0 (32 values, 34 bytes):  d:f16, q:int8[32]                 x = d * q
    Q4_0 (32, 18):  d:f16, qs:u8[16]  low nibbles are values 0..15, high nibbles 16..31,
                                                                   x = d * (nibble - 8)
    Q4_1 (32, 20):  d:f16, m:f16, qs:u8[16]                        x = d * nibble + m
    Q5_0 (32, 22):  d:f16, qh:u32, qs:u8[16]  bit j of qh is bit 4 of value j
                                                                   x = d * (q5 - 16)
    Q5_1 (32, 24):  d:f16, m:f16, qh:u32, qs:u8[16]                x = d * q5 + m
    Q4_K (256, 144): d:f16, dmin:f16, scales:u8[12] (8 six-bit scale/min pairs), qs:u8[128]
    Q6_K (256, 210): ql:u8[128], qh:u8[64], scales:i8[16], d:f16
    Q2_K (256, 84): scales:u8[16] (low nibble scale, high nibble min per 16 values), qs:u8[64]
                    (2-bit values), d:f16, dmin:f16        x = d * sc * q - dmin * m
    Q3_K (256, 110): hmask:u8[32], qs:u8[64], scales:u8[12] (16 six-bit scales, biased by 32),
                    d:f16                                  x = d * (sc - 32) * (q2 - 4 * !hbit)
    Q5_K (256, 176): d:f16, dmin:f16, scales:u8[12] (as Q4_K), qh:u8[32], qs:u8[128]
                                                           x = d * sc * q5 - dmin * m
    IQ4_NL (32, 18): d:f16, qs:u8[16] (Q4_0's nibble order)  x = d * KVALUES_IQ4NL[nibble]
    IQ4_XS (256, 136): d:f16, scales_h:u16, scales_l:u8[4], qs:u8[128]: 8 sub-blocks of 32, each
                    16 bytes in Q4_0's order, 6-bit scale ls  x = d * (ls - 32) * KVALUES[nibble]
Q4_0, IQ4_NL and IQ4_XS also split into a Q4Tensor (q4_split) with the file's nibbles unchanged:
the 4-bit kernels run them without requantization.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .q4 import Q4Tensor

# IQ4_NL's and IQ4_XS's 16 non-linear levels (ggml-common.h kvalues_iq4nl)
KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89,
                          113], np.int8)


@dataclass(frozen=True)
class GGMLType:
    name: str
    block: int  # values per block
    nbytes: int  # bytes per block
    dequantize_blocks: Callable[[np.ndarray], np.ndarray]  # (nb, nbytes) u8 -> (nb, block) f32

    def row_bytes(self, cols: int) -> int:
        return cols // self.block * self.nbytes


def _f16(b: np.ndarray, at: int) -> np.ndarray:
    """The fp16 field at byte `at` of every block, as float32 (nb, 1)."""
    return np.ascontiguousarray(b[:, at:at + 2]).view("<f2").astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(nb, 16) packed bytes -> (nb, 32) uint8: low nibbles first, then high nibbles."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _high_bits(qh4: np.ndarray) -> np.ndarray:
    """(nb, 4) bytes of a little-endian u32 -> (nb, 32) uint8 holding bit j at position 4."""
    qh = np.ascontiguousarray(qh4).view("<u4")  # (nb, 1)
    return (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)


def _f32(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<f4").astype(np.float32)


def _f16_values(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<f2").astype(np.float32)


def _bf16(b: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(b).view("<u2").astype(np.uint32) << 16
    return u.view(np.float32)


def _q8_0(b: np.ndarray) -> np.ndarray:
    return b[:, 2:34].view(np.int8).astype(np.float32) * _f16(b, 0)


def _q4_0(b: np.ndarray) -> np.ndarray:
    q = _nibbles(b[:, 2:18]).astype(np.int8) - np.int8(8)
    return q.astype(np.float32) * _f16(b, 0)


def _q4_1(b: np.ndarray) -> np.ndarray:
    return _nibbles(b[:, 4:20]).astype(np.float32) * _f16(b, 0) + _f16(b, 2)


def _q5_0(b: np.ndarray) -> np.ndarray:
    q = (_nibbles(b[:, 6:22]) | _high_bits(b[:, 2:6])).astype(np.int8) - np.int8(16)
    return q.astype(np.float32) * _f16(b, 0)


def _q5_1(b: np.ndarray) -> np.ndarray:
    q = _nibbles(b[:, 8:24]) | _high_bits(b[:, 4:8])
    return q.astype(np.float32) * _f16(b, 0) + _f16(b, 2)


def _k4_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K's 12 bytes -> 8 six-bit scales and 8 six-bit mins, each (nb, 8) uint8."""
    lo, mid, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([lo & 63, (hi & 0x0F) | ((lo >> 6) << 4)], axis=1)
    mn = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=1)
    return sc, mn


def _q4_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, mn = _k4_scales(b[:, 4:16])
    qs = b[:, 16:144].reshape(nb, 4, 32)  # 4 chunks of 32 bytes = 64 values each
    q = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(nb, 8, 32)  # sub-block j: 32 values
    scale = (d * sc.astype(np.float32))[:, :, None]
    off = (dmin * mn.astype(np.float32))[:, :, None]
    return (scale * q.astype(np.float32) - off).reshape(nb, 256)


def _q6_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    ql = b[:, 0:128].reshape(nb, 2, 2, 32)  # half, (l | l+32), l
    qh = b[:, 128:192].reshape(nb, 2, 1, 32)  # half, -, l
    lo = np.concatenate([ql & 0x0F, ql >> 4], axis=2)  # half, quarter 0..3, l
    hi = (qh >> np.array([0, 2, 4, 6], np.uint8)[None, None, :, None]) & 3
    q = (lo | (hi << 4)).astype(np.int8) - np.int8(32)  # (nb, 2, 4, 32)
    sc = b[:, 192:208].view(np.int8).astype(np.float32).reshape(nb, 2, 4, 2)  # 16 values each
    scale = _f16(b, 208)[:, :, None, None] * sc
    v = q.astype(np.float32).reshape(nb, 2, 4, 2, 16) * scale[..., None]
    return v.reshape(nb, 256)


def _q5_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, mn = _k4_scales(b[:, 4:16])
    qh = b[:, 16:48]  # (nb, 32): bit j of byte l is bit 4 of value l of sub-block j
    qs = b[:, 48:176].reshape(nb, 4, 32)  # chunk c: sub-block 2c low nibbles, 2c + 1 high
    lo = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(nb, 8, 32)
    hi = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1
    q = lo | (hi << 4)
    scale = (d * sc.astype(np.float32))[:, :, None]
    off = (dmin * mn.astype(np.float32))[:, :, None]
    return (scale * q.astype(np.float32) - off).reshape(nb, 256)


def _q2_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    sc = b[:, 0:16]  # scale index: half * 8 + shift * 2 + (l >= 16)
    qs = b[:, 16:80].reshape(nb, 2, 1, 32)  # half, -, l
    d, dmin = _f16(b, 80), _f16(b, 82)
    q = (qs >> np.array([0, 2, 4, 6], np.uint8)[None, None, :, None]) & 3  # half, shift, l
    dl = (d * (sc & 0x0F).astype(np.float32)).reshape(nb, 2, 4, 2, 1)
    ml = (dmin * (sc >> 4).astype(np.float32)).reshape(nb, 2, 4, 2, 1)
    v = dl * q.reshape(nb, 2, 4, 2, 16).astype(np.float32) - ml
    return v.reshape(nb, 256)


def _k3_scales(s: np.ndarray) -> np.ndarray:
    """Q3_K's 12 bytes -> 16 six-bit scales minus 32, int8 (nb, 16): the low nibbles are bytes
    0-7's low then high nibbles, the top two bits come from bytes 8-11 two bits at a time."""
    lo = np.concatenate([s[:, 0:8] & 0x0F, s[:, 0:8] >> 4], axis=1)
    hi = (s[:, None, 8:12] >> np.array([0, 2, 4, 6], np.uint8)[None, :, None]) & 3
    return (lo | (hi.reshape(-1, 16) << 4)).astype(np.int8) - np.int8(32)


def _q3_k(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    hm = b[:, 0:32]  # bit (half * 4 + shift) of byte l
    qs = b[:, 32:96].reshape(nb, 2, 1, 32)
    d = _f16(b, 108)
    q = (qs >> np.array([0, 2, 4, 6], np.uint8)[None, None, :, None]) & 3  # half, shift, l
    hbit = (hm[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1
    qv = q.astype(np.int8) - (np.int8(4) * (1 - hbit.reshape(nb, 2, 4, 32).astype(np.int8)))
    dl = (d * _k3_scales(b[:, 96:108]).astype(np.float32)).reshape(nb, 2, 4, 2, 1)
    return (dl * qv.reshape(nb, 2, 4, 2, 16).astype(np.float32)).reshape(nb, 256)


def _iq4_nl(b: np.ndarray) -> np.ndarray:
    return _f16(b, 0) * KVALUES_IQ4NL[_nibbles(b[:, 2:18])].astype(np.float32)


def _iq4_xs_scales(b: np.ndarray) -> np.ndarray:
    """IQ4_XS's 8 sub-block scales d * (ls - 32), float32 (nb, 8)."""
    sh = np.ascontiguousarray(b[:, 2:4]).view("<u2")  # (nb, 1)
    sl = b[:, 4:8]
    lo = np.stack([sl & 0x0F, sl >> 4], axis=2).reshape(-1, 8)
    hi = ((sh >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.uint8)
    ls = (lo | (hi << 4)).astype(np.int8) - np.int8(32)
    return _f16(b, 0) * ls.astype(np.float32)


def _iq4_xs(b: np.ndarray) -> np.ndarray:
    nb = b.shape[0]
    qs = b[:, 8:136].reshape(nb * 8, 16)
    v = KVALUES_IQ4NL[_nibbles(qs)].astype(np.float32).reshape(nb, 8, 32)
    return (_iq4_xs_scales(b)[:, :, None] * v).reshape(nb, 256)


# GGML type ids (ggml.h enum ggml_type) of the types this module decodes.
GGML_TYPES: dict[int, GGMLType] = {
    0: GGMLType("F32", 1, 4, _f32),
    1: GGMLType("F16", 1, 2, _f16_values),
    2: GGMLType("Q4_0", 32, 18, _q4_0),
    3: GGMLType("Q4_1", 32, 20, _q4_1),
    6: GGMLType("Q5_0", 32, 22, _q5_0),
    7: GGMLType("Q5_1", 32, 24, _q5_1),
    8: GGMLType("Q8_0", 32, 34, _q8_0),
    10: GGMLType("Q2_K", 256, 84, _q2_k),
    11: GGMLType("Q3_K", 256, 110, _q3_k),
    12: GGMLType("Q4_K", 256, 144, _q4_k),
    13: GGMLType("Q5_K", 256, 176, _q5_k),
    14: GGMLType("Q6_K", 256, 210, _q6_k),
    20: GGMLType("IQ4_NL", 32, 18, _iq4_nl),
    23: GGMLType("IQ4_XS", 256, 136, _iq4_xs),
    30: GGMLType("BF16", 1, 2, _bf16),
}
SUPPORTED_NAMES = tuple(t.name for t in GGML_TYPES.values())


def _blocks(raw, t: GGMLType, rows: int, cols: int) -> np.ndarray:
    if cols % t.block:
        raise ValueError(f"{t.name} row length {cols} is not a multiple of {t.block}")
    nb = rows * cols // t.block
    b = np.frombuffer(raw, np.uint8, nb * t.nbytes) if not isinstance(raw, np.ndarray) else raw
    return b.reshape(-1)[: nb * t.nbytes].reshape(nb, t.nbytes)


def dequantize(raw, t: GGMLType, rows: int, cols: int, chunk_rows: int = 4096) -> np.ndarray:
    """float32 (rows, cols) from the raw bytes of a GGML tensor (bytes-like or uint8 array),
    decoded a few thousand rows at a time to bound temporaries."""
    b = _blocks(raw, t, rows, cols)
    if t.name == "F32":
        return _f32(b).reshape(rows, cols)
    out = np.empty((rows, cols), np.float32)
    per_row = cols // t.block
    for r0 in range(0, rows, chunk_rows):
        r1 = min(rows, r0 + chunk_rows)
        out[r0:r1] = t.dequantize_blocks(b[r0 * per_row:r1 * per_row]).reshape(r1 - r0, cols)
    return out


def q8_0_split(raw, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """A Q8_0 tensor's int8 quants (rows, cols) and float32 scales (rows, cols // 32), values
    unchanged (w = q * s per group of 32)."""
    b = _blocks(raw, GGML_TYPES[8], rows, cols)
    q = np.ascontiguousarray(b[:, 2:34]).view(np.int8).reshape(rows, cols)
    s = _f16(b, 0).reshape(rows, cols // 32)
    return q, s


Q4_NATIVE = ("Q4_0", "IQ4_NL", "IQ4_XS")  # the types the 4-bit kernels run as they are


def q4_split(raw, type_id: int, rows: int, cols: int) -> Q4Tensor:
    """A Q4_0, IQ4_NL or IQ4_XS tensor as a Q4Tensor at group 32: the file's nibbles unchanged
    (copied out of the blocks), the codebook -8..7 or IQ4_NL's table, one float32 scale per 32
    (Q4_0 / IQ4_NL: the fp16 d; IQ4_XS: d * (ls - 32)), so dequantize() equals ggml's."""
    t = GGML_TYPES[type_id]
    b = _blocks(raw, t, rows, cols)
    if t.name == "Q4_0":
        nib, s, cb = b[:, 2:18], _f16(b, 0), np.arange(-8, 8, dtype=np.int8)
    elif t.name == "IQ4_NL":
        nib, s, cb = b[:, 2:18], _f16(b, 0), KVALUES_IQ4NL.copy()
    elif t.name == "IQ4_XS":
        nib, s, cb = b[:, 8:136], _iq4_xs_scales(b), KVALUES_IQ4NL.copy()
    else:
        raise ValueError(f"{t.name} is not a 4-bit codebook type ({', '.join(Q4_NATIVE)})")
    return Q4Tensor(np.ascontiguousarray(nib).reshape(rows, cols // 2),
                    np.ascontiguousarray(s, np.float32).reshape(rows, cols // 32), cb, 32, cols,
                    kind=t.name.lower())


# The types run in place (--quant auto): the K-quants, and the legacy blocks of 32 (LEGACY_NATIVE)
LEGACY_NATIVE = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
KQ_NATIVE = ("Q4_K", "Q5_K", "Q6_K") + LEGACY_NATIVE
# IQ4_NL (blocks of 32, L8 activations) and IQ4_XS (256, K8) run in place too (IQ4_NATIVE)
IQ4_NATIVE = ("IQ4_NL", "IQ4_XS")
KQ_NATIVE += IQ4_NATIVE


@dataclass
class KQTensor:
    """A Q4_K, Q5_K, Q6_K (or legacy Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, or IQ4_NL, IQ4_XS) matrix
    run in place: `raw` is a view of the file's blocks ((rows, cols / block) blocks, row-major,
    unchanged), the one resident copy. The C core reads it through the K-quant, legacy or IQ4
    kernels (isaforge.h, "K-quants read as stored", "Legacy blocks read as stored", "IQ4 blocks
    read as stored"); dequantize() gives ggml's float32 values."""

    raw: np.ndarray  # uint8, rows * cols / 256 * block bytes
    type_id: int
    rows_: int
    cols: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.type_id].name

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows_, self.cols)

    def dequantize(self) -> np.ndarray:
        return dequantize(self.raw, GGML_TYPES[self.type_id], self.rows_, self.cols)

    def rows(self, ids) -> np.ndarray:
        """float32 (len(ids), cols): rows `ids` dequantized, as the core's lookup does."""
        b = _blocks(self.raw, GGML_TYPES[self.type_id], self.rows_, self.cols)
        per_row = self.cols // GGML_TYPES[self.type_id].block
        ids = np.asarray(ids, np.int64).reshape(-1)
        sel = b.reshape(self.rows_, per_row, -1)[ids].reshape(-1, b.shape[1])
        return GGML_TYPES[self.type_id].dequantize_blocks(sel).reshape(len(ids), self.cols)

    def integers(self) -> tuple:
        """The integers and scales the K-quant kernels multiply, per super-block (nb = rows *
        cols / 256 of them, row-major): Q4_K (d, dmin, sc (nb, 8), m (nb, 8), q (nb, 8, 32)),
        q in 0..15; Q5_K as Q4_K with q in 0..31 (bit j of qh[l] is bit 4 of value l of
        sub-block j); Q6_K (d, sc (nb, 16), u (nb, 16, 16)), u = q + 32 in 0..63. d, dmin
        float32, the rest int64. The legacy and IQ4 types: _legacy_integers, _iq4_integers."""
        b = _blocks(self.raw, GGML_TYPES[self.type_id], self.rows_, self.cols)
        nb = b.shape[0]
        if self.type_name in LEGACY_NATIVE:
            return _legacy_integers(b, self.type_name)
        if self.type_name in IQ4_NATIVE:
            return _iq4_integers(b, self.type_name)
        if self.type_name in ("Q4_K", "Q5_K"):
            sc, mn = _k4_scales(b[:, 4:16])
            five = self.type_name == "Q5_K"
            qs = b[:, 48:176].reshape(nb, 4, 32) if five else b[:, 16:144].reshape(nb, 4, 32)
            q = np.stack([qs & 15, qs >> 4], axis=2).reshape(nb, 8, 32)
            if five:
                qh = b[:, 16:48].reshape(nb, 1, 32)
                q = q | (((qh >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1) << 4)
            return (_f16(b, 0)[:, 0], _f16(b, 2)[:, 0], sc.astype(np.int64),
                    mn.astype(np.int64), q.astype(np.int64))
        ql = b[:, 0:128].reshape(nb, 2, 2, 32)
        qh = b[:, 128:192].reshape(nb, 2, 1, 32)
        lo = np.concatenate([ql & 15, ql >> 4], axis=2)
        hi = (qh >> np.array([0, 2, 4, 6], np.uint8)[None, None, :, None]) & 3
        u = (lo | (hi << 4)).astype(np.int64).reshape(nb, 16, 16)
        return _f16(b, 208)[:, 0], np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(
            np.int64), u


def _legacy_integers(b: np.ndarray, name: str) -> tuple:
    """A legacy type's (d, m, u) per block (nb of them): d float32 (nb,), m float32 (nb,) for
    Q4_1 / Q5_1 else None, u int64 (nb, 32) unsigned (Q4: 0..15; Q5: 0..31, bit j of the
    little-endian qh word as bit 4 of value j), Q8_0's signed int8 values as they are."""
    if name == "Q8_0":
        return _f16(b, 0)[:, 0], None, np.ascontiguousarray(b[:, 2:34]).view(np.int8).astype(
            np.int64)
    mins = name in ("Q4_1", "Q5_1")
    qh_at = {"Q5_0": 2, "Q5_1": 4}.get(name)
    qs_at = {"Q4_0": 2, "Q4_1": 4, "Q5_0": 6, "Q5_1": 8}[name]
    qs = b[:, qs_at:qs_at + 16]
    u = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int64)
    if qh_at is not None:
        qh = np.ascontiguousarray(b[:, qh_at:qh_at + 4]).view("<u4").astype(np.int64)
        u |= ((qh >> np.arange(32, dtype=np.int64)[None, :]) & 1) << 4
    return _f16(b, 0)[:, 0], (_f16(b, 2)[:, 0] if mins else None), u


def _iq4_integers(b: np.ndarray, name: str) -> tuple:
    """IQ4_NL's (d, level) per block: d float32 (nb,), level int64 (nb, 32) (the nibble's
    entry of KVALUES_IQ4NL, value j from the low nibble of qs[j] for j < 16, else the high
    one of qs[j - 16]); IQ4_XS's (d, s, level) per super-block: s int64 (nb, 8) the sub-block
    scales ls - 32, level int64 (nb, 8, 32)."""
    qs = b[:, 2:18] if name == "IQ4_NL" else b[:, 8:136].reshape(-1, 8, 16)
    nib = np.concatenate([qs & 15, qs >> 4], axis=-1)
    level = KVALUES_IQ4NL.astype(np.int64)[nib]
    d = _f16(b, 0)[:, 0]
    if name == "IQ4_NL":
        return d, level
    sh = b[:, 2].astype(np.int64) | b[:, 3].astype(np.int64) << 8
    j = np.arange(8, dtype=np.int64)
    lo = (b[:, 4 + j // 2].astype(np.int64) >> (4 * (j % 2))) & 15
    hi = (sh[:, None] >> (2 * j)) & 3
    return d, (lo | hi << 4) - 32, level


def kq_split(raw, type_id: int, rows: int, cols: int) -> KQTensor:
    """A KQ_NATIVE tensor's bytes as a KQTensor (no copy: raw stays a view of the file)."""
    t = GGML_TYPES[type_id]
    if t.name not in KQ_NATIVE:
        raise ValueError(f"{t.name} does not run in place ({', '.join(KQ_NATIVE)})")
    b = _blocks(raw, t, rows, cols)
    return KQTensor(b.reshape(-1), type_id, rows, cols)
