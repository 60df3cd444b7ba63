"""Attention-heavy timings of one isaforge build, to compare two builds in one run: prefill of a
long prompt (TTFT) and decode steps right after it, per kernel tier, on a random-weight Q8
model at SmolLM2-135M shapes (9 heads, 3 kv heads, head 64).

    python benchmarks/ab/attention_ab.py [--ctx 512,2048] [--decode 32] [--threads 2] [--reps 3]

Prints one JSON object per (tier, ctx): the best-of-reps seconds to prefill ctx tokens in
chunks (`prefill_s`) and the mean seconds per decode step right after them (`decode_s`, over
--decode steps), labelled with --label. To compare two builds (say main and the commit before a
change), install each in its own virtual environment and alternate them in one loop:

    for i in 1 2 3; do for py in /tmp/venv_a/bin/python /tmp/venv_b/bin/python; do
        $py benchmarks/ab/attention_ab.py --reps 1; done; done

and compare the best of each build's runs (benchmarks/results/zen3-avx2/ab/attention.json
holds such a run with the command that made it)."""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import isaforge
from isaforge.runtime.engine import Engine, select_kernel
from isaforge.synthetic import SMOLLM2_135M, random_q8_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", default="512,2048", help="prompt lengths, comma-separated")
    ap.add_argument("--decode", type=int, default=32, help="decode steps timed after the prompt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tiers", default="all")
    ap.add_argument("--label", default="", help="a name for this build in the output")
    a = ap.parse_args()
    info = isaforge.runtime_info()
    tiers = [t["name"] for t in info["tiers"] if t["supported"]]
    if a.tiers != "all":
        tiers = a.tiers.split(",")
    ctxs = [int(c) for c in a.ctx.split(",")]
    # a context of whole 64-slot blocks, as --ctx's usual powers of two are (the float32
    # cache then stores its keys block-transposed: if_kv_layer.keys_t)
    model = random_q8_model(SMOLLM2_135M, group_size=32,
                            seq_len=(max(ctxs) + a.decode + 64) // 64 * 64)
    rng = np.random.default_rng(0)
    for tier in tiers:
        select_kernel(tier)
        for n in ctxs:
            prompt = [1] + rng.integers(3, model.config.vocab_size, n - 1).tolist()
            best_p, best_d = float("inf"), float("inf")
            for _ in range(a.reps):
                eng = Engine(model, threads=a.threads)
                t0 = time.perf_counter()
                logits = eng.prefill(prompt, 0)
                best_p = min(best_p, time.perf_counter() - t0)
                tok, t0 = int(np.argmax(logits)), time.perf_counter()
                for i in range(a.decode):
                    tok = int(np.argmax(eng.forward(tok, n + i)))
                best_d = min(best_d, (time.perf_counter() - t0) / a.decode)
            print(json.dumps({"label": a.label,
                              "tier": tier, "ctx": n, "threads": a.threads,
                              "prefill_s": round(best_p, 4), "decode_s": round(best_d, 5)}),
                  flush=True)
        select_kernel(None)


if __name__ == "__main__":
    main()
