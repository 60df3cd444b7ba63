"""Where a decode step's time goes, per thread: `perf record -e cpu-clock` samples of the
decode loop only (loading and quantizing are outside the sampled window), grouped by phase.

    python3 benchmarks/decode_profile.py --model SmolLM2...Q4_1.gguf --threads 1,2 --save
    python3 benchmarks/decode_profile.py --model ... --prefill 512 --steps 8   # prefill instead

Software clock sampling needs no PMU (it works in VMs whose perf counters are unsupported).
Each thread count runs in its own process: `--steps` decode steps (Engine.forward) at
positions 0..127 over and over (tg128's context), after 16 warm-up steps. Phases, by the
sampled symbol: matmul (every GEMV/GEMM kernel and the helpers of their bodies; the module
keeps its symbol table, pyproject's install.strip = false, so static functions have names),
attention, elementwise (the rest of the core: norms, RoPE, quantization, activations, KV
stores), wait (if_step_wait / if_step_next and the kernel's scheduler and sched_yield: a
thread at a barrier), other (Python, libc, the kernel otherwise). From them: the bytes the
matmuls stream per second of matmul time per thread, against the read-only stream bandwidth
per thread at that thread count (bench.limits)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HZ = 4000  # samples per second per thread

# every kernel named *_gemv_* / *_gemm_* (Q8, 4-bit, K-quant, legacy, IQ4), and the static helpers
# of the bodies they share
MATMUL = ("if_f32_gemv", "q8c_", "q4c_", "ifz_gemv", "q4z_", "q4w_", "gm_", "ifk", "ifl", "iflg_",
          "q4kg", "q45ka", "q6ka", "iq4")
# scheduler and syscall paths a waiting thread runs (besides any symbol naming futex or yield)
WAIT = ("if_step_wait", "if_step_next", "__schedule", "schedule", "do_syscall_64",
        "entry_SYSCALL_64", "syscall_exit_to_user_mode", "_raw_spin_unlock_irqrestore",
        "finish_task_switch", "pick_next_task_fair")


def phase(sym: str) -> str:
    if sym.startswith(MATMUL) or "_gemv" in sym or "_gemm" in sym:
        return "matmul"
    if "attn" in sym:
        return "attention"
    if sym.startswith(WAIT) or "futex" in sym or "yield" in sym:
        return "wait"
    if sym.startswith("if_"):
        return "elementwise"
    return "other"


def child(a) -> int:
    from isaforge.model import read_model
    from isaforge.runtime.engine import Engine

    loaded = read_model(a.model, a.quant)
    e = Engine(loaded, threads=a.child)
    for p in range(16):
        e.forward(1, p)
    ctl = open(a.ctl, "w") if a.ctl else None
    if ctl:
        ctl.write("enable\n")
        ctl.flush()
    t = time.perf_counter()
    if a.prefill:  # --prefill P: steps prefills of P tokens from position 0 (pp<P>'s work)
        toks = [1 + i % 50 for i in range(a.prefill)]
        for _ in range(a.steps):
            e.prefill(toks, 0)
    else:
        for s in range(a.steps):
            e.forward(1 + s % 50, s % 128)
    dt = time.perf_counter() - t
    if ctl:
        ctl.write("disable\n")
        ctl.flush()
    print(json.dumps({"steps_per_s": a.steps / dt, "wall_s": dt}))
    return 0


def profile(a, threads: int, tmp: str) -> dict:
    data, ctl = os.path.join(tmp, f"t{threads}.data"), os.path.join(tmp, f"ctl{threads}")
    os.mkfifo(ctl)
    cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(HZ), "-D", "-1",
           f"--control=fifo:{ctl}", "-o", data, "--", sys.executable, os.path.abspath(__file__),
           "--model", a.model, "--quant", a.quant, "--steps", str(a.steps),
           "--prefill", str(a.prefill),
           "--child", str(threads), "--ctl", ctl]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"perf record failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    run = json.loads(r.stdout.strip().splitlines()[-1])
    s = subprocess.run(["perf", "script", "-i", data, "-F", "tid,ip,sym"], capture_output=True,
                       text=True, check=True).stdout
    per = collections.defaultdict(collections.Counter)  # tid -> phase -> samples
    syms = collections.Counter()
    for line in s.splitlines():
        parts = line.split(None, 2)  # tid, ip, symbol (absent when unresolved)
        if len(parts) < 2:
            continue
        tid, sym = parts[0], parts[2].strip() if len(parts) > 2 else "[unknown]"
        per[tid][phase(sym)] += 1
        syms[sym] += 1
    # the busiest `threads` threads are the team (Python's own helper threads sample little)
    team = sorted(per, key=lambda t: -sum(per[t].values()))[:threads]
    wall = run["wall_s"]
    rows = []
    for i, tid in enumerate(team):
        c = per[tid]
        rows.append({"thread": i, "on_cpu_s": sum(c.values()) / HZ,
                     **{f"{p}_s": c[p] / HZ for p in
                        ("matmul", "attention", "elementwise", "wait", "other")}})
    total = sum(sum(per[t].values()) for t in team)
    top = [{"symbol": k, "share": v / total} for k, v in syms.most_common(24)]
    return {"threads": threads, "steps": a.steps, "steps_per_s": run["steps_per_s"],
            "wall_s": wall, "per_thread": rows, "top_symbols": top}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--quant", default="auto",
                    help="how the model is held (auto: as stored, the default; q8, cq4, ...)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--prefill", type=int, default=0,
                    help="profile prefills of this many tokens instead (--steps of them)")
    ap.add_argument("--save", nargs="?", const="", metavar="FILE.json",
                    help="also write the JSON ({machine} in FILE: this machine's slug; bare: "
                    "benchmarks/results/<machine>/decode_profile[_QUANT].json)")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ctl", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        return child(a)
    from isaforge.bench.machine import provenance, save_path, script_command

    name = "decode_profile" + ("" if a.quant == "q8" else f"_{a.quant}") + (
        f"_prefill{a.prefill}" if a.prefill else "")
    out = save_path(a.save, name)
    if not os.path.isfile(a.model):
        ap.error(f"{a.model}: no such file")
    if shutil.which("perf") is None:
        ap.error("perf is not installed (linux-perf); this benchmark samples with it")
    from isaforge.bench.e2e import model_info
    from isaforge.bench.limits import measure_limits
    from isaforge.bench.machine import machine_info
    from isaforge.model import read_model

    threads = [int(t) for t in a.threads.split(",")]
    info = model_info(read_model(a.model, a.quant), os.path.basename(a.model))
    limits = measure_limits([], threads)
    command = script_command("benchmarks/decode_profile.py",
                             sys.argv[1:] if argv is None else argv)
    doc = {"provenance": provenance(command, a.conditions),
           "machine": machine_info(), "model": os.path.basename(a.model), "quant": a.quant,
           "weight_bytes_per_step": info.weight_bytes_per_token, "hz": HZ,
           "bandwidth": limits["bandwidth"], "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for t in threads:
            run = profile(a, t, tmp)
            bw = next((b["gbps"] for b in limits["bandwidth"] if b["threads"] == t), None)
            mm = sum(r["matmul_s"] for r in run["per_thread"])
            streamed = info.weight_bytes_per_token * a.steps
            run["matmul_gbps_per_thread"] = streamed / mm / 1e9 if mm else None  # per matmul-second
            run["stream_gbps_per_thread"] = bw / t if bw else None
            run["limit_steps_per_s"] = bw * 1e9 / info.weight_bytes_per_token if bw else None
            if a.prefill:  # a bandwidth limit and stream rate are decode's figures
                run["limit_steps_per_s"] = run["matmul_gbps_per_thread"] = None
                run["prefill_tokens"] = a.prefill
            doc["runs"].append(run)
    print(f"{doc['model']} ({a.quant}), {info.weight_bytes_per_token / 2**20:.1f} MiB of "
          f"weights per step; {doc['machine'].get('cpu', '')}")
    print("| threads | steps/s | limit | thread | on-CPU % | matmul % | attention % | "
          "elementwise % | wait % | other % |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for run in doc["runs"]:
        w = run["wall_s"]
        for r in run["per_thread"]:
            pct = {k: 100 * r[f"{k}_s"] / w for k in
                   ("matmul", "attention", "elementwise", "wait", "other")}
            print(f"| {run['threads']} | {run['steps_per_s']:.1f} | "
                  f"{run['limit_steps_per_s'] or 0:.1f} | {r['thread']} | "
                  f"{100 * r['on_cpu_s'] / w:.1f} | " + " | ".join(
                      f"{pct[k]:.1f}" for k in pct) + " |")
        print(f"  matmul streams {run['matmul_gbps_per_thread'] or 0:.2f} GB/s per thread "
              f"while in a matmul; the read-only stream gives "
              f"{run['stream_gbps_per_thread'] or 0:.2f} GB/s per thread at "
              f"{run['threads']} thread(s)")
    if out is not None:
        out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
