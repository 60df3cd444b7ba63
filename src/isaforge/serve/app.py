"""The OpenAI-compatible HTTP app (Starlette): /v1/chat/completions, /v1/completions (SSE
streaming ending in [DONE], or one JSON body), /v1/embeddings (embeddings.py), /v1/models,
/health, /metrics; llama.cpp's /tokenize and /detokenize (routes_text.py).

Each request is checked (protocol.py), tokenized off the event loop, and handed to the
Backend's Scheduler as `n` Requests whose tokens come back through the loop; text is decoded
incrementally (never splitting a UTF-8 character) and cut before any stop string, of which
nothing is ever sent. A client that goes away cancels its requests, which frees their slots
at the next step."""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from json.encoder import encode_basestring

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..runtime.batch import QueueFullError
from ..runtime.responses import Choice as _Choice
from ..runtime.responses import chat_logprobs as _chat_lp
from ..runtime.responses import (
    choice_body,
    usage_body,
)
from ..runtime.responses import text_logprobs as _text_lp
from .embeddings import embeddings
from .metrics import Metrics
from .protocol import APIError, bad, loads, parse_chat, parse_completion
from .routes_text import routes as text_routes
from .structured import constraint
from .tools import chat_plan

DEFAULT_MAX_BODY = 4 << 20  # bytes
DEFAULT_READ_TIMEOUT = 10.0  # seconds for a request's body
RETRY_AFTER_S = 1
WORKERS = 2  # threads for request-sized CPU work (parsing, templates, tokenizing)
SHUTDOWN = "the server is shutting down"


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


_MID = {False: b',"text":', True: b',"delta":{"content":'}


def _token_template(ids: str, obj: str, created: int, model: str, chat: bool, fp: str
                    ) -> tuple[bytes, bytes]:
    """The bytes around a streamed token's index and text: head + b"%d" % index + _MID[chat]
    + JSON string + tail is sse() of that token's chunk."""
    d = lambda v: json.dumps(v, ensure_ascii=False)  # noqa: E731
    head = (f'data: {{"id":{d(ids)},"object":{d(obj)},"created":{int(created)},'
            f'"model":{d(model)},"system_fingerprint":{d(fp)},"choices":[{{"index":')
    tail = ('}' if chat else '') + ',"logprobs":null,"finish_reason":null}]}\n\n'
    return head.encode(), tail.encode()


DONE = b"data: [DONE]\n\n"
RAW_SEND = "isaforge.send"  # scope key: the ASGI server's send, as _App received it


def sse(obj) -> bytes:
    """One server-sent event: compact JSON as OpenAI sends it (non-ASCII kept)."""
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


