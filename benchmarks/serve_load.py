"""Load on `isaforge serve` (and llama-cpp-python's own server, `llama_cpp.server`, in the same
run when it is installed): C concurrent streaming completions for C in --levels, each
generating exactly --max-tokens tokens (isaforge: ignore_eos; llama.cpp: EOS logit bias
-100), every request a different prompt at temperature 0. Per level: aggregate tok/s (all
streams' tokens / wall time from the first request sent to the last token), p50 / p99 time
to first token, and per-stream decode tok/s. Each server runs alone on the machine's threads.

    python3 benchmarks/serve_load.py                        # SmolLM2, levels 1 4 8 16
    python3 benchmarks/serve_load.py --levels 1,8 --max-tokens 32 --no-peer
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

NAMES = ["a dragon", "the sea", "a robot", "a small town", "the moon", "a cat", "winter",
         "a library", "a train", "the forest", "a baker", "music", "a storm", "a garden",
         "the desert", "a lighthouse"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(base: str, proc, timeout=180) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/v1/models", timeout=5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("server did not start")


def _stream(base: str, body: dict) -> dict:
    """One streaming completion: tokens (text events) and the time of each."""
    data = json.dumps({**body, "stream": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=data,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    times = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("choices") and ev["choices"][0].get("text"):
                times.append(time.perf_counter())
    return {"start": t0, "times": times}


def _level(base: str, c: int, max_tokens: int, extra: dict, round_: int) -> dict:
    out: list[dict | None] = [None] * c

    def run(i):
        prompt = f"Write a story about {NAMES[(i + round_ * 5) % len(NAMES)]} (#{i})."
        out[i] = _stream(base, {"prompt": prompt, "max_tokens": max_tokens,
                                "temperature": 0, **extra})
    threads = [threading.Thread(target=run, args=(i,)) for i in range(c)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = max(r["times"][-1] for r in out if r["times"])
    tokens = sum(len(r["times"]) for r in out)
    ttft = sorted(r["times"][0] - r["start"] for r in out)
    per_stream = [(len(r["times"]) - 1) / (r["times"][-1] - r["times"][0])
                  for r in out if len(r["times"]) > 1]
    return {"streams": c, "tokens": tokens, "wall_s": end - t0,
            "aggregate_tok_s": tokens / (end - t0),
            "ttft_p50_s": statistics.median(ttft),
            "ttft_p99_s": ttft[min(len(ttft) - 1, int(round(0.99 * (len(ttft) - 1))))],
            "stream_decode_tok_s": statistics.mean(per_stream) if per_stream else 0.0}


def _run_server(name: str, cmd: list[str], port: int, levels, max_tokens, extra, rounds):
    print(f"# {name}: {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait(base, proc)
        _stream(base, {"prompt": "Hello", "max_tokens": 8, "temperature": 0, **extra})  # warm
        results = []
        for c in levels:
            best = None
            for r in range(rounds):
                res = _level(base, c, max_tokens, extra, r)
                if best is None or res["aggregate_tok_s"] > best["aggregate_tok_s"]:
                    best = res
            print(f"  {name} {c:>2} streams: {best['aggregate_tok_s']:7.1f} tok/s, TTFT p50 "
                  f"{best['ttft_p50_s']:.3f} s p99 {best['ttft_p99_s']:.3f} s", file=sys.stderr)
            results.append(best)
        return results
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="GGUF (default: SmolLM2 in the cache)")
    ap.add_argument("--levels", default="1,4,8,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2, help="runs per level; the best is kept")
    ap.add_argument("--ctx", type=int, default=1024, help="context per slot / per server")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-peer", action="store_true", help="skip llama_cpp.server")
    ap.add_argument("-o", "--out", default=str(Path(__file__).parent / "results" /
                                               "serve_load.json"))
    a = ap.parse_args(argv)
    from isaforge.settings import default_model_path

    model = a.model or str(default_model_path())
    levels = [int(x) for x in a.levels.split(",")]
    runs = {}
    port = _free_port()
    runs["isaforge"] = _run_server(
        "isaforge", [sys.executable, "-m", "isaforge", "serve", model, "--port", str(port),
                     "--parallel", str(max(levels)), "--ctx", str(a.ctx), "--threads",
                     str(a.threads), "--queue", "256"],
        port, levels, a.max_tokens, {"ignore_eos": True}, a.rounds)
    if not a.no_peer:
        try:
            import llama_cpp
            import llama_cpp.server  # noqa: F401  (its extra: fastapi, sse-starlette, ...)

            from isaforge import load

            eos = load(model, ctx=64).tokenizer.eos_id
            port = _free_port()
            runs["llama_cpp.server"] = _run_server(
                f"llama_cpp.server {llama_cpp.__version__}",
                [sys.executable, "-m", "llama_cpp.server", "--model", model, "--port",
                 str(port), "--host", "127.0.0.1", "--n_ctx", str(a.ctx * max(levels)),
                 "--n_threads", str(a.threads), "--n_threads_batch", str(a.threads)],
                port, levels, a.max_tokens, {"logit_bias": {str(eos): -100}}, a.rounds)
        except ImportError as e:
            print(f"# llama_cpp.server not available ({e}); skipped", file=sys.stderr)
    res = {"model": model, "max_tokens": a.max_tokens, "threads": a.threads,
           "ctx_per_slot": a.ctx, "rounds": a.rounds, "machine": platform.processor() or
           platform.machine(), "cpu_count": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": runs}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    print("| server | streams | aggregate tok/s | TTFT p50 (s) | TTFT p99 (s) | "
          "per-stream tok/s |\n| --- | --- | --- | --- | --- | --- |")
    for name, rows in runs.items():
        for r in rows:
            print(f"| {name} | {r['streams']} | {r['aggregate_tok_s']:.1f} | "
                  f"{r['ttft_p50_s']:.3f} | {r['ttft_p99_s']:.3f} | "
                  f"{r['stream_decode_tok_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
