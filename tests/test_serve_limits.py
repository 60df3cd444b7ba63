"""The server's HTTP layer under hostile or broken clients: every malformed request is a 4xx
in OpenAI's error shape (lone surrogates, deep JSON, no Content-Type, oversized heads and
prompts), half-sent requests and idle connections are closed after --read-timeout, the
connection count is bounded, clients that leave the queue free their places at once, and
SIGTERM answers new requests with 503 while the drain cuts late streams with an error event."""

from __future__ import annotations

import json
import re
import signal
import socket
import time

import pytest

from serve_helper import serve

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def srv(stories):
    with serve(stories / "stories260K.bin", "--parallel", "2", "--read-timeout", "1",
               "--max-connections", "8", "--max-headers", "20",
               "--max-header-bytes", "4096") as s:
        yield s


def _raw(port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send `data` on a fresh connection; everything the server sends until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return _read_all(sock)


def _read_all(sock: socket.socket) -> bytes:
    got = b""
    while True:
        try:
            b = sock.recv(65536)
        except ConnectionResetError:
            return got
        if not b:
            return got
        got += b


def _error(resp: bytes) -> tuple[int, dict]:
    head, _, body = resp.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


def _post(port: int, body: bytes, ctype: str | None = "application/json",
          extra: bytes = b"") -> bytes:
    h = b"" if ctype is None else b"Content-Type: " + ctype.encode() + b"\r\n"
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + h + extra +
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def test_lone_surrogates_read_as_u_fffd(srv):
    # "\ud800" pairs with nothing: U+FFFD, what a UTF-8 decoder gives for a bad byte (the
    # command line's rule), so the reply equals the one for the U+FFFD prompt
    code, _, lone = srv.post("/v1/completions", b'{"prompt": "Hi \\ud800 there", '
                                                b'"max_tokens": 8, "temperature": 0}')
    assert code == 200, lone
    code, _, plain = srv.post("/v1/completions", {"prompt": "Hi \ufffd there",
                                                  "max_tokens": 8, "temperature": 0})
    assert code == 200 and lone["choices"][0]["text"] == plain["choices"][0]["text"]
    assert lone["usage"] == plain["usage"]
    code, _, pair = srv.post("/v1/completions", b'{"prompt": "Hi \\ud83d\\ude00", '
                                                b'"max_tokens": 2, "echo": true}')
    assert code == 200 and pair["choices"][0]["text"].startswith("Hi \U0001F600")


def test_deep_json_is_400(srv):
    for depth in (65, 100_000):
        body = b'{"prompt": "x", "user": ' + b"[" * depth + b"]" * depth + b"}"
        code, _, r = srv.post("/v1/completions", body)
        assert code == 400 and r["error"]["code"] == "json_too_deep", r
        assert "deeper than 64 levels" in r["error"]["message"]
    ok = b'{"prompt": "x", "max_tokens": 1, "user": ' + b"[" * 63 + b"]" * 63 + b"}"
    assert srv.post("/v1/completions", ok)[0] == 200
    args = "[" * 100_000 + "]" * 100_000  # a tool call's arguments, parsed for the template
    msgs = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": args}}]}]
    code, _, r = srv.post("/v1/chat/completions", {"messages": msgs})
    assert code == 400 and r["error"]["code"] == "json_too_deep"
    assert r["error"]["param"] == "messages[0].tool_calls[0].function.arguments"


def test_content_type_is_checked(srv):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 1}).encode()
    for ctype in (None, "text/plain", "application/x-www-form-urlencoded"):
        code, err = _error(_raw(srv.port, _post(srv.port, body, ctype)))
        assert code == 415 and err["code"] == "unsupported_media_type", (ctype, err)
    code, _ = _error(_raw(srv.port, _post(srv.port, b"{}", "application/json; charset=utf-8")))
    assert code == 400  # the type is right: the missing prompt is what is wrong


def test_header_limits_431(srv):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 1}).encode()
    code, err = _error(_raw(srv.port, _post(srv.port, body, extra=b"X-Big: " + b"a" * 1_000_000
                                            + b"\r\n")))
    assert code == 431 and err["code"] == "headers_too_large"
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(21))
    code, err = _error(_raw(srv.port, _post(srv.port, body, extra=many)))
    assert code == 431 and err["code"] == "too_many_headers"
    enough = b"".join(b"X-%d: 1\r\n" % i for i in range(16))  # 20 with the 4 of _post
    assert _raw(srv.port, _post(srv.port, body, extra=enough)).startswith(b"HTTP/1.1 200")