class SSEResponse(Response):
    """Server-sent events from an async generator of byte blocks (each block one or more
    events, written at once; the block ending in "data: [DONE]" ends the body); a client that
    disconnects calls on_disconnect (which cancels its requests)."""

    def __init__(self, blocks, on_disconnect):
        self.status_code = 200
        self.background = None
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8"),
                            (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
        self.blocks, self.on_disconnect = blocks, on_disconnect

    async def __call__(self, scope, receive, send):
        body_send = scope.get(RAW_SEND, send)  # the server's own, past the middlewares

        async def watch():
            while True:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    self.on_disconnect()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": self.raw_headers})
            more = True
            async for block in self.blocks:
                more = not block.endswith(DONE)
                await body_send({"type": "http.response.body", "body": block,
                                 "more_body": more})
            if more:
                await body_send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away while we wrote
            self.on_disconnect()
        finally:
            watcher.cancel()
            self.on_disconnect()  # idempotent: whatever is left is cancelled
            await self.blocks.aclose()


class _Cut(Exception):
    """The drain deadline passed: the stream ends with an error event."""


class _Inbox:
    """One HTTP request's scheduler events, (choice index, kind, value, extra), put here on
    the event loop by the _Relay, a step's worth at a time."""

    __slots__ = ("items", "waiter")

    def __init__(self):
        self.items: list = []
        self.waiter: asyncio.Future | None = None

    async def wait(self) -> None:
        """Until an event is here (at once if one is)."""
        if self.items:
            return
        self.waiter = asyncio.get_running_loop().create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def take(self) -> list:
        out, self.items = self.items, []
        return out


def _deliver(entries) -> None:
    """On the event loop: a step's events into their inboxes, each waiting reader woken."""
    for inbox, item in entries:
        inbox.items.append(item)
        w = inbox.waiter
        if w is not None and not w.done():
            w.set_result(None)


class _Relay:
    """Carries a Scheduler's events to the event loop: a request's emit (scheduler thread)
    only appends to a list; after each step (a step listener) one call_soon_threadsafe per
    loop hands over the whole step, so the loop wakes once per step for every stream rather
    than once per token. A loop that is gone (shutting down) cancels the requests."""

    def __init__(self, scheduler):
        self.pending: list = []
        scheduler.add_step_listener(self.flush)

    def emitter(self, loop, inbox: _Inbox, reqs: list, i: int):
        def emit(kind, value, extra):
            self.pending.append((loop, inbox, reqs, (i, kind, value, extra)))
        return emit

    def flush(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        loops: dict = {}
        for loop, inbox, reqs, item in batch:
            loops.setdefault(loop, []).append((inbox, reqs, item))
        for loop, entries in loops.items():
            try:
                loop.call_soon_threadsafe(_deliver, [(b, it) for b, _, it in entries])
            except RuntimeError:  # the event loop is closed: nobody listens
                for _, reqs, _ in entries:
                    for r in reqs:
                        r.cancel()


class Server:
    def __init__(self, backend, api_key: str | None = None, max_body: int = DEFAULT_MAX_BODY,
                 read_timeout: float = DEFAULT_READ_TIMEOUT, lenient: bool = False):
        self.backend = backend
        self.lenient = lenient  # unknown request fields ignored rather than refused
        self.api_key = api_key
        self.max_body = max_body
        self.read_timeout = read_timeout
        self.metrics = Metrics(backend.scheduler)
        self.relay = _Relay(backend.scheduler)
        self.draining = False
        # request-sized CPU work runs here, never on the event loop; the bound keeps a burst
        # of large requests from taking every core from the scheduler thread
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="isaforge-http")
        self.live: dict[_Inbox, list] = {}  # generations in flight: their inboxes and requests

    async def _work(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(
            self.pool, functools.partial(fn, *args))

    def busy(self) -> int:
        """Generations in flight (their responses not yet sent)."""
        return len(self.live)

    def cut(self) -> None:
        """The drain deadline: every generation in flight ends now, a stream with an SSE
        error event and [DONE], a JSON reply with a 503."""
        for inbox, reqs in list(self.live.items()):
            for r in reqs:
                r.cancel()
            _deliver([(inbox, (0, "cut", None, None))])

    # -- plumbing ------------------------------------------------------------------------------

    def _auth(self, request: Request) -> None:
        if not self.api_key:
            return
        h = request.headers.get("authorization", "")
        scheme, _, token = h.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(),
                                                                 self.api_key.encode()):
            raise APIError(401, "Missing or invalid API key (send Authorization: Bearer KEY)",
                           type="authentication_error", code="invalid_api_key",
                           headers={"WWW-Authenticate": "Bearer"})

    async def _body(self, request: Request) -> bytes:
        ctype = request.headers.get("content-type", "")
        if ctype.split(";", 1)[0].strip().lower() != "application/json":
            raise APIError(415, "the body must be JSON, sent with Content-Type: "
                                f"application/json (got {json.dumps(ctype or None)})",
                           code="unsupported_media_type")
        n = request.headers.get("content-length")
        if n is not None and n.isdigit() and int(n) > self.max_body:
            raise APIError(413, f"request body of {n} bytes exceeds the limit of "
                                f"{self.max_body} bytes", code="request_too_large")
        chunks, size = [], 0

        async def read():
            nonlocal size
            async for c in request.stream():
                size += len(c)
                if size > self.max_body:
                    raise APIError(413, f"request body exceeds the limit of {self.max_body} "
                                        "bytes", code="request_too_large")
                chunks.append(c)
        try:
            await asyncio.wait_for(read(), self.read_timeout)
        except asyncio.TimeoutError:
            raise APIError(408, f"the request body did not arrive within "
                                f"{self.read_timeout:g} s", code="request_timeout",
                           headers={"Connection": "close"}) from None
        return b"".join(chunks)

    def _parse(self, raw: bytes, chat: bool):
        """In the pool: the body's JSON, its fields, and the prompt checked against the
        context from its length alone (before any tokenizing)."""
        body = loads(raw, "the body")
        if not isinstance(body, dict):
            raise APIError(400, "the body must be a JSON object")
        model = self._model(body)
        if chat:
            messages, tools, params = parse_chat(body, self.lenient, self._vocab)
            params.plan = plan = chat_plan(body, tools, self.backend.template)
            self._fits(sum(self.backend.prompt_bytes(t) for t in _texts(messages)), "messages")
            params.constraint = constraint(self.backend, body, plan)  # tool_choice's too
            return model, (messages, plan.tools, plan.kwargs), params
        prompt, params = parse_completion(body, self.lenient, self._vocab)
        if isinstance(prompt, str):
            self._fits(self.backend.prompt_bytes(prompt), "prompt")
        params.constraint = constraint(self.backend, body)
        return model, prompt, params

    @property
    def _vocab(self) -> int:
        return self.backend.loaded.config.vocab_size

    def _fits(self, n_bytes: int, param: str) -> None:
        b = self.backend
        least = b.min_tokens(n_bytes)
        if least >= b.ctx:
            raise bad(param, f"the prompt is {n_bytes} bytes, at least {least} tokens (no token "
                             f"spans more than {b.max_token_bytes} bytes); the context holds "
                             f"{b.ctx}")

    def _model(self, body: dict) -> str:
        m = body.get("model")
        if m is None:
            return self.backend.name
        if not isinstance(m, str) or not self.backend.accepts(m):
            raise APIError(404, f"The model {json.dumps(m)} does not exist (this server runs "
                                f"{json.dumps(self.backend.name)})", param="model",
                           code="model_not_found")
        return m

    def _budget(self, n_prompt: int, params, prompt_field: str) -> int:
        ctx = self.backend.ctx
        if n_prompt >= ctx:
            raise bad(prompt_field, f"the prompt is {n_prompt} tokens; the context holds {ctx} "
                                    "(no room to generate)")
        room = ctx - n_prompt
        if params.max_tokens is None:
            return room
        if params.max_tokens > room:
            raise bad("max_tokens", f"max_tokens is {params.max_tokens}, but the prompt is "
                                    f"{n_prompt} tokens and the context holds {ctx}: at most "
                                    f"{room} can be generated")
        return params.max_tokens

    # -- endpoints -----------------------------------------------------------------------------

    async def chat(self, request: Request):
        return await self._generate(request, chat=True)

    async def completions(self, request: Request):
        return await self._generate(request, chat=False)

    async def _generate(self, request: Request, chat: bool):
        endpoint = "chat" if chat else "completions"
        try:
            self._auth(request)
            if self.draining:
                raise APIError(503, SHUTDOWN, type="server_error", code="shutting_down",
                               headers={"Retry-After": str(RETRY_AFTER_S),
                                        "Connection": "close"})
            raw = await self._body(request)
            model, prompt, params = await self._work(self._parse, raw, chat)
            if chat:
                try:
                    tokens = await self._work(self.backend.chat_tokens, *prompt)
                except ValueError as e:
                    raise bad("messages", str(e)) from None
            else:
                if isinstance(prompt, list):
                    v = self.backend.loaded.config.vocab_size
                    if not all(0 <= t < v for t in prompt):
                        raise bad("prompt", f"token ids must be in [0, {v})")
                    tokens = prompt
                else:
                    tokens = await self._work(self.backend.encode, prompt)
                if not tokens:
                    raise bad("prompt", "the prompt encodes to no tokens")
            max_new = self._budget(len(tokens), params, "messages" if chat else "prompt")
            echo = ""
            if params.echo:  # completions: the prompt's text first
                echo = prompt if isinstance(prompt, str) else await self._work(
                    self.backend.tokenizer.decode_tokens, tokens)
            if self.draining:  # began to drain while this one was read
                raise APIError(503, SHUTDOWN, type="server_error", code="shutting_down",
                               headers={"Retry-After": str(RETRY_AFTER_S)})
            resp = await self._run(request, chat, model, tokens, max_new, params, echo)
            self.metrics.request(endpoint, 200)
            return resp
        except APIError as e:
            self.metrics.request(endpoint, e.status)
            return error_response(e)

    async def _fingerprint(self) -> str:
        """The backend's fingerprint; while its file is still hashed (just after start), waited
        for in a thread, the event loop free (the request's tokens are already coming)."""
        f = self.backend.fingerprint
        if f.ready():
            return f.value()
        return await asyncio.get_running_loop().run_in_executor(None, f.value)

    async def _run(self, request, chat, model, tokens, max_new, params, echo=""):
        loop = asyncio.get_running_loop()
        inbox = _Inbox()
        choices = [_Choice(self.backend.tokenizer, i, tokens[-1], params.stop, params.logprobs)
                   for i in range(params.n)]
        reqs: list = []
        reqs += [self.backend.request(tokens, max_new, params,
                                      self.relay.emitter(loop, inbox, reqs, i), seed_offset=i)
                 for i in range(params.n)]
        for c, r in zip(choices, reqs, strict=True):
            c.req = r
            c.reply = params.plan.reply(params.seed, c.index) if params.plan else None
        try:
            for r in reqs:
                self.backend.scheduler.submit(r)
        except QueueFullError as e:
            for r in reqs:
                r.cancel()
            raise APIError(429, f"The server is busy: {e}; retry later", type="rate_limit_error",
                           code="queue_full", headers={"Retry-After": str(RETRY_AFTER_S)}
                           ) from None
        self.live[inbox] = reqs
        ids = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        obj = "chat.completion" if chat else "text_completion"

        def cancel_all():
            for r in reqs:
                r.cancel()
            if self.live.pop(inbox, None) is not None:
                # a request withdrawn from the queue sends no event: the reader stops here
                _deliver([(inbox, (0, "gone", None, None))])

        def usage():
            return usage_body(len(tokens), choices)

        try:  # just after start, generation runs while the file is still hashed
            fp = await self._fingerprint()
        except BaseException:
            cancel_all()
            raise
        if params.stream:
            return SSEResponse(self._stream(inbox, chat, choices, ids, created, model, obj,
                                            params, usage, echo, fp), cancel_all)
        # one JSON body: wait for every choice, watching for the client leaving
        left = len(reqs)
        gone = False

        async def watch():  # the body is read, so the next ASGI message is the disconnect
            nonlocal gone
            while (await request.receive())["type"] != "http.disconnect":
                pass
            gone = True
            cancel_all()

        watcher = asyncio.ensure_future(watch())
        try:
            while left and not gone:
                try:
                    await asyncio.wait_for(inbox.wait(), 0.5)
                except asyncio.TimeoutError:
                    pass
                for i, kind, value, extra in inbox.take():
                    if kind == "token":
                        choices[i].token(value, extra)
                    elif kind == "gone":
                        break
                    elif kind == "cut":
                        raise APIError(503, f"{SHUTDOWN}: the reply was cut at the drain "
                                            "deadline", type="server_error",
                                       code="shutting_down")
                    elif kind == "error":
                        raise RuntimeError(value)
                    else:
                        left -= 1
                        choices[i].done(value)
        except RuntimeError as e:
            raise APIError(500, f"generation failed: {e}", type="server_error") from None
        finally:
            watcher.cancel()
            cancel_all()
        out = [choice_body(c, chat, echo) for c in choices]
        return JSONResponse({"id": ids, "object": obj, "created": created, "model": model,
                             "system_fingerprint": fp, "choices": out, "usage": usage()})

    async def _stream(self, inbox, chat, choices, ids, created, model, obj, params, usage,
                      echo="", fp=None):
        """The SSE body in blocks: whatever one scheduler step released, written at once. A
        token's chunk without logprobs is a template with its index and text spliced in (the
        bytes json.dumps gives for the same dict, tests/test_serve_stream.py)."""
        kind_ = obj + (".chunk" if chat else "")

        def chunk(chs, **extra):
            return sse({"id": ids, "object": kind_, "created": created, "model": model,
                        "system_fingerprint": fp, "choices": chs, **extra})

        head, tail = _token_template(ids, kind_, created, model, chat, fp)
        offsets = [len(echo)] * len(choices)
        first = []
        if echo:
            first.append(chunk([{"index": c.index, "text": echo, "logprobs": None,
                                 "finish_reason": None} for c in choices]))
        if chat:
            first.append(chunk([{"index": c.index, "delta": {"role": "assistant",
                                                             "content": ""},
                                 "logprobs": None, "finish_reason": None} for c in choices]))
        if first:
            yield b"".join(first)
        left = len(choices)
        try:
            while left:
                await inbox.wait()
                out = []
                for i, kind, value, extra in inbox.take():
                    c = choices[i]
                    if kind == "gone":  # the client left: nobody reads on
                        return
                    if kind == "token":
                        piece, finished = c.token(value, extra), False
                    elif kind == "cut":
                        raise _Cut
                    elif kind == "error":
                        raise RuntimeError(value)
                    else:
                        left -= 1
                        piece, finished = c.done(value), True
                    if c.reply is not None:
                        for d in c.reply.feed(piece) + (c.reply.finish() if finished else []):
                            lp = _chat_lp(c.new_logprobs()) if c.want_lp else None
                            out.append(chunk([{"index": i, "delta": d, "logprobs": lp,
                                               "finish_reason": None}]))
                        if finished and c.reply.n_calls:
                            c.finish = "tool_calls"
                    elif piece:
                        lp = c.new_logprobs() if c.want_lp else None
                        if lp is None:
                            out.append(b"%s%d%s%s%s" % (head, i, _MID[chat],
                                                        encode_basestring(piece).encode(), tail))
                        elif chat:
                            out.append(chunk([{"index": i, "delta": {"content": piece},
                                               "logprobs": _chat_lp(lp),
                                               "finish_reason": None}]))
                        else:
                            out.append(chunk([{"index": i, "text": piece,
                                               "logprobs": _text_lp(lp, offsets[i]),
                                               "finish_reason": None}]))
                        offsets[i] += len(piece)
                    if finished:
                        if chat:
                            ch = {"index": i, "delta": {}, "logprobs": None,
                                  "finish_reason": c.finish}
                        else:
                            ch = {"index": i, "text": "", "logprobs": None,
                                  "finish_reason": c.finish}
                        out.append(chunk([ch]))
                if not left:
                    if params.include_usage:
                        out.append(chunk([], usage=usage()))
                    out.append(DONE)
                if out:
                    yield b"".join(out)
        except _Cut:
            yield sse({"error": {"message": f"{SHUTDOWN}: the reply was cut at the drain "
                                            "deadline", "type": "server_error", "param": None,
                                 "code": "shutting_down"}}) + DONE
        except RuntimeError as e:
            yield sse({"error": {"message": f"generation failed: {e}", "type": "server_error",
                                 "param": None, "code": None}}) + DONE

    async def models(self, request: Request):
        try:
            self._auth(request)
        except APIError as e:
            return error_response(e)
        b = self.backend
        return JSONResponse({"object": "list", "data": [
            {"id": b.name, "object": "model", "created": 0, "owned_by": "isaforge",
             "context_length": b.ctx, "parallel": b.parallel}]})

    async def health(self, request: Request):
        s = self.backend.scheduler
        status = "draining" if self.draining else "ok"
        return JSONResponse({"status": status, "slots": self.backend.parallel,
                             "active": s.active, "queued": s.queue_depth},
                            status_code=503 if self.draining else 200)

    async def prometheus(self, request: Request):
        return PlainTextResponse(self.metrics.render(),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")


def _texts(messages):
    """The text of each message's content (a string, or its text parts): what the template
    renders of them at the least."""
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            yield c
        elif isinstance(c, list):
            for p in c:
                if isinstance(p, dict) and isinstance(p.get("text"), str):
                    yield p["text"]


class _App(Starlette):
    """Starlette that leaves the ASGI server's own `send` in the scope: a stream's response
    start goes through the middlewares (which note that it started), its many body writes
    straight to the server, three coroutine layers fewer per token."""

    async def __call__(self, scope, receive, send):
        scope[RAW_SEND] = send
        await super().__call__(scope, receive, send)


def create_app(backend, api_key: str | None = None, max_body: int = DEFAULT_MAX_BODY,
               read_timeout: float = DEFAULT_READ_TIMEOUT, lenient: bool = False) -> Starlette:
    """The ASGI app over `backend` (serve.backend.Backend); lenient: unknown request fields
    ignored rather than refused."""
    srv = Server(backend, api_key, max_body, read_timeout, lenient)

    async def http_error(request, exc: HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return JSONResponse({"error": {"message": f"{exc.detail}: {request.method} "
                                                  f"{request.url.path}",
                                       "type": "invalid_request_error", "param": None,
                                       "code": code}}, status_code=exc.status_code)

    async def server_error(request, exc: Exception):  # a bug: one request fails, not the server
        return JSONResponse({"error": {"message": f"internal error: {type(exc).__name__}: "
                                                  f"{exc}", "type": "server_error",
                                       "param": None, "code": None}}, status_code=500)

    app = _App(routes=[
        Route("/v1/chat/completions", srv.chat, methods=["POST"]),
        Route("/v1/completions", srv.completions, methods=["POST"]),
        Route("/v1/embeddings", functools.partial(embeddings, srv), methods=["POST"]),
        Route("/v1/models", srv.models, methods=["GET"]),
        Route("/health", srv.health, methods=["GET"]),
        Route("/metrics", srv.prometheus, methods=["GET"]),
        *text_routes(srv),  # /tokenize, /detokenize
    ], exception_handlers={HTTPException: http_error, Exception: server_error})
    app.state.server = srv
    return app
