"""One run, alternating: isaforge's weight formats against each other and against llama.cpp
(tg128 of CQ4 and Q8 from one GGUF, and of Q4_0 against llama.cpp on the same Q4_0 file).

    python3 benchmarks/quant_ab.py --model SmolLM2...Q4_1.gguf --quant q8,cq4 \
        --peer-file SmolLM2...Q4_0.gguf --peer-quant q4_0 -n 128 -r 5 --threads 1,2 \
        --save

Each `--quant` loads `--model` that way, each `--isaf` file runs as it is stored;
each `--peer-file` is also loaded by isaforge with each `--peer-quant` (the file's own nibbles:
the same bytes as llama.cpp) and run by llama.cpp
(llama-cpp-python, when installed). Every configuration (engine x threads) runs tg<N> once per
cycle, cycles alternate, the first is a discarded warm-up; printed: mean ± stddev t/s and the
ratios of the means. `isaforge bench`'s timing (Engine.forward per token from an empty
context; llama.cpp through bench.peers.LlamaCppRunner)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    from isaforge.bench.e2e import bench_tokens
    from isaforge.bench.machine import machine_info, provenance, save_path, script_command
    from isaforge.bench.schedule import mean_std, run_alternating
    from isaforge.model import read_model
    from isaforge.runtime.engine import Engine

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--quant", default="q8,cq4")
    ap.add_argument("--peer-file", action="append", default=[],
                    help="a GGUF that llama.cpp runs too; repeatable (e.g. a pure Q4_0 file "
                    "and one with llama.cpp's default output type)")
    ap.add_argument("--peer-quant", default="q4_0",
                    help="how isaforge holds --peer-file ('' to skip isaforge on it)")
    ap.add_argument("--isaf", action="append", default=[],
                    help="an .isaf file run as it is (e.g. converted with --classifier 4bit); "
                    "repeatable")
    ap.add_argument("-n", type=int, default=128, help="decode steps (tg<N>)")
    ap.add_argument("-r", type=int, default=5, help="repetitions after one warm-up cycle")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--save", nargs="?", const="", metavar="FILE.json",
                    help="also write the JSON ({machine} in FILE: this machine's slug; bare: "
                    "benchmarks/results/<machine>/quant.json)")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    a = ap.parse_args(argv)
    out = save_path(a.save, "quant")
    threads = [int(t) for t in a.threads.split(",")]
    for f in [a.model] + a.peer_file + a.isaf:
        if not os.path.isfile(f):
            ap.error(f"{f}: no such file")
    machine = machine_info()
    runs = []  # (label, threads, runner)
    sources = [(a.model, q) for q in a.quant.split(",") if q]
    if a.peer_quant:
        sources += [(f, q) for f in a.peer_file for q in a.peer_quant.split(",")]
    sources += [(f, None) for f in a.isaf]
    for path, q in sources:
        loaded = read_model(path, q) if q else read_model(path)
        label = f"isaforge {q or 'as stored'} ({os.path.basename(path)})"
        for t in threads:
            runs.append((label, t, Engine(loaded, threads=t)))
    vocab = loaded.config.vocab_size
    if a.peer_file:
        try:
            from isaforge.bench.peers import LlamaCppRunner

            for f in a.peer_file:
                for t in threads:
                    runs.append((f"llama.cpp ({os.path.basename(f)})", t,
                                 LlamaCppRunner(f, t, a.n + 8, 8)))
        except ImportError as e:
            print(f"quant_ab: llama.cpp skipped: {e}", file=sys.stderr)
    toks = bench_tokens(a.n, vocab, seed=2)

    def measure(i: int) -> float:
        label, _, r = runs[i]
        if label.startswith("llama.cpp"):
            return a.n / r.tg(toks)
        t0 = time.perf_counter()
        for pos, tk in enumerate(toks):
            r.forward(tk, pos)
        return a.n / (time.perf_counter() - t0)

    load0 = os.getloadavg()
    samples = run_alternating(list(range(len(runs))), a.r, measure, warmup=1)
    rows = []
    for (label, t, _), s in zip(runs, samples, strict=True):
        m, sd = mean_std(s)
        rows.append({"engine": label, "threads": t, "test": f"tg{a.n}", "mean_tps": round(m, 3),
                     "stddev_tps": round(sd, 3), "samples_tps": [round(x, 3) for x in s]})
    print(f"| engine | threads | tg{a.n} t/s |\n| --- | ---: | ---: |")
    for r in rows:
        print(f"| {r['engine']} | {r['threads']} | {r['mean_tps']:.2f} ± {r['stddev_tps']:.2f} |")
    by = {(r["engine"], r["threads"]): r["mean_tps"] for r in rows}
    names = list(dict.fromkeys(r["engine"] for r in rows))
    ratios = []
    for t in threads:
        for i, x in enumerate(names):
            for y in names[i + 1:]:
                if by.get((x, t)) and by.get((y, t)):
                    ratios.append({"threads": t, "a": x, "b": y,
                                   "a_over_b": round(by[(x, t)] / by[(y, t)], 3)})
    for q in ratios:
        print(f"{q['threads']} thread(s): {q['a']} / {q['b']} = {q['a_over_b']:.3f}x")
    command = script_command("benchmarks/quant_ab.py", sys.argv[1:] if argv is None else argv)
    doc = {"provenance": provenance(command, a.conditions), "command": command,
           "machine": {k: machine.get(k) for k in ("cpu", "logical_cores", "features")},
           "loadavg_start": [round(x, 2) for x in load0],
           "loadavg_end": [round(x, 2) for x in os.getloadavg()],
           "reps": a.r, "warmup_cycles": 1, "order": "alternating", "results": rows,
           "ratios": ratios}
    if out is not None:
        out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
