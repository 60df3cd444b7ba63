"""The server under concurrent load: 32 streaming requests with
--parallel 8 all complete, each equal to the same request run alone at temperature 0; the
process's memory after the run is within 10% of before; a full queue answers 429 with
Retry-After; a client killed mid-stream frees its slot; SIGTERM drains the requests in
flight and exits 0."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from serve_helper import rss_kib, serve

openai = pytest.importorskip("openai")

NAMES = ["Lily", "Tom", "Sue", "Ben", "Max", "Mia", "Sam", "Zoe"]
PROMPTS = [f"{w} {n}" for w in ("Once upon a time,", "One day", "The dog and", "In the park")
           for n in NAMES]  # 32


def _stream(client, prompt, max_tokens=48):
    chunks = client.completions.create(model="stories260K", prompt=prompt,
                                       max_tokens=max_tokens, temperature=0, stream=True)
    text, reason = "", None
    for ch in chunks:
        text += ch.choices[0].text
        reason = ch.choices[0].finish_reason or reason
    return text, reason


def test_32_streams_parallel_8(stories):
    with serve(stories / "stories260K.bin", "--parallel", "8", "--threads", "2") as s:
        c = s.client()
        alone = [_stream(c, p) for p in PROMPTS]  # one at a time (also warms the server)
        before = rss_kib(s.proc.pid)
        with ThreadPoolExecutor(32) as pool:
            together = list(pool.map(lambda p: _stream(s.client(), p), PROMPTS))
        after = rss_kib(s.proc.pid)
        assert together == alone
        assert all(reason in ("length", "stop") for _, reason in together)
        assert len({t for t, _ in alone}) > 16  # the prompts really differ
        assert abs(after - before) <= 0.10 * before, (before, after)
        steps = _metric(s, "isaforge_decode_steps_total")
        gen = _metric(s, "isaforge_generated_tokens_total")
        assert gen >= 2 * 32 * 40 and steps < 0.75 * gen  # rows were decoded together


def _open_stream(port: int, body: dict) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    got = b""
    while b"data: " not in got:  # the first event arrived: the request holds a slot
        got += sock.recv(4096)
    return sock


def _metric(s, name: str) -> float:
    return float(s.get("/metrics")[1].split(f"\n{name} ")[1].split()[0])


def test_queue_full_and_killed_client(smollm2_gguf):
    with serve(smollm2_gguf, "--parallel", "1", "--queue", "1", "--ctx", "512") as s:
        long = {"prompt": "Write a long story about a dragon.", "max_tokens": 400,
                "temperature": 0, "stream": True, "ignore_eos": True}
        sock = _open_stream(s.port, long)  # holds the only slot
        waiting = threading.Thread(target=s.post, args=("/v1/completions", {
            "prompt": "Hi", "max_tokens": 2, "temperature": 0}))
        waiting.start()  # fills the queue
        t0 = time.monotonic()
        while _metric(s, "isaforge_queue_depth") < 1 and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        code, headers, body = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        assert code == 429 and body["error"]["code"] == "queue_full"
        assert {k.lower(): v for k, v in headers.items()}["retry-after"] == "1"
        with pytest.raises(openai.RateLimitError):
            s.client().completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt="Hi",
                                          max_tokens=2)
        sock.close()  # the client dies mid-stream: its slot is freed at the next step
        waiting.join(30)
        assert not waiting.is_alive()
        t0 = time.monotonic()
        r = s.client().completions.create(model="SmolLM2-135M-Instruct.Q4_1", prompt="Hello",
                                          max_tokens=3, temperature=0)
        assert r.usage.completion_tokens == 3 and time.monotonic() - t0 < 10
        gen = _metric(s, "isaforge_generated_tokens_total")
        assert gen < 200, gen  # the dead stream did not run on to its 400 tokens
        assert _metric(s, "isaforge_active_slots") == 0
        # a client waiting for a non-streaming reply dies: its slot is freed at the next step
        data = json.dumps({**long, "stream": False}).encode()
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: " + str(len(data)).encode() +
                         b"\r\n\r\n" + data)
            t0 = time.monotonic()
            while _metric(s, "isaforge_active_slots") < 1 and time.monotonic() - t0 < 10:
                time.sleep(0.05)
        t0 = time.monotonic()
        while _metric(s, "isaforge_active_slots") > 0 and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert time.monotonic() - t0 < 3
        assert _metric(s, "isaforge_generated_tokens_total") < gen + 150


def test_sigterm_drains(stories):
    with serve(stories / "stories260K.bin", "--parallel", "2") as s:
        c = s.client()
        want = _stream(c, "Once upon a time", 300)
        chunks = c.completions.create(model="stories260K", prompt="Once upon a time",
                                      max_tokens=300, temperature=0, stream=True)
        it = iter(chunks)
        text = next(it).choices[0].text
        s.proc.send_signal(signal.SIGTERM)
        for ch in it:
            text += ch.choices[0].text
        assert text == want[0]
        assert s.proc.wait(20) == 0
