"""What structured output costs per token: the grammar's mask (llguidance's token mask, the
logits set to -inf, the sampled token advanced) at 1 and 8 constrained streams, and the
decode speed of unconstrained requests alone, in a batch of their own, and sharing the batch
with constrained ones.

    python benchmarks/grammar_cost.py [MODEL] [--tokens 64] [--threads N] [--reps 3]
        [--conditions TEXT] [-o FILE.json]

MODEL defaults to SmolLM2-135M-Instruct from the isaforge cache (a 49,152-token vocabulary),
else stories260K from ../shared (512 tokens). Every request runs through the batch scheduler
(`runtime.batch.Scheduler`) for exactly --tokens tokens: the unconstrained ones ignore their
stop ids, the constrained ones follow a JSON schema (an array of at least 1,000 short strings)
that cannot end within the budget, each with its own seed, so every row lives for the whole
run. Figures are the median over --reps runs; timings on a shared 2-core VM move by 10-20 %.

The JSON goes to benchmarks/results/<machine>/grammar_cost.json unless -o says otherwise
(`isaforge bench report --update-readme` renders it in docs/performance.md): a row per
configuration (streams, plain and constrained rows, tok/s, mask µs per constrained token, the
mask's share of the wall time) and the plain rows' speed alone (8 plain) against beside
constrained rows (4 plain + 4 constrained): the same batch size, so the difference is what the
constrained rows' masks add to every row's step."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import isaforge
from isaforge.model import read_model
from isaforge.runtime import batch
from isaforge.runtime.batch import BatchEngine, Request, Scheduler
from isaforge.settings import default_model_path
from isaforge.text.grammar import constraint_for
from isaforge.text.load import tokenizer_for

SCHEMA = {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1000}
STORIES = Path(__file__).resolve().parents[2] / "shared" / "models" / "stories260K" / \
    "stories260K.bin"


class _Timed:
    """A Constraint whose matchers count their tokens and add the time of their advance
    calls to `spent`; the masks' time (batch.mask_rows, every constrained row of a step at
    once) is added by _timed_mask_rows."""

    current: _Timed | None = None

    def __init__(self, c):
        self.c, self.spent, self.tokens = c, 0.0, 0
        _Timed.current = self

    def matcher(self):
        return _TimedMatcher(self.c.matcher(), self)


class _TimedMatcher:
    def __init__(self, m, acc: _Timed):
        self.m, self.acc = m, acc

    def advance(self, tok):
        t0 = time.perf_counter()
        ok = self.m.advance(tok)
        self.acc.spent += time.perf_counter() - t0
        self.acc.tokens += 1
        return ok

    def __getattr__(self, name):  # finished, accepting, error
        return getattr(self.m, name)


_mask_rows = batch.mask_rows


def _timed_mask_rows(matchers, logits, rows):
    t0 = time.perf_counter()
    ok = _mask_rows([m.m for m in matchers], logits, rows)
    _Timed.current.spent += time.perf_counter() - t0
    return ok


batch.mask_rows = _timed_mask_rows


def run(sched: Scheduler, prompt: list[int], n_plain: int, n_con: int, tokens: int,
        constraint) -> tuple[float, int]:
    """Seconds from submit to the last row's end, and tokens generated."""
    left = threading.Semaphore(0)
    count = [0]

    def emit(kind, value, extra):
        if kind == "token":
            count[0] += 1
        else:
            left.release()
    reqs = [Request(tokens=prompt, max_new=tokens, emit=emit, temperature=1.0, seed=1 + i,
                    constraint=constraint if i >= n_plain else None)
            for i in range(n_plain + n_con)]
    t0 = time.perf_counter()
    with sched._cv:  # every request admitted in one step: the rows share every step
        for r in reqs:
            sched.submit(r)
    for _ in reqs:
        left.acquire()
    return time.perf_counter() - t0, count[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", default=None,
                    help="model file (default: SmolLM2-135M-Instruct in the isaforge cache, "
                    "else ../shared's stories260K)")
    ap.add_argument("--tokens", type=int, default=64, help="tokens each row decodes")
    ap.add_argument("--threads", type=int, default=None,
                    help="engine threads (default: the runtime's)")
    ap.add_argument("--reps", type=int, default=3, help="runs per configuration; the median "
                    "is kept")
    ap.add_argument("-o", "--out", default="", metavar="FILE.json",
                    help="where the JSON goes (default benchmarks/results/<machine>/"
                    "grammar_cost.json)")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    a = ap.parse_args(argv)
    from isaforge.bench.machine import provenance, save_path, script_command

    out = save_path(a.out, "grammar_cost")
    path = a.model or (default_model_path() if default_model_path().is_file() else STORIES)
    loaded = read_model(path)
    tok = tokenizer_for(loaded)
    model = isaforge.load(path, threads=1)
    stop = model.stop_ids
    t0 = time.perf_counter()
    con = constraint_for(tok, "json_schema", SCHEMA, stop_ids=stop,
                         vocab_size=loaded.config.vocab_size)
    compile_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    con.matcher()
    start_us = (time.perf_counter() - t0) * 1e6
    prompt = model.encode("Once upon a time")
    engine = BatchEngine(loaded, 8, a.threads)
    sched = Scheduler(engine, prefill_chunk=512)
    print(f"{Path(path).name}: vocabulary {tok.vocab_size}, {a.tokens} tokens a row, "
          f"median of {a.reps}; compile {compile_ms:.1f} ms (first use of the vocabulary "
          f"included), a matcher {start_us:.0f} us")

    configs = (("1 plain", 1, 0), ("1 constrained", 0, 1), ("8 plain", 8, 0),
               ("8 constrained", 0, 8), ("4 plain + 4 constrained", 4, 4))
    walls = {c: [] for c in configs}
    masks = {c: [] for c in configs}
    try:
        run(sched, prompt, 1, 1, 8, con)  # warm-up
        for _ in range(a.reps):  # the configurations alternate: drift hits them alike
            for c in configs:
                timed = _Timed(con)
                wall, _ = run(sched, prompt, c[1], c[2], a.tokens, timed)
                walls[c].append(wall)
                masks[c].append(timed.spent / timed.tokens * 1e6 if timed.tokens else 0.0)
        threads = engine.threads
    finally:
        sched.close()
    print(f"{'streams':<26}{'tok/s (all rows)':>18}{'tok/s a row':>14}"
          f"{'mask us/token':>16}{'mask share':>12}")
    rows = []
    for c in configs:
        label, n_plain, n_con = c
        wall, mask_us = statistics.median(walls[c]), statistics.median(masks[c])
        n = n_plain + n_con
        share = mask_us * 1e-6 * n_con * a.tokens / wall
        rows.append({"label": label, "streams": n, "plain": n_plain, "constrained": n_con,
                     "wall_s": round(wall, 4), "walls_s": [round(w, 4) for w in walls[c]],
                     "tok_s": round(n * a.tokens / wall, 2),
                     "tok_s_row": round(a.tokens / wall, 2),
                     "mask_us_per_token": round(mask_us, 1) if n_con else None,
                     "mask_share": round(share, 4) if n_con else None})
        print(f"{label:<26}{n * a.tokens / wall:>18.1f}{a.tokens / wall:>14.1f}"
              f"{mask_us:>16.1f}{share:>11.1%}")
    # every row of a batch lives through the same steps, so a plain row's speed is the
    # batch's per-row speed
    alone = next(r for r in rows if r["label"] == "8 plain")["tok_s_row"]
    beside = next(r for r in rows if r["label"] == "4 plain + 4 constrained")["tok_s_row"]
    mixed = {"alone": "8 plain", "beside": "4 plain + 4 constrained",
             "plain_tok_s_row_alone": alone, "plain_tok_s_row_beside": beside,
             "ratio": round(beside / alone, 4)}
    print(f"plain rows: {alone:.1f} tok/s a row alone (8 plain), {beside:.1f} beside 4 "
          f"constrained rows ({beside / alone:.1%})")
    command = script_command("benchmarks/grammar_cost.py", sys.argv[1:] if argv is None else argv)
    res = {"provenance": provenance(command, a.conditions),
           "model": Path(path).name, "vocab_size": tok.vocab_size, "tokens": a.tokens,
           "reps": a.reps, "threads": threads, "schema": SCHEMA,
           "compile_ms": round(compile_ms, 1), "matcher_us": round(start_us, 1),
           "rows": rows, "plain_alone_vs_beside": mixed}
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
