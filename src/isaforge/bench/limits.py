"""Measured limits: read-only memory bandwidth and peak int8 throughput per tier, and the
ceilings they put on decode (bandwidth / weight bytes per token) and prefill (peak / ops)."""

from __future__ import annotations

from .machine import llc_bytes

PEAK_ITERS = {"scalar": 20_000, "amx": 200_000}  # the scalar loop does 256 MACs per iteration
_MIX_ITERS = {"avx2": 20_000}  # tiers with a kernel-mix probe; 36864 MACs per iteration


def stream_bytes() -> int:
    """Buffer for the bandwidth probe: 4x the last-level cache, at least 128 MiB."""
    return max(4 * (llc_bytes() or 32 << 20), 128 << 20)


def measure_limits(tiers: list[str], thread_counts: list[int], reps: int = 3,
                   log=lambda s: None) -> dict:
    """{"bandwidth": [{threads, gbps}], "peak_int8": [{tier, threads, gops, status, reason}],
    "mix_int8": [the same, for the tiers whose GEMM has a kernel-mix probe], "stream_bytes": n}.
    Each figure is the best of `reps` (a limit is what the machine can reach, so the best run
    is the estimate)."""
    from .. import _bench

    nbytes = stream_bytes()
    bw = []
    for t in sorted(set(thread_counts)):
        log(f"limits: read bandwidth, {t} thread(s), {nbytes >> 20} MiB x {reps}")
        bw.append({"threads": t, "gbps": round(_bench.stream_read(nbytes, t, reps), 3)})
    peaks = []
    for tier in tiers:
        for t in sorted(set(thread_counts)):
            row = {"tier": tier, "threads": t, "gops": None, "status": "ok", "reason": None}
            try:
                iters = PEAK_ITERS.get(tier, 2_000_000)
                row["gops"] = round(max(_bench.peak_int8(tier, t, iters) for _ in range(reps)), 3)
            except (RuntimeError, ValueError) as e:
                row.update(status="skipped", reason=str(e))
            peaks.append(row)
    mixes = []  # the GEMM's own inner loop from L1: the ceiling of its instruction mix
    for tier in (t for t in tiers if t in _MIX_ITERS):
        for t in sorted(set(thread_counts)):
            row = {"tier": tier, "threads": t, "gops": None, "status": "ok", "reason": None}
            try:
                g = max(_bench.mix_int8(tier, t, _MIX_ITERS[tier]) for _ in range(reps))
                row["gops"] = round(g, 3)
            except (RuntimeError, ValueError) as e:
                row.update(status="skipped", reason=str(e))
            mixes.append(row)
    log("limits: done")
    return {"stream_bytes": nbytes, "bandwidth": bw, "peak_int8": peaks, "mix_int8": mixes}


def bandwidth_at(limits: dict | None, threads: int) -> float | None:
    """Measured GB/s at `threads` (or the closest measured count below it)."""
    if not limits:
        return None
    rows = sorted(limits.get("bandwidth", []), key=lambda r: r["threads"])
    best = None
    for r in rows:
        if r["threads"] <= threads:
            best = r["gbps"]
    return best if best is not None else (rows[0]["gbps"] if rows else None)


def peak_at(limits: dict | None, tier: str, threads: int, kind: str = "peak_int8"
            ) -> float | None:
    """Measured peak int8 GOP/s of `tier` at `threads` (kind "mix_int8": its GEMM's
    instruction-mix ceiling), or None."""
    for r in (limits or {}).get(kind, []):
        if r["tier"] == tier and r["threads"] == threads and r["gops"]:
            return r["gops"]
    return None
