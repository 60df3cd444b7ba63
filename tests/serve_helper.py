"""Start `isaforge serve` on 127.0.0.1 for a test and stop it after (SIGTERM, then SIGKILL):
no process or port is left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


class Served:
    def __init__(self, proc: subprocess.Popen, port: int, api_key: str | None):
        self.proc, self.port, self.api_key = proc, port, api_key
        self.base = f"http://127.0.0.1:{port}"

    def client(self, **kw):
        import openai

        kw.setdefault("api_key", self.api_key or "none")
        return openai.OpenAI(base_url=self.base + "/v1", max_retries=0, timeout=60, **kw)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path: str, body: bytes | dict, headers: dict | None = None
             ) -> tuple[int, dict, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, dict(r.headers), json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), json.loads(e.read() or b"{}")


@contextlib.contextmanager
def serve(model, *args: str, api_key: str | None = None, timeout: float = 60):
    pytest.importorskip("uvicorn")
    pytest.importorskip("starlette")
    port = free_port()
    cmd = [sys.executable, "-m", "isaforge", "serve", str(model), "--port", str(port), *args]
    if api_key:
        cmd += ["--api-key", api_key]
    env = {**os.environ, "ISAFORGE_API_KEY": ""}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    s = Served(proc, port, api_key)
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited {proc.returncode}: "
                                   f"{proc.stderr.read().decode()[-2000:]}")
            try:
                if s.get("/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() - t0 > timeout:
                raise RuntimeError("server did not start")
            time.sleep(0.1)
        yield s
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stderr.close()
