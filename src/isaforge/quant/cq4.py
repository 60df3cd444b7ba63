"""CQ4: 4-bit codebook weights after a randomized Hadamard rotation (numpy only).

Per row and group of GS values along K (GS 32, 64 or 128; rows zero-padded to a multiple of GS,
the activations likewise at run time, so dot products are unchanged):
  1. rotate: r = H (signs * w) / sqrt(GS), H the Sylvester Walsh-Hadamard matrix, signs +-1
     drawn from numpy's default_rng(seed) (one vector over the padded row, shared by every
     matrix of that row length; the seed is stored with the tensor);
  2. normalize: u = r / |r| (after a random rotation, u is close to a uniformly random unit
     vector in GS dimensions);
  3. snap each coordinate of u to the nearest of 16 levels: the Lloyd-Max quantizer of one
     coordinate of a uniform random unit vector in GS dimensions, whose density is proportional
     to (1 - x^2)^((GS - 3) / 2) on [-1, 1] (lloyd_max_levels);
  4. the levels are stored pre-scaled to int8 (largest magnitude NARROW_AMAX = 63 for --quant
     specs, 127 with -wide or quantize_cq4's default), so the kernels' products stay integer;
     the group's float scale is either the norm ("norm": |r| * max|level| / amax)
     or a least-squares refit of the group to its assigned codebook values ("lsq": scale =
     <r, c> / <c, c>, then reassign to the nearest c * scale and refit, 3 rounds).
The stored scale also carries the 1 / sqrt(GS) of the unnormalized run-time transform (the C
hadamard kernel applies H (signs * x) to the activations): w . x = sum_g ws_g * <c_g, H s x_g>.

Lloyd-Max derivation (lloyd_max_levels): the density is tabulated on a uniform grid of 2^20 + 1
points of [-1, 1] (float64; it is smooth, and at GS >= 32 its mass lies well inside the grid's
resolution: the standard deviation is 1 / sqrt(GS) >= 0.088, about 46,000 grid steps); starting
from the 16 quantiles at (i + 1/2) / 16 of its cumulative sum, alternate (a) thresholds = the
midpoints between neighbouring levels and (b) levels = the centroid (density-weighted mean) of
each cell, with prefix sums of the density and of x times the density, until no level moves by
more than 1e-12 (a few hundred rounds). The result is symmetric; the levels scale with
1 / sqrt(GS) (GS 128: the largest about 0.238, 2.69 standard deviations; Gaussian limit 2.73).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from .q4 import Q4Tensor, fwht, pack_nibbles, padded_length

GROUP_SIZES = (32, 64, 128)
SCALES = ("norm", "lsq")
DEFAULT_SEED = 0x15AF
# Largest level magnitude of the codebooks --quant cq4 writes: span 126 <= 127, so the AVX2
# kernels take the offset trick instead of the sign trick (csrc/kernels/q4_avx2_common.h;
# +-31, span 62, would allow their fastest lookup mode but cost SmolLM2 cq4-64 mean KL 0.445 ->
# 0.500; README "4-bit weights"). -wide keeps +-127 (the sign-trick path).
NARROW_AMAX = 63


@functools.cache
def lloyd_max_levels(gs: int, n: int = 16, grid: int = 1 << 20, tol: float = 1e-12,
                     max_iter: int = 5000) -> tuple[float, ...]:
    """The n-level Lloyd-Max quantizer of density (1 - x^2)^((gs - 3) / 2) on [-1, 1],
    ascending (see the module docstring)."""
    x = np.linspace(-1.0, 1.0, grid + 1)
    f = np.clip(1.0 - x * x, 0.0, None) ** ((gs - 3) / 2.0)
    cw = np.concatenate([[0.0], np.cumsum(f)])
    cwx = np.concatenate([[0.0], np.cumsum(f * x)])
    cdf = cw[1:] / cw[-1]
    levels = x[np.searchsorted(cdf, (np.arange(n) + 0.5) / n)]
    for _ in range(max_iter):
        t = (levels[1:] + levels[:-1]) / 2
        edges = np.concatenate([[0], np.searchsorted(x, t), [grid + 1]])
        mass = cw[edges[1:]] - cw[edges[:-1]]
        new = (cwx[edges[1:]] - cwx[edges[:-1]]) / mass
        done = np.abs(new - levels).max() <= tol
        levels = new
        if done:
            break
    levels = (levels - levels[::-1]) / 2  # exact symmetry
    return tuple(float(v) for v in levels)


@functools.cache
def codebook(gs: int, amax: int = 127) -> tuple[np.ndarray, float]:
    """(int8 codebook (16,), ascending, largest magnitude amax; the float value of one int8
    step: level i ~= codebook[i] * step)."""
    lv = np.array(lloyd_max_levels(gs))
    step = np.abs(lv).max() / float(amax)
    cb = np.rint(lv / step).astype(np.int8)
    cb.setflags(write=False)
    return cb, float(step)


@functools.lru_cache(maxsize=64)
def rotation_signs(seed: int, kpad: int) -> np.ndarray:
    """The +-1 float32 signs of a padded row of kpad (the same array object for equal arguments,
    so matrices sharing an input share their run-time rotation)."""
    s = np.random.default_rng(seed).integers(0, 2, kpad).astype(np.float32) * 2 - 1
    s.setflags(write=False)
    return s


@dataclass(frozen=True)
class QuantSpec:
    """A --quant value: "q8", "auto", "f32", "cq4[-GS][-norm|-lsq][-norot]", "q4_0" or "iq4_nl"
    (Q4_0 / IQ4_NL blocks of 32 made here from float weights, rows zero-padded like CQ4's).
    "auto": each GGUF matrix by its stored type (the K-quants Q4_K / Q5_K / Q6_K and the legacy
    Q4_0 / Q4_1 / Q5_0 / Q5_1 in place, the rest as q8)."""

    kind: str  # "q8", "f32", "cq4", "q4_0", "iq4_nl", "auto"
    group_size: int | None = None  # cq4: None = the default for the model
    scale: str = "norm"
    rotate: bool = True
    gptq: bool = False  # error-compensating assignment from a calibration text (gptq_cq4)
    wide: bool = False  # levels at +-127 (span 254: the kernels' sign-trick path) instead of
    # +-NARROW_AMAX

    @property
    def amax(self) -> int:
        return 127 if self.wide else NARROW_AMAX

    @property
    def four_bit(self) -> bool:
        return self.kind in ("cq4", "q4_0", "iq4_nl")

    def __str__(self) -> str:
        if self.kind != "cq4":
            return self.kind
        return "cq4" + (f"-{self.group_size}" if self.group_size else "") + \
            ("-lsq" if self.scale == "lsq" else "") + ("" if self.rotate else "-norot") + \
            ("-gptq" if self.gptq else "") + ("-wide" if self.wide else "")


QUANT_HELP = ("q8, f32, auto (GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K matrices "
              "run in place on the file's "
              "blocks, the rest as q8; other formats: q8), "
              "cq4[-32|-64|-128][-norm|-lsq][-norot][-gptq][-wide] (4-bit codebook, "
              f"rotated; -wide: levels at +-127 instead of +-{NARROW_AMAX}; "
              "GGUF Q4_0/IQ4_NL/IQ4_XS tensors run as they are), q4_0 or iq4_nl")


def parse_quant(spec: str | QuantSpec) -> QuantSpec:
    """A QuantSpec from its string; ValueError naming the valid forms."""
    if isinstance(spec, QuantSpec):
        return spec
    s = str(spec).strip().lower()
    if s in ("q8", "f32", "q4_0", "iq4_nl", "auto"):
        return QuantSpec(s)
    m = re.fullmatch(r"cq4(?:-(\d+))?((?:-(?:norm|lsq|norot|gptq|wide))*)", s)
    if not m:
        raise ValueError(f"quant must be one of {QUANT_HELP}; got {spec!r}")
    gs = int(m.group(1)) if m.group(1) else None
    if gs is not None and gs not in GROUP_SIZES:
        raise ValueError(f"CQ4 group size must be one of {GROUP_SIZES}, got {gs}")
    opts = [o for o in m.group(2).split("-") if o]
    scale = "lsq" if "lsq" in opts else "norm"
    if "lsq" in opts and "norm" in opts:
        raise ValueError(f"{spec!r}: choose one scale rule, norm or lsq")
    return QuantSpec("cq4", gs, scale, "norot" not in opts, "gptq" in opts, "wide" in opts)


def _nearest(v: np.ndarray, cb: np.ndarray) -> np.ndarray:
    """Index of the nearest codebook value (cb ascending) for every element of v."""
    t = (cb[1:].astype(np.float64) + cb[:-1]) / 2
    return np.searchsorted(t, v).astype(np.uint8)


def fp16_scales(s: np.ndarray) -> np.ndarray:
    """Float32 scales rounded to float16 values (so a .isaf stores them as F16, losslessly, as
    GGUF stores Q4_0's) when that costs at most 2^-8 relative error on every one (each nonzero
    |s| in [2^-17, 65504]; normal float16s lose at most 2^-11); else unchanged."""
    a = np.abs(s[s != 0])
    if a.size and (a.min() < 2.0 ** -17 or a.max() >= 65504):
        return s
    return s.astype(np.float16).astype(np.float32)


@dataclass
class GGMLMatrix:
    """A GGUF matrix not yet decoded: its GGML type id, the file's bytes (a view of the map)
    and shape. `release` (optional) drops the bytes' pages once the matrix is converted, so a
    conversion holds one matrix of the source at a time."""

    type_id: int
    raw: np.ndarray  # uint8, exactly the tensor's bytes
    rows: int
    cols: int
    release: object = None  # a callable, or None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    def dequantize(self) -> np.ndarray:
        """float32 (rows, cols) by the numpy dequantizers (quant/ggml.py)."""
        from .ggml import GGML_TYPES, dequantize

        return dequantize(self.raw, GGML_TYPES[self.type_id], self.rows, self.cols)

    def done(self) -> None:
        if self.release is not None:
            self.release()


def quantize_cq4(w, group_size: int, seed: int = DEFAULT_SEED, scale: str = "norm",
                 rotate: bool = True, chunk_rows: int = 2048, amax: int = 127,
                 threads: int | None = None) -> Q4Tensor:
    """CQ4 of a float (rows, cols) matrix or a GGMLMatrix (see the module docstring), levels
    pre-scaled to largest magnitude amax (--quant specs pass NARROW_AMAX unless -wide).

    The "norm" rule on rows that need no padding runs in the C core (csrc/cq4_convert.c) on
    `threads` threads (default: settings.default_threads()), a GGUF matrix decoded a row at a
    time from its blocks: the same bits as quantize_cq4_reference, which does the rest (the
    "lsq" rule, padded rows, float64 input) and is the tests' oracle."""
    if group_size not in GROUP_SIZES:
        raise ValueError(f"CQ4 group size must be one of {GROUP_SIZES}, got {group_size}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    ggml = isinstance(w, GGMLMatrix)
    if not ggml:
        w = np.asarray(w)
    rows, cols = w.shape if ggml or w.ndim == 2 else (0, 0)
    fast = (scale == "norm" and rows > 0 and cols > 0 and cols % 32 == 0
            and cols % group_size == 0 and (ggml or w.dtype == np.float32))
    if not fast:
        return quantize_cq4_reference(w.dequantize() if ggml else w, group_size, seed, scale,
                                      rotate, chunk_rows, amax)
    from .. import _native, settings

    cb, step = codebook(group_size, amax)
    signs = rotation_signs(seed, cols) if rotate else None
    nib = np.empty((rows, cols // 2), np.uint8)
    s = np.empty((rows, cols // group_size), np.float32)
    src = w.raw if ggml else np.ascontiguousarray(w)
    try:
        _native.cq4_quantize(w.type_id if ggml else -1, src, rows, cols, group_size, signs, cb,
                             step, nib, s, threads=threads or settings.default_threads())
    except ValueError as e:
        if "NaN" in str(e):
            raise ValueError(f"cannot quantize a tensor containing NaN or infinity ({e})"
                             ) from None
        raise
    return Q4Tensor(nib, fp16_scales(s), cb.copy(), group_size, cols, signs=signs, kind="cq4",
                    seed=seed if rotate else None)


def quantize_cq4_reference(w: np.ndarray, group_size: int, seed: int = DEFAULT_SEED,
                           scale: str = "norm", rotate: bool = True, chunk_rows: int = 2048,
                           amax: int = 127) -> Q4Tensor:
    """quantize_cq4 in numpy, float64 (the definition; csrc/cq4_convert.c repeats it)."""
    if group_size not in GROUP_SIZES:
        raise ValueError(f"CQ4 group size must be one of {GROUP_SIZES}, got {group_size}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    w = np.asarray(w)
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise ValueError("cannot quantize a tensor containing NaN or infinity")
    rows, cols = w.shape
    gs, kpad = group_size, padded_length(cols, group_size)
    ng = kpad // gs
    cb, step = codebook(gs, amax)
    cbf = cb.astype(np.float64)
    signs = rotation_signs(seed, kpad) if rotate else None
    nib = np.empty((rows, kpad // 2), np.uint8)
    s_out = np.empty((rows, ng), np.float32)
    for r0 in range(0, rows, chunk_rows):
        r1 = min(rows, r0 + chunk_rows)
        x = np.zeros((r1 - r0, kpad))
        x[:, :cols] = w[r0:r1]
        if rotate:
            x = fwht(x * signs, gs) / np.sqrt(gs)
        g = x.reshape(r1 - r0, ng, gs)
        norm = np.sqrt((g * g).sum(axis=2))
        safe = np.where(norm > 0, norm, 1.0)
        idx = _nearest(g / (safe[..., None] * step), cb)
        alpha = norm * step  # the "norm" scale: |r| * (level value of one int8 step)
        if scale == "lsq":
            for _ in range(3):
                c = cbf[idx]
                cc = (c * c).sum(axis=2)
                a = np.where(cc > 0, (g * c).sum(axis=2) / np.where(cc > 0, cc, 1.0), 0.0)
                good = a > 0
                alpha = np.where(good, a, alpha)
                idx = np.where(good[..., None],
                               _nearest(g / np.where(good, alpha, 1.0)[..., None], cb), idx)
            c = cbf[idx]
            cc = (c * c).sum(axis=2)
            alpha = np.where(cc > 0, (g * c).sum(axis=2) / np.where(cc > 0, cc, 1.0), 0.0)
        if rotate and kpad > cols:  # groups holding padding: spend their spare codes
            for gi in range(cols // gs, ng):
                idx[:, gi] = _padded_group(g[:, gi], alpha[:, gi], cb, step, signs, gi, gs,
                                           cols)
        nib[r0:r1] = pack_nibbles(idx.reshape(r1 - r0, kpad))
        s_out[r0:r1] = alpha / np.sqrt(gs) if rotate else alpha
    return Q4Tensor(nib, fp16_scales(s_out), cb.copy(), gs, cols, signs=signs, kind="cq4",
                    seed=seed if rotate else None)


def _padded_group(g: np.ndarray, alpha: np.ndarray, cb: np.ndarray, step: float,
                  signs: np.ndarray, gi: int, gs: int, cols: int, damp: float = 0.01
                  ) -> np.ndarray:
    """Codes of one rotated group that holds padding (rows, gs), by sequential error feedback.

    Only the group's real coordinates survive the inverse rotation (x = R^T r, R = H diag(s) /
    sqrt(gs)), so the error that counts is e^T (R D R^T) e with D the group's real-column mask:
    R D R^T = H D H / gs (s * s = 1), of rank `real` < gs. Rounding each coordinate to its
    nearest code ignores that: with Sylvester's H a group padded to twice its length is two
    equal copies (H_2n [a, 0] = [H_n a, H_n a]), both rounded alike, so the padding's codes
    carry nothing. Assigning the coordinates in order with the error carried forward through
    that (damped) metric, as gptq_cq4 does with a calibrated one, lets the later copy correct
    the earlier (no data needed: the metric is exact). Groups without padding are untouched."""
    real = np.clip(cols - gi * gs, 0, gs)
    mask = np.zeros(gs)
    mask[:real] = 1.0
    hmat = fwht(fwht(np.diag(mask), gs).T.copy(), gs).T / gs  # H D H / gs
    hmat += damp * (real / gs) * np.eye(gs)
    u = np.linalg.cholesky(np.linalg.inv(hmat)).T  # upper: H^-1 = U^T U
    blk = g.astype(np.float64).copy()
    a = np.asarray(alpha, np.float64)
    safe = np.where(a > 0, a, 1.0)
    cbv = cb.astype(np.float64)
    idx = np.empty(blk.shape, np.uint8)
    for j in range(gs):
        q = _nearest(blk[:, j] / safe, cb)
        idx[:, j] = q
        e = (blk[:, j] - a * cbv[q]) / u[j, j]
        blk[:, j:] -= np.outer(e, u[j, j:])
    return idx


def quantize_q4_0(w: np.ndarray) -> Q4Tensor:
    """GGUF Q4_0 of a float (rows, cols) matrix by the gguf package's quantizer (ggml's
    reference rounding), rows zero-padded to a multiple of 32, held as a Q4Tensor."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    from .ggml import q4_split

    w = np.asarray(w, np.float32)
    rows, cols = w.shape
    kpad = padded_length(cols, 32)
    x = np.zeros((rows, kpad), np.float32)
    x[:, :cols] = w
    t = q4_split(quantize(x, GGMLQuantizationType.Q4_0).reshape(-1), 2, rows, kpad)
    t.cols = cols
    return t


def quantize_iq4_nl(w: np.ndarray, ntry: int = 7) -> Q4Tensor:
    """GGUF IQ4_NL of a float (rows, cols) matrix (rows zero-padded to a multiple of 32), by
    ggml's search without an importance matrix (quantize_row_iq4_nl_impl, weights x^2): per
    block of 32, the scale -max / -127 and the 2 * ntry + 1 scales (itry - 127) / max, each
    with its nearest-level assignment and least-squares scale, the one of the largest
    sum(w q x)^2 / sum(w q^2) kept, stored as fp16, then each value re-assigned to its nearest
    level at that scale; held as a Q4Tensor by the GGUF block reader (q4_split)."""
    from .ggml import KVALUES_IQ4NL, q4_split

    w = np.asarray(w, np.float32)
    rows, cols = w.shape
    kpad = padded_length(cols, 32)
    x = np.zeros((rows, kpad), np.float64)
    x[:, :cols] = w
    b = x.reshape(-1, 32)
    kv = KVALUES_IQ4NL.astype(np.float64)
    wt = b * b
    at = np.abs(b).argmax(axis=1)
    mx = b[np.arange(len(b)), at]
    ok = mx != 0
    safe = np.where(ok, mx, 1.0)

    def fit(inv):
        q = kv[_nearest(b * inv[:, None], KVALUES_IQ4NL)]
        sqx, sq2 = (wt * q * b).sum(axis=1), (wt * q * q).sum(axis=1)
        return sqx, sq2

    sqx, sq2 = fit(-kv[0] / safe)  # id = 1 / d, d = max / -127
    d = np.where(sq2 > 0, sqx / np.where(sq2 > 0, sq2, 1), 0.0)
    best = d * sqx
    for itry in range(-ntry, ntry + 1):
        sqx, sq2 = fit((itry + kv[0]) / safe)
        better = (sq2 > 0) & (sqx * sqx > best * sq2)
        d = np.where(better, sqx / np.where(sq2 > 0, sq2, 1), d)
        best = np.where(better, d * sqx, best)
    d16 = np.where(ok, d, 0.0).astype(np.float16)
    df = d16.astype(np.float64)
    idx = _nearest(b / np.where(df != 0, df, 1.0)[:, None], KVALUES_IQ4NL)
    idx = np.where((df != 0)[:, None], idx, _nearest(np.zeros_like(b), KVALUES_IQ4NL))
    blocks = np.empty((len(b), 18), np.uint8)
    blocks[:, :2] = d16.view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = idx[:, :16] | (idx[:, 16:] << 4)
    t = q4_split(blocks.reshape(-1), 20, rows, kpad)
    t.cols = cols
    return t


def quantize_4bit(w: np.ndarray, spec: QuantSpec, group_size: int, seed: int = DEFAULT_SEED
                  ) -> Q4Tensor:
    """A float matrix by a 4-bit QuantSpec (cq4 at group_size, q4_0 or iq4_nl)."""
    if spec.kind != "cq4" and isinstance(w, GGMLMatrix):
        w = w.dequantize()
    if spec.kind == "q4_0":
        return quantize_q4_0(w)
    if spec.kind == "iq4_nl":
        return quantize_iq4_nl(w)
    return quantize_cq4(w, group_size, seed, spec.scale, spec.rotate, amax=spec.amax)


DEFAULT_GROUP = 64  # CQ4's group size when the spec names none (README Quality table)


def to_4bit(loaded, spec: QuantSpec, seed: int = DEFAULT_SEED, log=None, hessians=None,
            progress=None):
    """`loaded` (a LoadedModel) with every layer matrix 4-bit by `spec`: 4-bit tensors already
    held (a GGUF file's Q4_0 / IQ4_NL / IQ4_XS, a CQ4 .isaf) are kept as they are when the spec
    is cq4, everything else (float32, a GGMLMatrix, or Q8 dequantized) is quantized, one
    matrix at a time (a GGMLMatrix's pages released after it). The classifier is held as Q8
    (the 8-bit tied classifier: its errors reach the logits directly) and the token table
    stays float32. hessians ({(name, layer): H}, runtime.calibrate) are required by a -gptq
    spec. progress(done, total) is called after each layer matrix."""
    from dataclasses import replace

    from ..types import LAYER_MATRICES, Q8Tensor
    from .q8 import as_q8

    c, w = loaded.config, loaded.weights
    gs = spec.group_size or DEFAULT_GROUP
    total = c.n_layers * len(LAYER_MATRICES)
    done = 0

    def conv(m):
        nonlocal done
        done += 1
        if log and (done % max(1, total // 20) == 0 or done == total):
            log(f"\rquantizing {spec}: {done}/{total} matrices")
        if isinstance(m, GGMLMatrix) and spec.kind == "cq4":
            return quantize_4bit(m, spec, gs, seed)
        if isinstance(m, GGMLMatrix):
            m = m.dequantize()
        if isinstance(m, Q4Tensor):
            if spec.kind == "cq4":
                return m
            m = m.dequantize()
        elif isinstance(m, Q8Tensor):
            m = m.dequantize()
        return quantize_4bit(m, spec, gs, seed)

    if spec.gptq and hessians is None:
        raise ValueError(f"{spec} needs a calibration text (isaforge.model.read_model runs it)")

    def conv_at(name, layer, m):
        if spec.gptq and not (isinstance(m, Q4Tensor) and spec.kind == "cq4"):
            nonlocal done
            done += 1
            if log:
                log(f"\rquantizing {spec}: {done}/{total} matrices")
            f = m.dequantize() if isinstance(m, (Q4Tensor, Q8Tensor, GGMLMatrix)) else m
            out = gptq_cq4(f, hessians[(name, layer)], gs, seed, spec.scale, spec.rotate,
                           amax=spec.amax)
        else:
            out = conv(m)
        if isinstance(m, GGMLMatrix):
            m.done()
        if progress:
            progress(done, total)
        return out

    mats = {n: [conv_at(n, i, m) for i, m in enumerate(getattr(w, n))] for n in LAYER_MATRICES}
    wcls = w.wcls
    if isinstance(wcls, Q4Tensor):
        wcls = wcls.dequantize()
    if not isinstance(wcls, Q8Tensor):
        cg = 32  # the classifier's rows are dim long: Q8_0's block, or the largest power of 2
        while c.dim % cg:
            cg //= 2
        wcls = as_q8(wcls, cg)
    return replace(loaded, weights=replace(w, wcls=wcls, **mats))


def _rotate_hessian(h: np.ndarray, cols: int, kpad: int, gs: int, signs) -> np.ndarray:
    """H of the padded, rotated inputs R x (R = blockdiag(H_gs diag(signs)) / sqrt(gs))."""
    m = np.zeros((kpad, kpad))
    m[:cols, :cols] = h
    if signs is None:
        return m
    s = signs.astype(np.float64)
    m = s[:, None] * m * s[None, :]
    m = fwht(m, gs)
    return fwht(m.T.copy(), gs).T / gs


def gptq_cq4(w: np.ndarray, h: np.ndarray, group_size: int, seed: int = DEFAULT_SEED,
             scale: str = "norm", rotate: bool = True, damp: float = 0.01, amax: int = 127
             ) -> Q4Tensor:
    """CQ4 with error-compensating assignment (GPTQ, Frantar et al. 2022) in the rotated
    domain: the rotated coordinates are quantized one column at a time in order, and each
    column's rounding error, weighted by the inverse of the input second moment h (cols, cols;
    runtime.calibrate), is carried into the columns not yet quantized; a group's scale (its norm
    rule, or the least-squares fit of its plain assignment) is taken from its columns as they
    stand when the group starts. damp: fraction of the mean diagonal added to h."""
    w = np.asarray(w, np.float64)
    rows, cols = w.shape
    gs, kpad = group_size, padded_length(cols, group_size)
    cb, step = codebook(gs, amax)
    cbf = cb.astype(np.float64)
    signs = rotation_signs(seed, kpad) if rotate else None
    x = np.zeros((rows, kpad))
    x[:, :cols] = w
    if rotate:
        x = fwht(x * signs, gs) / np.sqrt(gs)
    hr = _rotate_hessian(np.asarray(h, np.float64), cols, kpad, gs, signs)
    d = np.diag(hr)
    dead = d <= 0
    hr[dead, dead] = 1.0
    x[:, dead] = 0.0
    hr += damp * np.mean(np.diag(hr)) * np.eye(kpad)
    hinv = np.linalg.cholesky(np.linalg.inv(hr)).T  # upper: H^-1 = U^T U
    idx = np.zeros((rows, kpad), np.uint8)
    alpha_all = np.zeros((rows, kpad // gs))
    for g in range(kpad // gs):
        i1, i2 = g * gs, (g + 1) * gs
        blk = x[:, i1:i2].copy()
        norm = np.sqrt((blk * blk).sum(axis=1))
        alpha = norm * step
        if scale == "lsq":
            safe = np.where(alpha > 0, alpha, 1.0)
            c = cbf[_nearest(blk / safe[:, None], cb)]
            cc = (c * c).sum(axis=1)
            fit = (blk * c).sum(axis=1) / np.where(cc > 0, cc, 1)
            alpha = np.where((cc > 0) & (alpha > 0), fit, alpha)
            alpha = np.maximum(alpha, 0.0)
        safe = np.where(alpha > 0, alpha, 1.0)
        err = np.zeros((rows, gs))
        u = hinv[i1:i2, i1:i2]
        for j in range(gs):
            col = blk[:, j]
            q = _nearest(col / safe, cb)
            idx[:, i1 + j] = q
            e = (col - alpha * cbf[q]) / u[j, j]
            blk[:, j:] -= np.outer(e, u[j, j:])
            err[:, j] = e
        x[:, i2:] -= err @ hinv[i1:i2, i2:]
        alpha_all[:, g] = alpha
    s = alpha_all / np.sqrt(gs) if rotate else alpha_all
    return Q4Tensor(pack_nibbles(idx), fp16_scales(s.astype(np.float32)), cb.copy(), gs, cols,
                    signs=signs, kind="cq4", seed=seed if rotate else None)