def test_prompt_refused_from_its_length(srv, stories):
    from isaforge.serve.backend import Backend

    b = Backend(stories / "stories260K.bin", parallel=1)
    n = b.ctx * b.max_token_bytes  # cannot fit: at least ctx tokens
    b.close()
    code, _, r = srv.post("/v1/completions", {"prompt": "a" * n})
    assert code == 400 and r["error"]["param"] == "prompt"
    assert f"the prompt is {n} bytes, at least {b.ctx} tokens" in r["error"]["message"]
    code, _, r = srv.post("/v1/chat/completions", {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "a" * n}]}]})
    assert code == 400 and f"the prompt is {n} bytes" in r["error"]["message"]
    # text after a NUL is not read by a llama2.c tokenizer, so it does not count
    code, _, r = srv.post("/v1/completions", {"prompt": "Hi\0" + "a" * n, "max_tokens": 1})
    assert code == 200


def test_half_sent_requests_time_out(srv):
    # the head never ends: 408 after --read-timeout (1 s), then the connection closes
    code, err = _error(_raw(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"))
    assert code == 408 and err["code"] == "request_timeout"
    # the body never ends: the same from the app
    code, err = _error(_raw(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                      b"Content-Type: application/json\r\n"
                                      b"Content-Length: 100\r\n\r\n{\"prompt\""))
    assert code == 408 and err["code"] == "request_timeout"
    # a connection that sends nothing is closed without an answer
    assert _raw(srv.port, b"") == b""


def test_connections_are_bounded(srv):
    socks = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(8)]
    try:
        time.sleep(0.2)  # the server has accepted them all
        code, err = _error(_raw(srv.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
        assert code == 503 and err["code"] == "too_many_connections"
        for s in socks:  # each idle one is closed after --read-timeout
            assert _read_all(s) == b""
    finally:
        for s in socks:
            s.close()
    assert srv.get("/health")[0] == 200


def test_api_key_sources(stories, tmp_path):
    from conftest import cli

    r = cli("serve", str(stories / "stories260K.bin"), "--api-key", "s\u00e9same")
    assert r.returncode == 2 and b"printable ASCII" in r.stderr
    f = tmp_path / "key"
    f.write_text("sk-from-file\n")
    with serve(stories / "stories260K.bin", "--parallel", "1", "--api-key-file", str(f)) as s:
        assert s.post("/v1/completions", {"prompt": "x", "max_tokens": 1})[0] == 401
        code, _, _ = s.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                            headers={"Authorization": "Bearer sk-from-file"})
        assert code == 200


# -- with a model slow enough to hold a slot: SmolLM2 ------------------------------------------

def _long_stream(port: int, max_tokens: int = 480) -> socket.socket:
    body = json.dumps({"prompt": PROMPT, "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True, "temperature": 0}).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(_post(port, body))
    got = b""
    while b"data: " not in got:  # the first token: it holds the slot
        got += sock.recv(65536)
    return sock


def _health(s) -> dict:
    return json.loads(s.get("/health")[1])


def _until(cond, timeout=20.0):
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout
        time.sleep(0.05)


def test_queue_forgets_clients_that_left(smollm2_gguf):
    with serve(smollm2_gguf, "--parallel", "1", "--ctx", "512", "--queue", "3") as s:
        runner = _long_stream(s.port)
        try:
            body = json.dumps({"prompt": "Hi", "max_tokens": 1}).encode()
            streamed = json.dumps({"prompt": "Hi", "max_tokens": 1, "stream": True}).encode()
            waiters = []
            for b in (body, streamed, streamed):
                w = socket.create_connection(("127.0.0.1", s.port), timeout=30)
                w.sendall(_post(s.port, b))
                waiters.append(w)
            _until(lambda: _health(s)["queued"] == 3)
            for w in waiters:
                w.close()
            _until(lambda: _health(s)["queued"] == 0)
            assert _health(s)["active"] == 1  # the long stream still runs: they really left
            resp = _raw(s.port, _post(s.port, body), timeout=60)
            assert resp.startswith(b"HTTP/1.1 200"), resp  # a place in the queue, not a 429
            _, metrics = s.get("/metrics")
            assert "isaforge_abandoned_total 3" in metrics
            assert "isaforge_rejected_total 0" in metrics
        finally:
            runner.close()
        # nothing of theirs is left waiting: the server stops at once, with a clean log
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(20) == 0
        log = s.proc.stderr.read().decode()
        assert "Traceback" not in log, log


def test_sigterm_503_and_cut_streams(smollm2_gguf):
    with serve(smollm2_gguf, "--parallel", "1", "--ctx", "512", "--drain", "1") as s:
        runner = _long_stream(s.port)
        s.proc.send_signal(signal.SIGTERM)
        _until(lambda: _health(s)["status"] == "draining")
        code, headers, r = s.post("/v1/completions", {"prompt": "x"})
        assert code == 503 and r["error"]["code"] == "shutting_down"
        assert headers.get("retry-after", headers.get("Retry-After")) == "1"
        rest = _read_all(runner).decode()  # cut at the drain deadline, still well formed
        runner.close()
        events = re.findall(r"data: ([^\n]*)\n\n", rest)  # each event within one chunk
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == "shutting_down"
        assert s.proc.wait(20) == 0
        log = s.proc.stderr.read().decode()
        assert "Traceback" not in log and "CancelledError" not in log, log
