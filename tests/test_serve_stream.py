"""The server's streaming path in pieces (serve/app.py): a token's SSE chunk spliced into a
template is the bytes json.dumps gives for the same chunk, and the relay hands a scheduler
step's events to the event loop in one wake-up (a closed loop cancels the requests). And the
load client of benchmarks/serve_load.py: its SSE reader fed a byte at a time, and its counts
against a real server equal a full parse of the same responses."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import threading
import urllib.request
from json.encoder import encode_basestring
from pathlib import Path

import pytest

pytest.importorskip("starlette")
from isaforge.serve.app import _MID, DONE, _Inbox, _Relay, _token_template, sse  # noqa: E402
from serve_helper import serve  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "serve_load", Path(__file__).parents[1] / "benchmarks" / "serve_load.py")
serve_load = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serve_load)

PIECES = ["a", " the", '"quoted"', "back\\slash", "ü 中文 😀", "\n\t\x00\x1f\x7f", "\u2028",
          "</script>", ""]


@pytest.mark.parametrize("chat", [False, True])
def test_token_template_is_the_chunk_json(chat):
    ids, created = 'cmpl-"x"\\y', 1733011200
    for model in ("SmolLM2", 'we"ird\\ name ü'):
        obj = "chat.completion.chunk" if chat else "text_completion"
        head, tail = _token_template(ids, obj, created, model, chat, "fp_0123456789ab")
        for i in (0, 3, 15):
            for piece in PIECES:
                got = head + b"%d" % i + _MID[chat] + encode_basestring(piece).encode() + tail
                ch = ({"index": i, "delta": {"content": piece}} if chat else
                      {"index": i, "text": piece})
                want = sse({"id": ids, "object": obj, "created": created, "model": model,
                            "system_fingerprint": "fp_0123456789ab",
                            "choices": [{**ch, "logprobs": None, "finish_reason": None}]})
                assert got == want
                assert json.loads(got[len(b"data: "):])["choices"][0]["index"] == i
    assert DONE == b"data: [DONE]\n\n"


class _FakeScheduler:
    def __init__(self):
        self.listeners = []

    def add_step_listener(self, fn):
        self.listeners.append(fn)


class _Req:
    cancelled = False

    def cancel(self):
        self.cancelled = True


def test_relay_wakes_the_loop_once_per_step():
    sched = _FakeScheduler()
    relay = _Relay(sched)
    assert sched.listeners == [relay.flush]

    async def main():
        loop = asyncio.get_running_loop()
        calls = []
        orig = loop.call_soon_threadsafe

        def counted(*a):
            calls.append(a[0])
            return orig(*a)
        loop.call_soon_threadsafe = counted
        inboxes = [_Inbox() for _ in range(3)]
        reqs = [[_Req()] for _ in range(3)]
        emits = [relay.emitter(loop, b, r, 0) for b, r in zip(inboxes, reqs, strict=True)]

        def scheduler_thread():  # two steps: a token each, then a token and done each
            for step in range(2):
                for i, e in enumerate(emits):
                    e("token", 10 * step + i, None)
                    if step:
                        e("done", "length", None)
                relay.flush()
            relay.flush()  # nothing pending: no wake-up
        t = threading.Thread(target=scheduler_thread)
        t.start()
        got = [[] for _ in inboxes]
        for i, b in enumerate(inboxes):
            while len(got[i]) < 3:
                await asyncio.wait_for(b.wait(), 5)
                got[i] += b.take()
        t.join()
        assert len(calls) == 2  # one per step, not one per event
        assert got == [[(0, "token", i, None), (0, "token", 10 + i, None),
                        (0, "done", "length", None)] for i in range(3)]
        return loop

    loop = asyncio.run(main())
    # the loop is closed now: a step's events for it cancel their requests
    reqs = [_Req(), _Req()]
    relay.emitter(loop, _Inbox(), reqs, 0)("token", 1, None)
    relay.flush()
    assert all(r.cancelled for r in reqs)


def test_load_client_reader_a_byte_at_a_time():
    events = [{"choices": [{"index": 0, "text": t}]} for t in ("Once", "", " upon", "ü")]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    body += b": a comment\r\n\r\ndata: " + json.dumps(events[0]).encode() + b"\r\n\r\n"
    body += b"data: [DONE]\n\n"
    cut = [0, 7, 8, 50, 51, 120, len(body)]  # chunk boundaries anywhere
    chunked = b"".join(b"%x;ext=1\r\n%s\r\n" % (b - a, body[a:b])
                       for a, b in zip(cut, cut[1:], strict=False)) + b"0\r\n\r\n"
    for raw, is_chunked in ((body, False), (chunked, True)):
        r = serve_load.SSEReader(is_chunked)
        n = sum(r.feed(raw[i:i + 1]) for i in range(len(raw)))
        assert (n, r.done) == (4, True)
        r = serve_load.SSEReader(is_chunked)
        assert (r.feed(raw), r.done) == (4, True)


def test_load_client_counts_what_the_server_sent(stories):
    body = {"prompt": "Once upon a time", "max_tokens": 20, "temperature": 0,
            "ignore_eos": True, "stream": True}
    with serve(stories / "stories260K.bin", "--parallel", "3") as srv:
        req = urllib.request.Request(srv.base + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            lines = [ln.strip() for ln in r.read().split(b"\n")]
        evs = [json.loads(ln[6:]) for ln in lines if ln.startswith(b"data: {")]
        want = sum(bool(e["choices"] and e["choices"][0]["text"]) for e in evs)
        assert lines.count(b"data: [DONE]") == 1 and want > 10
        one = serve_load._stream(srv.port, body)
        assert len(one["times"]) == want and one["times"][0] >= one["start"]
        res = serve_load._level(srv.port, 3, 20, {"ignore_eos": True}, 0, srv.proc.pid)
        assert res["streams"] == 3 and res["tokens"] > 30
        assert res["aggregate_tok_s"] > 0 and 0 < res["ttft_p50_s"] <= res["ttft_p99_s"]
        assert res["client_cpu_s"] > 0 and res["server_cpu_s"] > 0


def test_stream_body_goes_straight_to_the_server():
    """_App leaves the ASGI server's send in the scope: an SSEResponse sends its start
    through the middlewares and its body blocks through the server's own send."""
    from starlette.routing import Route

    from isaforge.serve.app import RAW_SEND, SSEResponse, _App

    async def blocks():
        yield b"data: 1\n\n"
        yield b"data: 2\n\n" + DONE

    async def endpoint(request):
        return SSEResponse(blocks(), lambda: None)

    app = _App(routes=[Route("/s", endpoint)])
    sent = []

    async def server_send(msg):  # and whether Starlette's error middleware passed it on
        f, via = sys._getframe(1), False
        while f is not None:
            via |= f.f_code.co_name == "_send" and "middleware" in f.f_code.co_filename
            f = f.f_back
        sent.append({**msg, "via_middleware": via})

    async def receive():
        await asyncio.sleep(10)
        return {"type": "http.disconnect"}

    scope = {"type": "http", "method": "GET", "path": "/s", "raw_path": b"/s",
             "query_string": b"", "headers": [], "http_version": "1.1", "scheme": "http",
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1), "root_path": ""}
    asyncio.run(app(scope, receive, server_send))
    assert scope[RAW_SEND] is server_send
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body",
                                         "http.response.body"]
    assert [m.get("body") for m in sent[1:]] == [b"data: 1\n\n", b"data: 2\n\n" + DONE]
    assert [m.get("more_body") for m in sent[1:]] == [True, False]
    assert [m["via_middleware"] for m in sent] == [True, False, False]
