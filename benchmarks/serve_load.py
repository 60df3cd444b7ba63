"""Load on `isaforge serve` (and llama-cpp-python's own server, `llama_cpp.server`, in the same
run when it is installed): C concurrent streaming completions for C in --levels, each
generating exactly --max-tokens tokens (isaforge: ignore_eos; llama.cpp: EOS logit bias
-100), every request a different prompt at temperature 0. Per level: aggregate tok/s (all
streams' tokens / wall time from the first request sent to the last token), p50 / p99 time
to first token, per-stream decode tok/s, and the CPU seconds the server process and the load
client spent. Each server runs alone on the machine's threads. The client is this process: one
asyncio loop (uvloop where installed) over raw connections, an HTTP/1.1 + SSE reader of a few
lines, so that it takes as little of the cores the servers use as it can while timing each
event as it arrives.

    python3 benchmarks/serve_load.py                        # SmolLM2, levels 1 4 8 16
    python3 benchmarks/serve_load.py --levels 1,8 --max-tokens 32 --no-peer

The JSON goes to benchmarks/results/<machine>/serve_load.json unless -o says otherwise
({machine} in FILE: this machine's slug).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

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


class SSEReader:
    """A response body as it arrives (de-chunked when `chunked`) to SSE events: feed(bytes)
    returns how many complete events carried text (choices[0].text not empty); `done` once
    "data: [DONE]" came. Events end at a blank line, LF or CRLF (sse-starlette's)."""

    def __init__(self, chunked: bool):
        self.chunked, self.raw, self.text, self.done = chunked, b"", b"", False

    def feed(self, got: bytes) -> int:
        if self.chunked:
            self.raw += got
            while (i := self.raw.find(b"\r\n")) >= 0:
                size = int(self.raw[:i].split(b";")[0], 16)
                if len(self.raw) < i + 2 + size + 2:
                    break
                self.text += self.raw[i + 2:i + 2 + size]
                self.raw = self.raw[i + 4 + size:]
        else:
            self.text += got
        *events, self.text = self.text.replace(b"\r\n", b"\n").split(b"\n\n")
        n = 0
        for ev in events:
            for line in ev.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.done = True
                elif b'"text"' in payload:
                    ch = json.loads(payload).get("choices")
                    n += bool(ch and ch[0].get("text"))
        return n


class _Stream(asyncio.Protocol):
    """One streaming completion as a bare protocol: every read goes straight from the loop's
    callback to the SSE reader (no stream objects, no task wake-up per event)."""

    def __init__(self, request: bytes, done: asyncio.Future):
        self.request, self.done = request, done
        self.head, self.sse, self.times = b"", None, []

    def connection_made(self, transport):
        self.transport = transport
        transport.write(self.request)

    def data_received(self, got: bytes):
        now = time.perf_counter()
        if self.sse is None:  # the status line and headers first
            self.head += got
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            head, got = self.head[:end], self.head[end + 4:]
            status = int(head.split(b" ", 2)[1])
            if status != 200:
                self._end(RuntimeError(f"HTTP {status}: {got[:300]!r}"))
                return
            self.sse = SSEReader(b"transfer-encoding: chunked" in head.lower())
        self.times += [now] * self.sse.feed(got)
        if self.sse.done:
            self._end(None)

    def connection_lost(self, exc):
        self._end(exc if exc is not None or self.sse is not None else
                  RuntimeError("the server closed the connection before answering"))

    def _end(self, exc):
        if not self.done.done():
            if exc is None:
                self.done.set_result(self.times)
            else:
                self.done.set_exception(exc)
        self.transport.close()


async def _astream(port: int, body: dict) -> dict:
    """One streaming completion over a raw connection (HTTP/1.1, Connection: close): the time
    each event carrying text arrived (when the client's read returned it)."""
    data = json.dumps({**body, "stream": True}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
               b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
               b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (port, len(data), data))
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    t0 = time.perf_counter()
    await loop.create_connection(lambda: _Stream(request, done), "127.0.0.1", port)
    return {"start": t0, "times": await done}


def _stream(port: int, body: dict) -> dict:
    return _arun(_astream(port, body))


def _arun(coro):
    try:
        import uvloop  # the cheaper loop where installed (the serve extra has it)

        return uvloop.run(coro)
    except ImportError:
        return asyncio.run(coro)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _level(port: int, c: int, max_tokens: int, extra: dict, round_: int, pid: int = 0
           ) -> dict:
    async def run():
        return await asyncio.gather(*(_astream(port, {
            "prompt": f"Write a story about {NAMES[(i + round_ * 5) % len(NAMES)]} (#{i}).",
            "max_tokens": max_tokens, "temperature": 0, **extra}) for i in range(c)))

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    srv0 = _cpu_s(pid)
    t0 = time.perf_counter()
    out = _arun(run())
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    client_cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    end = max(r["times"][-1] for r in out if r["times"])
    tokens = sum(len(r["times"]) for r in out)
    ttft = sorted(r["times"][0] - r["start"] for r in out)
    # a stream whose tokens all came in one block (one read) has no decode span to divide by
    per_stream = [(len(r["times"]) - 1) / (r["times"][-1] - r["times"][0])
                  for r in out if len(r["times"]) > 1 and r["times"][-1] > r["times"][0]]
    return {"streams": c, "tokens": tokens, "wall_s": end - t0,
            "aggregate_tok_s": tokens / (end - t0),
            "ttft_p50_s": statistics.median(ttft),
            "ttft_p99_s": ttft[min(len(ttft) - 1, int(round(0.99 * (len(ttft) - 1))))],
            "stream_decode_tok_s": statistics.mean(per_stream) if per_stream else 0.0,
            "client_cpu_s": client_cpu, "server_cpu_s": _cpu_s(pid) - srv0}


def _run_server(name: str, cmd: list[str], port: int, levels, max_tokens, extra, rounds):
    print(f"# {name}: {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait(base, proc)
        _stream(port, {"prompt": "Hello", "max_tokens": 8, "temperature": 0, **extra})  # warm
        results = []
        for c in levels:
            best = None
            for r in range(rounds):
                res = _level(port, c, max_tokens, extra, r, proc.pid)
                if best is None or res["aggregate_tok_s"] > best["aggregate_tok_s"]:
                    best = res
            print(f"  {name} {c:>2} streams: {best['aggregate_tok_s']:7.1f} tok/s, TTFT p50 "
                  f"{best['ttft_p50_s']:.3f} s p99 {best['ttft_p99_s']:.3f} s (CPU s: server "
                  f"{best['server_cpu_s']:.2f}, client {best['client_cpu_s']:.2f})",
                  file=sys.stderr)
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: SmolLM2 in the cache)")
    ap.add_argument("--levels", default="1,4,8,16", help="concurrent streams per level")
    ap.add_argument("--max-tokens", type=int, default=64, help="tokens per request")
    ap.add_argument("--rounds", type=int, default=2, help="runs per level; the best is kept")
    ap.add_argument("--ctx", type=int, default=1024, help="context per slot / per server")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads of each server")
    ap.add_argument("--no-peer", action="store_true", help="skip llama_cpp.server")
    ap.add_argument("-o", "--out", default="", metavar="FILE.json",
                    help="where the JSON goes (default benchmarks/results/<machine>/"
                    "serve_load.json)")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    a = ap.parse_args(argv)
    from isaforge.bench.machine import provenance, save_path, script_command
    from isaforge.settings import default_model_path

    out = save_path(a.out, "serve_load")

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
                 "--n_threads", str(a.threads), "--n_threads_batch", str(a.threads),
                 # by default a new request interrupts the one streaming (its stream ends
                 # early); here every request runs to its last token, one after another
                 "--interrupt_requests", "False"],
                port, levels, a.max_tokens, {"logit_bias": {str(eos): -100}}, a.rounds)
        except ImportError as e:
            print(f"# llama_cpp.server not available ({e}); skipped", file=sys.stderr)
    command = script_command("benchmarks/serve_load.py", sys.argv[1:] if argv is None else argv)
    res = {"provenance": provenance(command, a.conditions),
           "model": model, "max_tokens": a.max_tokens, "threads": a.threads,
           "ctx_per_slot": a.ctx, "rounds": a.rounds, "machine": platform.processor() or
           platform.machine(), "cpu_count": os.cpu_count(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": runs}
    out.write_text(json.dumps(res, indent=1) + "\n")
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
