"""Load time of SmolLM2-135M-Instruct from its GGUF vs from a .isaf converted from it.

    python benchmarks/isaf_load.py [--runs 7] [--model PATH.gguf]

Converts the GGUF once into a temporary directory, then alternates loads (GGUF, isaf, GGUF,
...) and prints the median and min-max of each phase: `read` (parse + map + dequantize /
requantize: formats only), `load` (isaforge.load: read, tokenizer, engine with its prefill
packing). Warm page cache: both files are read once before timing (the first runs are
discarded), so this measures the work done per load, not the disk.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import isaforge
from isaforge.converter import convert
from isaforge.model import read_model
from isaforge.settings import default_model_path


def timed(fn) -> float:
    t = time.perf_counter()
    obj = fn()
    dt = time.perf_counter() - t
    del obj
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--model", type=Path, default=None)
    a = ap.parse_args()
    src = a.model or default_model_path()
    if not src.is_file():
        raise SystemExit(f"{src} not found; run `isaforge pull` first")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "model.isaf"
        t0 = time.perf_counter()
        s = convert(src, out)
        print(f"converted {src.name} -> .isaf in {time.perf_counter() - t0:.2f} s: "
              f"{s.scheme} group {s.group_size}, {s.n_tensors} tensors, "
              f"{src.stat().st_size / 1e6:.1f} MB -> {s.n_bytes / 1e6:.1f} MB")
        paths = {"gguf": src, "isaf": out}
        phases = {"read": lambda p: read_model(p), "load": lambda p: isaforge.load(p)}
        res = {(ph, k): [] for ph in phases for k in paths}
        for ph, fn in phases.items():
            for p in paths.values():  # warm-up, discarded
                timed(lambda fn=fn, p=p: fn(p))
            for _ in range(a.runs):
                for k, p in paths.items():
                    res[(ph, k)].append(timed(lambda fn=fn, p=p: fn(p)))
    print(f"\n{'phase':<6} {'format':<6} {'median s':>9} {'min s':>8} {'max s':>8}"
          f"  (runs: {a.runs})")
    for (ph, k), ts in res.items():
        print(f"{ph:<6} {k:<6} {statistics.median(ts):9.3f} {min(ts):8.3f} {max(ts):8.3f}")
    for ph in phases:
        g, i = (statistics.median(res[(ph, k)]) for k in paths)
        print(f"{ph}: .isaf is {g / i:.1f}x faster than GGUF")


if __name__ == "__main__":
    main()
