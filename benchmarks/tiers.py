"""Prefill and decode speed per kernel tier and thread count, on a random-weight Q8 model at
SmolLM2-135M shapes (the real model arrives with the GGUF issue).

    python benchmarks/tiers.py [--prompt 64] [--decode 32] [--reps 3] [-o results.json]

Configurations run interleaved (tier A, tier B, ..., then again), the first round is a
warm-up and is discarded; prefill (GEMM over the prompt) and decode (GEMV, one token per
step) are timed and reported separately, as mean and min over the kept rounds."""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import isaforge
from isaforge.engine import Engine, select_kernel
from isaforge.synthetic import SMOLLM2_135M, random_q8_model


def run_once(engine: Engine, prompt: list[int], n_decode: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    logits = engine.prefill(prompt, 0)
    t1 = time.perf_counter()
    tok = int(logits.argmax())
    for i in range(n_decode):
        tok = int(engine.forward(tok, len(prompt) + i).argmax())
    t2 = time.perf_counter()
    return len(prompt) / (t1 - t0), n_decode / (t2 - t1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tiers", default="all")
    ap.add_argument("-o", "--output", default=None)
    a = ap.parse_args()
    info = isaforge.runtime_info()
    tiers = [t["name"] for t in info["tiers"] if t["supported"]]
    if a.tiers != "all":
        tiers = a.tiers.split(",")
    threads = [int(t) for t in a.threads.split(",")]
    model = random_q8_model(SMOLLM2_135M, group_size=32, seq_len=a.prompt + a.decode)
    prompt = [1 + (i * 7919) % 49151 for i in range(a.prompt)]
    engines = {}
    for tier in tiers:
        select_kernel(tier)
        for n in threads:
            engines[(tier, n)] = Engine(model, threads=n, ubatch=a.prompt)
    select_kernel(None)
    samples: dict = {k: [] for k in engines}
    for rnd in range(a.reps + 1):  # round 0 is the warm-up
        for key, eng in engines.items():
            r = run_once(eng, prompt, a.decode)
            if rnd:
                samples[key].append(r)
    rows = []
    for (tier, n), s in samples.items():
        pp, tg = [x[0] for x in s], [x[1] for x in s]
        rows.append({"tier": tier, "threads": n, "prefill_tok_s": pp, "decode_tok_s": tg,
                     "prefill_mean": statistics.mean(pp), "decode_mean": statistics.mean(tg)})
    print(f"machine: {info['cpu']}, features {info['features']}; {platform.python_version()}")
    print(f"model: random Q8 (gs 32) at SmolLM2-135M shapes; prompt {a.prompt} tokens, "
          f"decode {a.decode} tokens, {a.reps} rounds after 1 warm-up, interleaved\n")
    print("| tier | threads | prefill tok/s (mean, min..max) | decode tok/s (mean, min..max) |")
    print("| --- | ---: | ---: | ---: |")
    for r in rows:
        pp, tg = r["prefill_tok_s"], r["decode_tok_s"]
        print(f"| {r['tier']} | {r['threads']} | {r['prefill_mean']:.1f} ({min(pp):.1f}.."
              f"{max(pp):.1f}) | {r['decode_mean']:.2f} ({min(tg):.2f}..{max(tg):.2f}) |")
    if a.output:
        with open(a.output, "w") as f:
            json.dump({"machine": info, "args": vars(a), "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
