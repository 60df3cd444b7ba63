"""Kernel level: GOP/s per tier per op at a model's real shapes, timed inside C (monotonic
clock around a batch of calls), each tier checked bit for bit against scalar before it is
timed (a disagreeing tier is reported as failed and never timed), tiers alternated, the
warm-up cycle discarded; best and median with min-max. Cold mode rotates over weight copies
totalling more than twice the last-level cache, so GEMV reads its weights from memory."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from .limits import PEAK_ITERS, bandwidth_at, peak_at
from .machine import llc_bytes
from .schedule import run_alternating

SHAPE_MODELS = ("smollm2-135m",)
Q8_OPS, Q4_OPS = ("q8_gemv", "q8_gemm", "quantize"), ("q4_gemv", "q4_gemm")
OPS = Q8_OPS + Q4_OPS
# The kernels on GGUF blocks as stored: K-quants Q4_K / Q5_K / Q6_K (bytes per 256 values, K8
# activations, gs 256; GEMVs and GEMMs) and the legacy Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 ones
# (bytes per 32 values, L8 activations, gs 32); asked for by name (--ops), at the model's shapes.
KQ_BLOCK_BYTES = {"q4k_gemv": 144, "q5k_gemv": 176, "q6k_gemv": 210,
                  "q4k_gemm": 144, "q5k_gemm": 176, "q6k_gemm": 210, "q40_gemv": 18,
                  "q41_gemv": 20, "q50_gemv": 22, "q51_gemv": 24, "q40_gemm": 18,
                  "q41_gemm": 20, "q50_gemm": 22, "q51_gemm": 24, "q80_gemv": 34,
                  "q80_gemm": 34}
# ... and the IQ4 GEMVs: IQ4_NL per 32 values (L8, gs 32), IQ4_XS per 256 (K8, gs 256)
KQ_BLOCK_BYTES.update({"iq4nl_gemv": 18, "iq4xs_gemv": 136})
KQ_OPS = tuple(KQ_BLOCK_BYTES)
KQ_VALUES = {op: 32 if op.startswith(("q40", "q41", "q50", "q51", "q80", "iq4nl")) else 256
             for op in KQ_OPS}
# The 4-bit formats people run, each with its own group size and codebook: CQ4 as
# `--quant cq4` writes it (GS 64, Lloyd-Max levels at +-63) and GGUF Q4_0 (GS 32, -8..7).
Q4_FORMATS = ("cq4", "q4_0")


def q4_format(fmt: str) -> tuple[int, np.ndarray]:
    """(group size, int8 codebook (16,)) of a 4-bit format of Q4_FORMATS."""
    if fmt == "cq4":
        from ..quant.cq4 import DEFAULT_GROUP, NARROW_AMAX, codebook

        return DEFAULT_GROUP, codebook(DEFAULT_GROUP, NARROW_AMAX)[0]
    if fmt == "q4_0":
        return 32, np.arange(-8, 8, dtype=np.int8)
    raise ValueError(f"unknown 4-bit format {fmt!r} ({', '.join(Q4_FORMATS)})")


def codebook_mode(cb) -> str:
    """How the AVX2 4-bit kernels form the products for codebook cb (q4c_mode in
    csrc/kernels/q4_avx2_common.h): sign (span > 127), linear (cb[i] = cb[0] + i: no lookup),
    offset2 (span <= 63: int16 pre-adds) or offset (span <= 127)."""
    c = [int(v) for v in cb]
    span = max(c) - min(c)
    if span > 127:
        return "sign"
    if all(v == c[0] + i for i, v in enumerate(c)):
        return "linear"
    return "offset2" if span <= 63 else "offset"


@dataclass(frozen=True)
class Shape:
    op: str  # q8_gemv, q8_gemm, quantize, q4_gemv, q4_gemm
    name: str  # which weight(s): "wq,wo", ...
    M: int
    N: int
    K: int  # 4-bit ops: padded to a multiple of the format's group size, as at load
    fmt: str | None = None  # 4-bit ops: the format (Q4_FORMATS)

    @property
    def ops(self) -> int:
        """Operations per call: 2 per multiply-add (GEMV/GEMM); 1 per element (quantize)."""
        return self.M * self.K if self.op == "quantize" else 2 * self.M * self.N * self.K

    def bytes(self, gs: int) -> int:
        """Bytes a call must move at least: weights + activations (+ output)."""
        if self.op == "quantize":
            return self.M * self.K * 5 + 4 * self.M * (self.K // gs)
        if self.op in KQ_OPS:  # the blocks; activations: int8, a float per block, int16 per 16
            qb = KQ_VALUES[self.op]
            return (self.N * self.K // qb * KQ_BLOCK_BYTES[self.op] + self.M * self.K
                    + 4 * self.M * (self.K // qb) + 2 * self.M * (self.K // 16)
                    + 4 * self.M * self.N)
        w = self.N * self.K // 2 if self.op in Q4_OPS else self.N * self.K
        return (w + 4 * self.N * (self.K // gs) + self.M * self.K
                + 4 * self.M * (self.K // gs) + 4 * self.M * self.N)


def model_shapes(spec: str, ms: list[int]) -> list[Shape]:
    """The distinct matmul shapes of a model (name from SHAPE_MODELS or a model file)."""
    if spec == "smollm2-135m":
        from ..synthetic import SMOLLM2_135M as c
    else:
        from ..model import read_model

        c = read_model(spec).config
    mats = {}
    for name, (n, k) in (("wq", (c.dim, c.dim)), ("wk", (c.kv_dim, c.dim)),
                         ("wv", (c.kv_dim, c.dim)), ("wo", (c.dim, c.dim)),
                         ("w1", (c.hidden_dim, c.dim)), ("w2", (c.dim, c.hidden_dim)),
                         ("w3", (c.hidden_dim, c.dim))):
        mats.setdefault((n, k), []).append(name)
    shapes = [Shape("q8_gemv", ",".join(v), 1, n, k) for (n, k), v in mats.items()]
    shapes.append(Shape("q8_gemv", "wcls", 1, c.vocab_size, c.dim))
    for m in ms:
        shapes += [Shape("q8_gemm", ",".join(v), m, n, k) for (n, k), v in mats.items()]
    shapes += [Shape("quantize", "x", 1, 0, k) for k in sorted({c.dim, c.hidden_dim})]
    for fmt in Q4_FORMATS:
        g = q4_format(fmt)[0]

        def pad(k: int, g: int = g) -> int:  # rows zero-padded to whole groups, as at load
            return -(-k // g) * g

        shapes += [Shape("q4_gemv", ",".join(v), 1, n, pad(k), fmt) for (n, k), v in mats.items()]
        shapes.append(Shape("q4_gemv", "wcls", 1, c.vocab_size, pad(c.dim), fmt))
        # the GEMM at M = 1 over its packed copy: a decode_packed tier's decode path
        for m in ([1] if 1 not in ms else []) + list(ms):
            shapes += [Shape("q4_gemm", ",".join(v), m, n, pad(k), fmt)
                       for (n, k), v in mats.items()]
    return shapes


def kquant_shapes(spec: str, ms: list[int] = ()) -> list[Shape]:
    """The block-type shapes of a model: each distinct matrix shape (rows whose length is a
    multiple of the type's block) and the classifier for the GEMVs, and each matrix shape at
    every M of ms for the GEMMs (M activation rows in one call), at each block type."""
    mats = [s for s in model_shapes(spec, []) if s.op == "q8_gemv"]
    return ([Shape(op, s.name, 1, s.N, s.K) for op in KQ_OPS if op.endswith("_gemv")
             for s in mats if s.K % KQ_VALUES[op] == 0]
            + [Shape(op, s.name, m, s.N, s.K) for op in KQ_OPS if op.endswith("_gemm")
               for m in ms for s in mats if s.name != "wcls" and s.K % KQ_VALUES[op] == 0])


def _copies(weight_bytes: int, cold: bool) -> int:
    if not cold or weight_bytes == 0:
        return 1
    llc = llc_bytes() or (32 << 20)
    return max(2, math.ceil(2 * llc / weight_bytes) + 1)


def bench_kernels(shapes: list[Shape], tiers: list[str], gs: int = 32, reps: int = 5,
                  cold: bool = False, min_time: float = 0.02, limits: dict | None = None,
                  log=lambda s: None) -> list[dict]:
    """One row per (shape, tier): status ok (samples, GOP/s) or failed (the gate's reason).
    Hot: every (shape, tier) pair that passed the gate alternates with all the others, one
    sample each per cycle, so a period of contention on a shared machine lands on every shape
    alike instead of on whichever shape was being measured (measured one shape after another,
    the same AVX2 GEMM read 82-109 GOP/s across SmolLM2's four M = 512 shapes; interleaved in
    one process the four ran alike). Cold: one shape at a time (each shape's weight copies
    total more than twice the last-level cache), its tiers alternating."""
    from .. import _bench

    rows, pending = [], []  # pending: (row, case, iters) to sample
    for sh in shapes:
        g, cb, extra = gs, None, {}
        if sh.op in KQ_OPS:
            g = KQ_VALUES[sh.op]
        if sh.op in Q4_OPS:  # the format's own group size and codebook
            g, cbv = q4_format(sh.fmt)
            cb = cbv.astype("int8").tobytes()
            extra = {"format": sh.fmt, "codebook_mode": codebook_mode(cbv)}
        case = _bench.Case(sh.op, sh.M, sh.N, sh.K, g, 1, cb)
        copies = _copies(case.weight_bytes, cold)
        if copies > 1:
            case = _bench.Case(sh.op, sh.M, sh.N, sh.K, g, copies, cb)
        ok_tiers, shape_rows = [], {}
        for t in tiers:
            row = {"backend": "isaforge", "tier": t, "op": sh.op, "weights": sh.name, "M": sh.M,
                   "N": sh.N, "K": sh.K, "gs": g, **extra, "cold": cold, "copies": copies,
                   "ops_per_call": sh.ops, "bytes_per_call": sh.bytes(g), "status": "ok",
                   "reason": None, "iters": 0, "samples_s": []}
            why = case.check(t)  # the gate: before any timing
            if why is not None:
                row.update(status="failed", reason=f"disagrees with scalar: {why}")
            else:
                ok_tiers.append(t)
            shape_rows[t] = row
        iters = {}
        for t in ok_tiers:  # calibrate: about min_time per sample
            one = max(case.time(t, 1), 1e-7)
            iters[t] = max(1, int(min_time / one))
        fmt = "" if sh.fmt is None else f" {sh.fmt}"
        log(f"kernels: {sh.op}{fmt} {sh.name} M={sh.M} N={sh.N} K={sh.K}: "
            f"{', '.join(ok_tiers) or 'no tier passed the gate'}")
        rows += [shape_rows[t] for t in tiers]
        pending += [(shape_rows[t], case, t, iters[t]) for t in ok_tiers]
        if cold:  # sample this shape now (its copies are freed before the next shape's)
            _sample(pending, reps, limits)
            pending = []
    if not cold and limits is not None:  # the peak probe, sampled in the same alternation
        probe = sorted({p[2] for p in pending if p[0]["op"] != "quantize"})
        pending += [(None, None, t, PEAK_ITERS.get(t, 2_000_000)) for t in probe
                    if peak_at(limits, t, 1)]
    _sample(pending, reps, limits)
    return rows


def _sample(pending: list, reps: int, limits: dict | None) -> None:
    """Alternate over the (row, case, tier, iters) entries and finish their rows. An entry
    with no row samples the tier's peak int8 probe (GOP/s, one thread) in the same cycles:
    each GEMV/GEMM row of that tier then gets it as peak_same_run and its fractions
    (median / median, best / best), so contention that moves the kernel's samples moves the
    peak's too (the limits' peak is the best of 3 samples taken once, before any kernel)."""
    from .. import _bench

    def one_sample(p) -> float:
        row, case, t, iters = p
        if row is None:
            return _bench.peak_int8(t, 1, iters)
        return case.time(t, iters) / iters

    samples = run_alternating(pending, reps, one_sample)
    peaks = {p[2]: sorted(s) for p, s in zip(pending, samples, strict=True) if p[0] is None}
    for (row, _, _, iters), s in zip(pending, samples, strict=True):
        if row is None:
            continue
        _finish(row, s, iters, limits)
        pk = peaks.get(row["tier"])
        if pk and row["status"] == "ok" and row["op"] != "quantize":
            med = statistics.median(pk)
            row["peak_same_run"] = {"median_gops": round(med, 3), "best_gops": round(pk[-1], 3),
                                    "samples": len(pk)}
            row["fraction_of_peak_same_run"] = round(row["median_gops"] / med, 4)
            row["best_fraction_of_peak_same_run"] = round(row["best_gops"] / pk[-1], 4)


def _finish(row: dict, samples: list[float], iters: int, limits: dict | None) -> None:
    ops = row["ops_per_call"]
    g = sorted(ops / s / 1e9 for s in samples)
    row.update(iters=iters, samples_s=[float(f"{s:.6g}") for s in samples],
               best_gops=round(g[-1], 3), median_gops=round(statistics.median(g), 3),
               min_gops=round(g[0], 3), max_gops=round(g[-1], 3))
    add_limit(row, limits)


def add_limit(row: dict, limits: dict | None) -> None:
    """Attainable GOP/s on one thread: min(peak int8 of the tier, intensity x bandwidth) for a
    cold GEMV/GEMM; the tier's peak when hot; bandwidth for quantize. Also the bytes moved
    per second at the median (median_gbps), for a GEMV/GEMM the fraction of the tier's peak
    int8 rate, and when cold the fraction of the stream probe's read bandwidth."""
    if row.get("status") != "ok" or "median_gops" not in row:
        return
    bw = bandwidth_at(limits, 1)
    ai = row["ops_per_call"] / row["bytes_per_call"]
    row["median_gbps"] = round(row["median_gops"] / ai, 3)
    if row["op"] != "quantize":
        peak = peak_at(limits, row["tier"], 1)
        row["fraction_of_peak"] = round(row["median_gops"] / peak, 4) if peak else None
        if row["cold"]:
            row["fraction_of_stream"] = round(row["median_gbps"] / bw, 4) if bw else None
    limit, kind = None, None
    if row["op"] == "quantize":
        if bw:
            limit, kind = ai * bw, "bandwidth"
    else:
        peak = peak_at(limits, row["tier"], 1)
        if peak:
            limit, kind = peak, "peak_int8"
        if row["cold"] and bw and (limit is None or ai * bw < limit):
            limit, kind = ai * bw, "bandwidth"
    mix = peak_at(limits, row["tier"], 1, "mix_int8") if row["op"] == "q8_gemm" else None
    if mix:  # the ceiling of the GEMM's own inner loop (reported beside the limit)
        row["mix_gops"] = round(mix, 3)
        row["fraction_of_mix"] = round(row["median_gops"] / mix, 4)
    row["limit_gops"] = round(limit, 3) if limit else None
    row["limit_kind"] = kind
    row["fraction_of_limit"] = round(row["median_gops"] / limit, 4) if limit else None
