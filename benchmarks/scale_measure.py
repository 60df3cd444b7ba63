"""benchmarks/scale.py's measurements: each measured command a fresh child process (its own
peak RSS, wall time to its first byte on stdout, stopped when the machine runs short of
memory), the start-up and speed runs of each engine, and one size x type's row.
"""

from __future__ import annotations

import datetime
import json
import os
import select
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from scale_files import (
    DEPTH,
    ENGINES,
    MIN_AVAILABLE_MIB,
    N_CTX_SPEED,
    N_CTX_START,
    PROMPT,
    SHAPES,
    file_path,
    log,
)

SCRIPT = Path(__file__).resolve().parent / "scale.py"  # the children run its entry points


# ---------------------------------------------------------------------------------------------
# children


def mem_available_mib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


# The measured command runs under this small launcher: a forked child starts with its parent's
# high-water RSS (Linux copies it with the address space and keeps it across exec), so the
# measured process must be forked from a process that never grew; the launcher reports the
# command's own rusage.
LAUNCHER = """import json, os, signal, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a SIGTERM to the group ends only the command
_, st, ru = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump({"status": st, "maxrss_kib": ru.ru_maxrss, "utime_s": ru.ru_utime,
               "stime_s": ru.ru_stime}, f)
code = os.waitstatus_to_exitcode(st)
os._exit(code if code >= 0 else 128 - code)
"""


def run_child(argv: list[str], timeout: float, env: dict | None = None,
              min_available_mib: float = MIN_AVAILABLE_MIB) -> dict:
    """Run argv as a fresh process (`env` added to the environment): wall time to its first
    stdout byte and to its exit, its peak RSS (ru_maxrss), exit status, stdout. Stopped if
    MemAvailable drops below `min_available_mib` or it outlives `timeout`: SIGTERM to its
    process group (the launcher outlives it and still reports its peak RSS), SIGKILL 5 s
    later."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    err = tempfile.TemporaryFile()
    fd_ru, ru_path = tempfile.mkstemp(prefix="scale-rusage-", suffix=".json")
    os.close(fd_ru)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-I", "-c", LAUNCHER, ru_path, *argv],
                         stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
    fd = p.stdout.fileno()
    out, first, killed, low, killed_at = bytearray(), None, None, None, None
    while True:
        ready, _, _ = select.select([fd], [], [], 0.25)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            if first is None:
                first = time.perf_counter() - t0
            out += chunk
        avail = mem_available_mib()
        if avail is not None:
            low = avail if low is None else min(low, avail)
        if killed is None and avail is not None and avail < min_available_mib:
            killed = f"MemAvailable {avail:.0f} MiB < {min_available_mib:.0f} MiB"
        elif killed is None and time.perf_counter() - t0 > timeout:
            killed = f"timeout {timeout:.0f} s"
        if killed and p.poll() is None:
            now = time.perf_counter()
            sig = signal.SIGTERM if killed_at is None else signal.SIGKILL
            if killed_at is None or now - killed_at > 5:
                killed_at = now if killed_at is None else killed_at
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
    p.wait()
    wall = time.perf_counter() - t0
    p.stdout.close()
    err.seek(0)
    stderr = err.read().decode(errors="replace")
    err.close()
    try:
        ru = json.loads(Path(ru_path).read_text() or "null")
    except (OSError, json.JSONDecodeError):
        ru = None
    os.unlink(ru_path)
    return {"rc": p.returncode, "wall_s": wall, "first_byte_s": first,
            "peak_rss_mib": round(ru["maxrss_kib"] / 1024, 1) if ru else None,
            "cpu_s": round(ru["utime_s"] + ru["stime_s"], 2) if ru else None,
            "killed": killed, "min_mem_available_mib": None if low is None else round(low),
            "stdout": out.decode(errors="replace"), "stderr": stderr}


def drop_page_cache() -> str | None:
    """Empty the page cache (None), or why it cannot be (a reason)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return None
    except OSError as e:
        return f"cannot drop the page cache: {e}"


