"""The server's streaming path in pieces (serve/app.py): a token's SSE chunk spliced into a
template is the bytes json.dumps gives for the same chunk, and the relay hands a scheduler
step's events to the event loop in one wake-up (a closed loop cancels the requests)."""

from __future__ import annotations

import asyncio
import json
import threading
from json.encoder import encode_basestring

import pytest

pytest.importorskip("starlette")
from isaforge.serve.app import _MID, DONE, _Inbox, _Relay, _token_template, sse  # noqa: E402

PIECES = ["a", " the", '"quoted"', "back\\slash", "ü 中文 😀", "\n\t\x00\x1f\x7f", "\u2028",
          "</script>", ""]


@pytest.mark.parametrize("chat", [False, True])
def test_token_template_is_the_chunk_json(chat):
    ids, created = 'cmpl-"x"\\y', 1733011200
    for model in ("SmolLM2", 'we"ird\\ name ü'):
        obj = "chat.completion.chunk" if chat else "text_completion"
        head, tail = _token_template(ids, obj, created, model, chat)
        for i in (0, 3, 15):
            for piece in PIECES:
                got = head + b"%d" % i + _MID[chat] + encode_basestring(piece).encode() + tail
                ch = ({"index": i, "delta": {"content": piece}} if chat else
                      {"index": i, "text": piece})
                want = sse({"id": ids, "object": obj, "created": created, "model": model,
                            "system_fingerprint": None,
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
