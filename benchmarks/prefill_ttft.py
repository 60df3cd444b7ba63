"""Time to first token: a prompt prefilled token by token vs in chunks, per kernel tier, on a
random-weight Q8 model at SmolLM2-135M shapes.

    python benchmarks/prefill_ttft.py [--prompt 512] [--ubatch 512] [--threads 2]
                                      [--tiers all] [--kv f32] [--reps 1] [-o [FILE.json]]

Per tier, in the same run: TTFT token by token (one decode step per prompt token: GEMV and
one-row attention) and chunked (GEMM over ubatch rows and tiled attention), the ratio, and
that both give the same first token. Peak RSS (ru_maxrss) is printed after each tier with
the KV cache size and the size a (heads, seq, seq) score matrix would have had: prefill never
allocates one, so chunking does not raise the peak."""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time

import numpy as np

import isaforge
from isaforge.bench.machine import provenance, save_path, script_command
from isaforge.runtime.engine import Engine, select_kernel
from isaforge.synthetic import SMOLLM2_135M, random_q8_model


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ttft_tokens(eng: Engine, prompt: list[int]) -> tuple[float, int]:
    t0 = time.perf_counter()
    for i, t in enumerate(prompt):
        logits = eng.forward(t, i)
    return time.perf_counter() - t0, int(np.argmax(logits))


def ttft_chunked(eng: Engine, prompt: list[int]) -> tuple[float, int]:
    t0 = time.perf_counter()
    logits = eng.prefill(prompt, 0)
    return time.perf_counter() - t0, int(np.argmax(logits))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--ubatch", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tiers", default="all")
    ap.add_argument("--kv", default="f32", choices=["f32", "f16", "int8"])
    ap.add_argument("--reps", type=int, default=1, help="timed runs per mode (min is kept)")
    ap.add_argument("-o", "--output", nargs="?", const="", default=None, metavar="FILE.json",
                    help="also write the JSON ({machine} in FILE: this machine's slug; bare: "
                    "benchmarks/results/<machine>/prefill_ttft.json)")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    a = ap.parse_args()
    out = save_path(a.output, "prefill_ttft")
    info = isaforge.runtime_info()
    tiers = [t["name"] for t in info["tiers"] if t["supported"]]
    if a.tiers != "all":
        tiers = a.tiers.split(",")
    model = random_q8_model(SMOLLM2_135M, group_size=32, seq_len=a.prompt + 1)
    c = model.config
    prompt = [1 + (i * 7919) % (c.vocab_size - 1) for i in range(a.prompt)]
    scores_mb = c.n_heads * a.prompt * a.prompt * 4 / 2**20
    print(f"# {info['cpu']}; SmolLM2-135M shapes (random Q8 gs32), prompt {a.prompt}, "
          f"ubatch {a.ubatch}, {a.threads} threads, kv {a.kv}")
    print(f"# model loaded: peak RSS {peak_rss_mb():.0f} MB; a (heads, seq, seq) fp32 score "
          f"matrix would be {scores_mb:.1f} MB per layer")
    print("| tier | attention | token-by-token s | chunked s | speedup | same token | "
          "KV MB | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for tier in tiers:
        select_kernel(tier)
        eng = Engine(model, threads=a.threads, ubatch=a.ubatch, kv_cache=a.kv)
        ttft_chunked(eng, prompt[:16])  # warm-up (pool, page faults)
        tok_s, tok_t = min(ttft_tokens(eng, prompt) for _ in range(a.reps))
        chk_s, chk_t = min(ttft_chunked(eng, prompt) for _ in range(a.reps))
        row = dict(tier=tier, attention=eng.attention, token_by_token_s=tok_s, chunked_s=chk_s,
                   speedup=tok_s / chk_s, same_first_token=tok_t == chk_t,
                   kv_cache_mb=eng.kv_cache_bytes / 2**20, peak_rss_mb=peak_rss_mb())
        rows.append(row)
        print(f"| {tier} | {eng.attention} | {tok_s:.2f} | {chk_s:.2f} | "
              f"{row['speedup']:.2f}x | {'yes' if row['same_first_token'] else 'NO'} | "
              f"{row['kv_cache_mb']:.1f} | {row['peak_rss_mb']:.0f} |", flush=True)
        del eng
    select_kernel(None)
    if out is not None:
        command = script_command("benchmarks/prefill_ttft.py", sys.argv[1:])
        out.write_text(json.dumps(dict(
            provenance=provenance(command, a.conditions), cpu=info["cpu"],
            features=info["features"], machine=platform.machine(), prompt=a.prompt,
            ubatch=a.ubatch, threads=a.threads, kv=a.kv, results=rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