def warm_page_cache(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass


def command_line(argv: list[str]) -> str:
    """The scale.py command as run, led by ISAFORGE_DISABLE_FEATURES when it is set: a run with
    tiers switched off (a proxy for a smaller CPU) is not reproduced without it."""
    env = os.environ.get("ISAFORGE_DISABLE_FEATURES")
    lead = f"ISAFORGE_DISABLE_FEATURES={shlex.quote(env)} " if env else ""
    return lead + "python3 benchmarks/scale.py " + " ".join(shlex.quote(x) for x in argv)


def isaforge_cmd() -> list[str]:
    """The console script a user of this interpreter runs (its own, not another install's on
    PATH), else `python -m isaforge`."""
    own = Path(sys.executable).parent / "isaforge"
    exe = str(own) if own.is_file() else None
    return [exe] if exe else [sys.executable, "-m", "isaforge"]


def child_env(engine: str, a) -> dict:
    """llama.cpp's threads meet at OpenMP barriers, and libgomp's default spin-wait slows its
    multi-thread runs by orders of magnitude whenever another process holds one of the cores,
    so on a shared machine it runs with OMP_WAIT_POLICY=passive (--omp-wait-policy)."""
    if engine == "llama.cpp" and a.omp_wait_policy != "default":
        return {"OMP_WAIT_POLICY": a.omp_wait_policy}
    return {}


def start_argv(engine: str, path: Path, threads: int, quant: str = "q8") -> list[str]:
    if engine == "isaforge":
        return isaforge_cmd() + ["run", str(path), PROMPT, "-n", "16", "-t", "0", "--ctx",
                                 str(N_CTX_START), "--threads", str(threads), "--quant", quant]
    spec = {"path": str(path), "threads": threads}
    return [sys.executable, str(SCRIPT), "_start_llama", json.dumps(spec)]


def _start_llama(spec: dict) -> int:
    """llama-cpp-python as a user runs it: the model at n_ctx 4096, a streamed chat completion
    of PROMPT, greedy, 16 tokens; each piece printed as it comes."""
    from llama_cpp import Llama

    llm = Llama(model_path=spec["path"], n_ctx=N_CTX_START, n_batch=512,
                n_threads=spec["threads"], n_threads_batch=spec["threads"], verbose=False)
    for chunk in llm.create_chat_completion(messages=[{"role": "user", "content": PROMPT}],
                                            max_tokens=16, temperature=0.0, stream=True):
        piece = chunk["choices"][0]["delta"].get("content")
        if piece:
            sys.stdout.write(piece)
            sys.stdout.flush()
    return 0


def _speed(spec: dict) -> int:
    """One engine at one thread count in this process: load, warm up, pp, tg, and (depth)
    tg after a DEPTH-token context. Prints one JSON line."""
    from isaforge.bench.e2e import bench_tokens

    t0 = time.perf_counter()
    out: dict = {"engine": spec["engine"], "threads": spec["threads"]}
    if spec["engine"] == "isaforge":
        import isaforge
        from isaforge.bench.e2e import model_info

        m = isaforge.load(spec["path"], threads=spec["threads"], ctx=N_CTX_SPEED,
                          quant=spec["quant"])
        eng = m.engine
        vocab = m.config.vocab_size
        kt = eng.kernels
        out.update(weight_bytes_per_token=model_info(m.loaded, "").weight_bytes_per_token,
                   kv_cache=eng.kv_cache, kv_cache_bytes=eng.kv_cache_bytes,
                   kernels={"decode": kt["decode"]["tier"], "prefill": kt["prefill"]["tier"]})

        def reset():
            pass

        def pp(tokens, pos0):
            eng.prefill(tokens, pos0)

        def tg(tokens, pos0):
            for i, t in enumerate(tokens):
                eng.forward(t, pos0 + i)
    else:
        from isaforge.bench.peers import LlamaCppRunner

        r = LlamaCppRunner(spec["path"], spec["threads"], N_CTX_SPEED, 512)
        llm, vocab = r.llm, r.n_vocab

        def reset():
            llm.reset()

        def pp(tokens, pos0):
            llm.eval(tokens)

        def tg(tokens, pos0):
            for t in tokens:
                llm.eval([t])
    out["load_s"] = time.perf_counter() - t0

    def timed(fn, *args) -> float:
        t = time.perf_counter()
        fn(*args)
        return time.perf_counter() - t

    warm = bench_tokens(32, vocab, 3)  # the first calls build buffers and touch every weight
    reset()
    pp(warm, 0)
    tg(warm[:4], len(warm))
    if spec["engine"] == "isaforge":  # the rest of the weights' copy into 2 MiB pages, which
        out["arena_s"] = timed(eng.arena_wait)  # decode steps would otherwise make a slice
        out["load_s"] += out["arena_s"]  # each: counted as loading, as llama.cpp's repacking
    p_tok, g_tok = bench_tokens(spec["n_prompt"], vocab, 1), bench_tokens(spec["n_gen"], vocab, 2)
    reset()
    out["pp_s"] = timed(pp, p_tok, 0)
    reset()
    out["tg_s"] = timed(tg, g_tok, 0)
    if spec["depth"]:
        ctx = bench_tokens(DEPTH, vocab, 4)
        reset()
        out["depth_prefill_s"] = timed(pp, ctx, 0)
        out["depth_tg_s"] = timed(tg, g_tok, DEPTH)
    import resource

    out["self_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out), flush=True)
    return 0


def speed_argv(engine: str, path: Path, threads: int, depth: bool, a) -> list[str]:
    spec = {"engine": engine, "path": str(path), "threads": threads, "depth": depth,
            "n_prompt": a.n_prompt, "n_gen": a.n_gen, "quant": a.quant}
    return [sys.executable, str(SCRIPT), "_speed", json.dumps(spec)]


def _mib(x) -> str:
    return "?" if x is None else f"{x:.0f} MiB"


def _fail(kind: str, engine: str, threads: int, res: dict) -> dict:
    return {"kind": kind, "engine": engine, "threads": threads, "rc": res["rc"],
            "killed": res["killed"], "peak_rss_mib": res["peak_rss_mib"],
            "wall_s": round(res["wall_s"], 2), "stderr_tail": res["stderr"][-1500:]}


# ---------------------------------------------------------------------------------------------
# one size x type


def measure(size: str, typ: str, a) -> dict:
    from isaforge import _bench
    from isaforge.bench.e2e import gguf_info
    from isaforge.bench.limits import stream_bytes
    from isaforge.bench.machine import loadavg

    path = file_path(size, typ)
    top = max(a.threads)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    row: dict = {"size": size, "model": SHAPES[size].name + " shapes",
                 "shape": asdict(SHAPES[size]), "type": typ, "file": path.name,
                 "file_bytes": path.stat().st_size,
                 "created": created, "loadavg_start": loadavg(), "reps": a.reps,
                 "threads": a.threads, "start_threads": top, "failures": [],
                 # rows of earlier runs stay in the file, so each row names its own command
                 "command": command_line(sys.argv[1:])}
    info = gguf_info(path)
    row["params"] = info.params
    bpt = {"llama.cpp": info.weight_bytes_per_token}
    eng_rows = {e: {k: {"first_token_s": [], "exit_s": [], "peak_rss_mib": [], "cpu_s": []}
                    for k in ("start_warm", "start_cold")} | {
                    "speed": {str(t): {"load_s": [], "peak_rss_mib": [], "pp_tps": [],
                                       "tg_tps": [], "depth_prefill_tps": [],
                                       "depth_tg_tps": []} for t in a.threads}}
                for e in ENGINES}
    stream = {str(t): [] for t in a.threads}
    nbytes = stream_bytes()
    cold_reason = None
    log(f"{path.name}: {path.stat().st_size / 1e9:.2f} GB, warming the page cache")
    warm_page_cache(path)
    for rep in range(a.reps):
        for kind in (["start_warm", "start_cold"] if a.cold else ["start_warm"]):
            for e in ENGINES:
                if kind == "start_cold":
                    cold_reason = drop_page_cache()
                    if cold_reason:
                        log(cold_reason)
                        continue
                res = run_child(start_argv(e, path, top, a.quant), a.child_timeout,
                                child_env(e, a), a.min_available_mib)
                ok = res["rc"] == 0 and not res["killed"] and res["first_byte_s"] is not None
                log(f"rep {rep + 1}/{a.reps} {kind} {e}: first token "
                    f"{res['first_byte_s'] or float('nan'):.2f} s, exit {res['wall_s']:.2f} s, "
                    f"peak RSS {_mib(res['peak_rss_mib'])}" + ("" if ok else " FAILED"))
                if not ok:
                    row["failures"].append(_fail(kind, e, top, res))
                    continue
                d = eng_rows[e][kind]
                d["first_token_s"].append(round(res["first_byte_s"], 3))
                d["exit_s"].append(round(res["wall_s"], 3))
                d["peak_rss_mib"].append(res["peak_rss_mib"])
                d["cpu_s"].append(res["cpu_s"])
                if e == "isaforge" and "run_stats" not in row:
                    row["run_stats"] = res["stderr"].strip().splitlines()[-3:]
                if rep == 0 and kind == "start_warm":
                    row.setdefault("first_output", {})[e] = res["stdout"][:200]
            if kind == "start_cold":
                warm_page_cache(path)
        for t in [] if a.only_start else a.threads:
            depth = t == top and not a.skip_depth
            for e in ENGINES:
                res = run_child(speed_argv(e, path, t, depth, a), a.child_timeout,
                                child_env(e, a), a.min_available_mib)
                line = next((x for x in reversed(res["stdout"].splitlines())
                             if x.startswith("{")), None)
                if res["rc"] != 0 or res["killed"] or line is None:
                    log(f"rep {rep + 1}/{a.reps} speed {e} {t}t: FAILED "
                        f"({res['killed'] or res['rc']})")
                    row["failures"].append(_fail("speed", e, t, res))
                    continue
                r = json.loads(line)
                if e == "isaforge":
                    bpt["isaforge"] = r["weight_bytes_per_token"]
                    row["isaforge_engine"] = {k: r[k] for k in ("kv_cache", "kv_cache_bytes",
                                                                 "kernels")}
                d = eng_rows[e]["speed"][str(t)]
                d["load_s"].append(round(r["load_s"], 3))
                d["peak_rss_mib"].append(res["peak_rss_mib"])
                d["pp_tps"].append(round(a.n_prompt / r["pp_s"], 3))
                d["tg_tps"].append(round(a.n_gen / r["tg_s"], 3))
                if depth:
                    d["depth_prefill_tps"].append(round(DEPTH / r["depth_prefill_s"], 3))
                    d["depth_tg_tps"].append(round(a.n_gen / r["depth_tg_s"], 3))
                log(f"rep {rep + 1}/{a.reps} speed {e} {t}t: load {r['load_s']:.1f} s, "
                    f"pp{a.n_prompt} {d['pp_tps'][-1]:.2f} t/s, "
                    f"tg{a.n_gen} {d['tg_tps'][-1]:.2f} t/s"
                    + (f", pp{DEPTH} {d['depth_prefill_tps'][-1]:.2f} t/s, tg{a.n_gen}@{DEPTH} "
                       f"{d['depth_tg_tps'][-1]:.2f} t/s" if depth else "")
                    + f", peak RSS {_mib(res['peak_rss_mib'])}")
            for t2 in a.threads:  # the bandwidth probe in the same alternation as the runs
                stream[str(t2)].append(round(_bench.stream_read(nbytes, t2, 1), 3))
    row.update(engines=eng_rows, weight_bytes_per_token=bpt, stream_gbps=stream,
               stream_bytes=nbytes, cold=(cold_reason or "measured") if a.cold else None,
               loadavg_end=loadavg())
    row["summary"] = summarize(row)
    return row


def _mean(xs):
    return round(statistics.fmean(xs), 3) if xs else None


def _std(xs):
    return round(statistics.stdev(xs), 3) if len(xs) > 1 else (0.0 if xs else None)


def _ratio(x, y):
    return round(x / y, 3) if x is not None and y else None


BANDWIDTH_METHOD = (
    "tg t/s x the engine's weight bytes per token / the best stream probe reading "
    "(isaforge._bench.stream_read, one pass over a buffer of 4x the last-level cache, one "
    "sample after every speed pair) at that thread count; decode re-reads the same weights "
    "every token, so where the last-level cache keeps a sizeable part of them the fraction "
    "can exceed 1")


def summarize(row: dict) -> dict:
    """Means (stddev over processes), isaforge / llama.cpp ratios, fractions of bandwidth
    (over the best stream probe reading, as isaforge.bench.limits takes a limit: what the
    machine can reach; the median is kept beside it)."""
    e = row["engines"]
    s: dict = {}
    for kind in ("start_warm", "start_cold"):
        fi, fl = (e[x][kind]["first_token_s"] for x in ENGINES)
        if fi or fl:
            s[kind + "_first_token_s"] = {"isaforge": _mean(fi), "llama.cpp": _mean(fl),
                                          "ratio": _ratio(_mean(fi), _mean(fl))}
    ri, rl = (max(e[x]["start_warm"]["peak_rss_mib"], default=None) for x in ENGINES)
    s["start_peak_rss_mib"] = {"isaforge": ri, "llama.cpp": rl, "ratio": _ratio(ri, rl)}
    for t in map(str, row["threads"]):
        for test in ("pp_tps", "tg_tps", "depth_tg_tps", "depth_prefill_tps"):
            xi, xl = (e[x]["speed"][t][test] for x in ENGINES)
            if not (xi or xl):
                continue
            s[f"{test}_{t}t"] = {"isaforge": _mean(xi), "isaforge_std": _std(xi),
                                 "llama.cpp": _mean(xl), "llama.cpp_std": _std(xl),
                                 "ratio": _ratio(_mean(xi), _mean(xl))}
        probe = row["stream_gbps"][t]
        bw = max(probe) if probe else None
        frac = {}
        for x in ENGINES:
            tps, b = _mean(e[x]["speed"][t]["tg_tps"]), row["weight_bytes_per_token"].get(x)
            frac[x] = round(tps * b / (bw * 1e9), 4) if tps and b and bw else None
        s[f"tg_fraction_of_bandwidth_{t}t"] = dict(
            frac, stream_gbps_best=bw,
            stream_gbps_median=round(statistics.median(probe), 3) if probe else None)
    return s
