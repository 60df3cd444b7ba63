"""A bounded soak of `isaforge serve`: well-behaved streaming clients alone for --duration
seconds, then the same clients again for --duration seconds beside hostile traffic, against
one server. Reports the well-behaved clients' time to first token (p50 / p99) in both runs,
`/health` latency (p50 / p99 / max) in both, every 5xx any client saw, and the server's peak
RSS against its RSS when idle (after start-up and one request).

The well-behaved clients: --streams loops, each sending streaming completions of --max-tokens
tokens (ignore_eos) one after another. The hostile traffic, all at once:
  - slow clients: --slow connections each sending its request's head a byte a second
    (reconnecting when the server closes it);
  - oversized requests, in turn: a 1 MB header, a 10,000-header request, a body announced as
    5 MB, a prompt of 3.9 MB, JSON nested 100,000 levels, a lone surrogate, no Content-Type;
  - clients that queue a streaming request and disconnect before their first token.

    python3 benchmarks/serve_soak.py                     # SmolLM2, 64 streams, 60 s per run
    python3 benchmarks/serve_soak.py --duration 10 --streams 16

The JSON goes to benchmarks/results/<machine>/serve_soak.json unless -o says otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from serve_load import _astream, _free_port, _wait  # noqa: E402


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))] if xs else float("nan")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Sampler(threading.Thread):
    """/health latency every 50 ms (a fresh connection each time, as a probe makes) and the
    server's RSS, in a thread of its own so the load's event loop does not delay it."""

    def __init__(self, port: int, pid: int):
        super().__init__(daemon=True)
        self.port, self.pid = port, pid
        self.health: list[float] = []
        self.statuses: list[int] = []
        self.peak_rss = 0
        self.stop = threading.Event()

    def run(self):
        req = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
                    s.sendall(req)
                    got = b""
                    while b := s.recv(65536):
                        got += b
                self.health.append(time.perf_counter() - t0)
                self.statuses.append(int(got.split()[1]))
            except OSError:
                self.statuses.append(0)
            self.peak_rss = max(self.peak_rss, _rss_kib(self.pid))
            self.stop.wait(0.05)


async def _exchange(port: int, data: bytes, trickle: float = 0.0, read: bool = True,
                    hold: float = 0.0) -> int:
    """Send `data` (a byte per `trickle` seconds when set); the status answered (0: none)."""
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return 0
    try:
        if trickle:
            for i in range(len(data)):
                w.write(data[i:i + 1])
                await w.drain()
                await asyncio.sleep(trickle)
                if r.at_eof():
                    break
        else:
            w.write(data)
            await w.drain()
        if hold:
            await asyncio.sleep(hold)
            return -1
        if not read:
            return -1
        head = await asyncio.wait_for(r.readuntil(b"\r\n"), 120)
        return int(head.split()[1])
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError,
            IndexError):
        return 0
    finally:
        w.close()


def _post(body: bytes, ctype: bytes | None = b"application/json", extra: bytes = b"",
          length: int | None = None) -> bytes:
    h = b"" if ctype is None else b"Content-Type: " + ctype + b"\r\n"
    n = len(body) if length is None else length
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + h + extra +
            b"Content-Length: %d\r\n\r\n" % n + body)


def _hostile_requests() -> list[tuple[str, bytes]]:
    small = b'{"prompt": "Hi", "max_tokens": 4}'
    deep = b'{"prompt": "x", "user": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    big = json.dumps({"prompt": "word " * 780_000, "max_tokens": 4}).encode()  # 3.9 MB
    return [
        ("1 MB header", _post(small, extra=b"X-Big: " + b"a" * 1_000_000 + b"\r\n")),
        ("10,000 headers", _post(small, extra=b"".join(b"X-%d: 1\r\n" % i
                                                        for i in range(10_000)))),
        ("5 MB body", _post(b"{", length=5_000_000)),
        ("3.9 MB prompt", _post(big)),
        ("deep JSON", _post(deep)),
        ("lone surrogate", _post(b'{"prompt": "Hi \\ud800", "max_tokens": 4}')),
        ("no Content-Type", _post(small, ctype=None)),
    ]


async def _soak(port: int, a, hostile: bool) -> dict:
    end = time.perf_counter() + a.duration
    ttft: list[float] = []
    errors: dict[str, int] = {}
    statuses: dict[str, dict[int, int]] = {}

    def note(kind: str, status: int):
        statuses.setdefault(kind, {}).setdefault(status, 0)
        statuses[kind][status] += 1

    async def good(i: int):
        k = 0
        while time.perf_counter() < end:
            body = {"prompt": f"Tell me about item {i}-{k}.", "max_tokens": a.max_tokens,
                    "temperature": 0, "ignore_eos": True}
            k += 1
            try:
                r = await _astream(port, body)
                ttft.append(r["times"][0] - r["start"])
                note("well-behaved", 200)
            except Exception as e:  # noqa: BLE001  (every failure is a finding: counted)
                m = re.search(r"HTTP (\d+)", str(e))
                note("well-behaved", int(m.group(1)) if m else 0)
                errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1
                await asyncio.sleep(0.1)

    async def slow(i: int):
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
        while time.perf_counter() < end:
            note("slow", await _exchange(port, head, trickle=1.0))

    async def oversized():
        reqs = _hostile_requests()
        k = 0
        while time.perf_counter() < end:
            name, data = reqs[k % len(reqs)]
            k += 1
            note(name, await _exchange(port, data))
            await asyncio.sleep(0.2)

    async def leavers():
        body = json.dumps({"prompt": "Hello there", "max_tokens": 64, "stream": True,
                           "ignore_eos": True}).encode()
        while time.perf_counter() < end:
            note("left while queued", await _exchange(port, _post(body), hold=0.3))
            await asyncio.sleep(0.1)

    tasks = [good(i) for i in range(a.streams)]
    if hostile:
        tasks += [slow(i) for i in range(a.slow)] + [oversized(), leavers()]
    await asyncio.gather(*tasks)
    fivexx = sum(n for per in statuses.values() for s, n in per.items() if s >= 500)
    return {"ttft_p50_s": statistics.median(ttft) if ttft else None,
            "ttft_p99_s": _pct(ttft, 0.99), "well_behaved_requests": len(ttft),
            "statuses": {k: {str(s): n for s, n in sorted(v.items())}
                         for k, v in statuses.items()},
            "errors": errors, "status_5xx": fivexx}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="GGUF (default: SmolLM2 in the cache)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds per run (default 60)")
    ap.add_argument("--streams", type=int, default=64, help="well-behaved clients (default 64)")
    ap.add_argument("--slow", type=int, default=100, help="slow clients (default 100)")
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per well-behaved request")
    ap.add_argument("--parallel", type=int, default=16, help="the server's --parallel")
    ap.add_argument("--ctx", type=int, default=1024, help="the server's --ctx")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-o", "--out", default="", metavar="FILE.json",
                    help="where the JSON goes (default benchmarks/results/<machine>/"
                    "serve_soak.json)")
    ap.add_argument("--conditions", default=None, help="free text stored with the results")
    a = ap.parse_args(argv)
    from isaforge.bench.machine import provenance, save_path, script_command
    from isaforge.settings import default_model_path

    out = save_path(a.out, "serve_soak")
    model = a.model or str(default_model_path())
    port = _free_port()
    cmd = [sys.executable, "-m", "isaforge", "serve", model, "--port", str(port), "--parallel",
           str(a.parallel), "--ctx", str(a.ctx), "--threads", str(a.threads), "--queue", "256"]
    print(f"# {' '.join(cmd)}", file=sys.stderr)
    log = tempfile.TemporaryFile()  # the server's stderr, searched for tracebacks at the end
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    runs = {}
    try:
        _wait(f"http://127.0.0.1:{port}", proc)
        asyncio.run(_astream(port, {"prompt": "Hello", "max_tokens": 8, "ignore_eos": True}))
        time.sleep(1)
        idle = _rss_kib(proc.pid)
        for name, hostile in (("alone", False), ("with_hostile", True)):
            sampler = Sampler(port, proc.pid)
            sampler.start()
            res = asyncio.run(_soak(port, a, hostile))
            sampler.stop.set()
            sampler.join()
            h = sampler.health
            res.update({"health_p50_s": _pct(h, 0.5), "health_p99_s": _pct(h, 0.99),
                        "health_max_s": max(h) if h else None, "health_probes": len(h),
                        "health_not_200": sum(s != 200 for s in sampler.statuses),
                        "peak_rss_kib": sampler.peak_rss})
            runs[name] = res
            print(f"  {name}: TTFT p50 {res['ttft_p50_s']:.3f} s p99 {res['ttft_p99_s']:.3f} s "
                  f"({res['well_behaved_requests']} requests), /health p99 "
                  f"{res['health_p99_s'] * 1000:.1f} ms max {res['health_max_s'] * 1000:.1f} "
                  f"ms, 5xx {res['status_5xx']}, peak RSS {sampler.peak_rss / 1024:.0f} MiB",
                  file=sys.stderr)
            time.sleep(2)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.seek(0)
    server_log = log.read().decode(errors="replace")
    log.close()
    command = script_command("benchmarks/serve_soak.py", sys.argv[1:] if argv is None else argv)
    a_, h_ = runs["alone"], runs["with_hostile"]
    res = {"provenance": provenance(command, a.conditions), "model": model,
           "server_command": cmd[1:], "duration_s": a.duration, "streams": a.streams,
           "slow_clients": a.slow, "max_tokens": a.max_tokens, "idle_rss_kib": idle,
           "runs": runs, "exit_status": proc.returncode,
           "tracebacks_in_log": server_log.count("Traceback"),
           "first_traceback": server_log[server_log.find("Traceback"):][:3000]
           if "Traceback" in server_log else None,
           "ttft_p99_ratio": h_["ttft_p99_s"] / a_["ttft_p99_s"],
           "peak_rss_ratio": max(a_["peak_rss_kib"], h_["peak_rss_kib"]) / idle}
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"idle RSS {idle / 1024:.0f} MiB; TTFT p99 with/without hostile traffic "
          f"{res['ttft_p99_ratio']:.2f}x; peak RSS {res['peak_rss_ratio']:.2f}x idle; exit "
          f"{proc.returncode}; tracebacks in the log: {res['tracebacks_in_log']}; -> {out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
