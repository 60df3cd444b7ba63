"""A/B of the 4-bit weight arena (if_model_opts.q4_arena): two engines of one CQ4 model in one
process, one reading the converted nibbles copied into the core's 2 MiB-page arena (the
default), the other reading them where the converter left them (as a mapped file's would be),
tg<N> alternating, the first round a discarded warm-up.

    python3 benchmarks/ab/arena_ab.py THREADS ROUNDS N [MODEL]      # env Q: the quant (cq4)

Prints each engine's median / mean t/s and the paired ratio."""

from __future__ import annotations

import os
import sys
import time

import numpy as np


def main(argv: list[str]) -> int:
    import isaforge.runtime.engine as eng
    from isaforge.bench.e2e import bench_tokens
    from isaforge.model import read_model

    threads, rounds, n = int(argv[0]), int(argv[1]), int(argv[2])
    path = argv[3] if len(argv) > 3 else os.path.expanduser(
        "~/.cache/isaforge/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    quant = os.environ.get("Q", "cq4")
    engines, keep, real = {}, [], eng._in_memory
    for name in ("noarena", "arena"):
        loaded = read_model(path, quant)
        keep.append(loaded)
        if name == "noarena":  # the engine then sees no in-memory nibbles: no arena
            eng._in_memory = lambda a: False
        try:
            engines[name] = eng.Engine(loaded, threads=threads)
        finally:
            eng._in_memory = real
    toks = bench_tokens(n, keep[0].config.vocab_size, seed=2)
    res = {k: [] for k in engines}
    for r in range(rounds + 1):
        order = list(engines.items())[:: -1 if r % 2 else 1]
        for name, e in order:
            t0 = time.perf_counter()
            for p, tk in enumerate(toks):
                e.forward(tk, p)
            if r:
                res[name].append(n / (time.perf_counter() - t0))
    for k, v in res.items():
        print(f"{k} {quant} {threads} median {np.median(v):.1f} mean {np.mean(v):.1f}",
              " ".join(f"{x:.0f}" for x in v))
    a, b = np.array(res["arena"]), np.array(res["noarena"])
    print(f"paired ratio arena/noarena median {np.median(a / b):.3f}, arena faster in "
          f"{int((a > b).sum())} of {len(a)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
