"""isaforge against llama.cpp at the model sizes people run: random-weight GGUFs at the shapes
of Llama-3.2-1B, Llama-3.2-3B and Llama-3.1-8B, quantized by llama.cpp's own quantizer to
Q4_K_M, Q4_0 and Q8_0 (its default mixture, not pure), then measured on the same file.

    python3 benchmarks/scale.py [--sizes 1b,3b,8b] [--types q4_k_m,q4_0,q8_0] [--reps 3]
                                [--threads 1,2] [--only-files] [--cold] [--skip-depth]
                                [--only-start] [--report-only]

At 135M parameters per-token overheads dominate, so a model that small says little about the
files people run; these shapes put the weights' bytes and the loader's work in front.

Files. Each model is written once as F16 with the `gguf` package (normal weights, std 0.02,
norms 1.0, fixed seed; the tokenizer and its metadata are SmolLM2's 49,152-token vocabulary,
copied from the default model's file, so the classifier is smaller than Llama 3's 128,256
rows), tensor by tensor (the 8B F16 never sits in memory), quantized with
`llama_cpp.llama_model_quantize` and cached in `<isaforge cache>/scale/`. The F16 source is
deleted after quantizing unless --keep-f16. Disk: F16 2.2 / 5.9 / 14.8 GB at 1B / 3B / 8B
(only while quantizing), then Q4_K_M + Q4_0 + Q8_0 about 2.4 / 6.7 / 16.5 GB.

Measurements, per size x type, alternating isaforge / llama.cpp (llama-cpp-python), every
measurement a fresh process:
- start-up: wall time from process start to the first generated token's byte on stdout, the
  way a user runs each (`isaforge run FILE "Hello" -n 16 -t 0 --ctx 4096`; llama-cpp-python's
  `Llama(n_ctx=4096)` and a streamed chat completion), warm page cache; with --cold also after
  dropping the page cache (root only; skipped with the reason otherwise). Peak RSS: the
  child's ru_maxrss (os.wait4).
- speed: pp512 and tg128 from an empty context (llama-bench's conventions, random tokens), one
  process per engine and thread count, n_ctx 4352 for both; at the largest thread count also
  tg128 after a 4,096-token context (llama-bench `-d 4096`) unless --skip-depth.
- decode as a fraction of the read bandwidth: weight bytes each engine reads per token (its
  own: isaforge holds non-Q8 GGUF tensors as Q8) x tokens/s over the stream probe's GB/s,
  the probe sampled between the runs (isaforge.bench.limits' buffer size).

Writes benchmarks/results/<machine>/scale.json (rows of other size x type pairs already there
are kept) and prints a markdown table. A measured process is stopped if MemAvailable falls
below --min-available-mib (default 1 GiB; the machine may be shared); the row records it
with the peak RSS it had reached.

Parts, one job each: scale_files.py (shapes, shared settings, making and caching the files),
scale_measure.py (child processes, the start-up and speed runs, a row and its summary),
scale_report.py (the results document and its table); this file is the command.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its parts, when imported by path

from scale_files import (  # noqa: E402
    DEPTH,
    FTYPES,
    MIN_AVAILABLE_MIB,
    SHAPES,
    Shape,
    file_path,
    log,
    make_files,
    write_f16,
)
from scale_measure import (  # noqa: E402
    BANDWIDTH_METHOD,
    _speed,
    _start_llama,
    measure,
    run_child,
    summarize,
)
from scale_report import results_path, save, table  # noqa: E402

# the parts tests/test_scale_bench.py reaches through this script
__all__ = ["SHAPES", "Shape", "main", "run_child", "summarize", "table", "write_f16"]



def _list(choices):
    def parse(text: str) -> list[str]:
        vals = [x.strip().lower() for x in text.split(",") if x.strip()]
        bad = [v for v in vals if v not in choices]
        if not vals or bad:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of "
                                             f"{', '.join(choices)}, got {text!r}")
        return list(dict.fromkeys(vals))
    return parse


def _ints(text: str) -> list[int]:
    try:
        vals = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers, got {text!r}") from None
    if not vals or vals[0] < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return vals


def main(argv: list[str]) -> int:
    if argv[:1] == ["_speed"]:
        return _speed(json.loads(argv[1]))
    if argv[:1] == ["_start_llama"]:
        return _start_llama(json.loads(argv[1]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=_list(list(SHAPES)), default=list(SHAPES))
    ap.add_argument("--types", type=_list(list(FTYPES)), default=list(FTYPES))
    ap.add_argument("--reps", type=int, default=3, help="processes per engine and test")
    ap.add_argument("--threads", type=_ints, default=[1, 2])
    ap.add_argument("-p", dest="n_prompt", type=int, default=512)
    ap.add_argument("-n", dest="n_gen", type=int, default=128)
    ap.add_argument("--quant", default="auto", help="isaforge's --quant (default auto)")
    ap.add_argument("--only-files", action="store_true", help="make the files, measure nothing")
    ap.add_argument("--keep-f16", action="store_true", help="keep the F16 source files")
    ap.add_argument("--cold", action="store_true",
                    help="also measure start-up after dropping the page cache (root)")
    ap.add_argument("--skip-depth", action="store_true", help=f"no tg after {DEPTH} tokens")
    ap.add_argument("--only-start", action="store_true",
                    help="measure start-up and peak RSS only (no pp / tg)")
    ap.add_argument("--omp-wait-policy", choices=("passive", "active", "default"),
                    default="passive", help="OMP_WAIT_POLICY of llama.cpp's processes "
                    "(default passive; default: leave it unset)")
    ap.add_argument("--child-timeout", type=float, default=3600.0)
    ap.add_argument("--min-available-mib", type=float, default=MIN_AVAILABLE_MIB,
                    help="stop a measured process when MemAvailable falls below this (MiB; "
                    f"default {MIN_AVAILABLE_MIB}): the machine may be shared")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    ap.add_argument("--out", default=None, help="results file (default benchmarks/results/"
                    "<machine>/scale.json; a bare file name goes into that folder)")
    ap.add_argument("--report-only", action="store_true",
                    help="measure nothing: recompute the summaries of the results file and "
                    "print its table")
    a = ap.parse_args(argv)
    if a.reps < 1:
        ap.error("--reps must be >= 1")
    if a.report_only:
        doc = json.loads(results_path(a).read_text())
        for row in doc["rows"]:
            row["summary"] = summarize(row)
        doc["method"]["bandwidth"] = BANDWIDTH_METHOD
        results_path(a).write_text(json.dumps(doc, indent=1) + "\n")
        sys.stdout.write(table(doc))
        return 0
    for size in a.sizes:
        make_files(size, a.types, a.keep_f16)
    if a.only_files:
        for size in a.sizes:
            for t in a.types:
                p = file_path(size, t)
                print(f"{p}  {p.stat().st_size / 1e9:.2f} GB")
        return 0
    rows = []
    doc = None
    for size in a.sizes:
        for t in a.types:
            rows.append(measure(size, t, a))
            doc = save(rows, a, argv)
            log(f"saved {results_path(a)}")
    sys.stdout.write(table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
