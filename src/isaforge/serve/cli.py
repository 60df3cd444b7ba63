"""`isaforge serve [MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx N]
[--api-key-file FILE]`."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys

from ..settings import int_at_least
from .guard import Limits

EPILOG = """\
Endpoints: POST /v1/chat/completions, POST /v1/completions (stream: true gives server-sent
events ending in [DONE]), POST /v1/embeddings, GET /v1/models, GET /health, GET /metrics
(Prometheus), POST /tokenize and /detokenize (llama.cpp's shapes).
Binds to 127.0.0.1 unless --host says otherwise. SIGINT/SIGTERM: new requests get 503, the
ones in flight finish (--drain seconds at most; streams still running then end with an error
event), exit 0. The API key is best given as $ISAFORGE_API_KEY or --api-key-file: a command
line is visible to every user of the machine (/proc/PID/cmdline).

examples:
  isaforge serve                                  # SmolLM2 on http://127.0.0.1:8080/v1
  ISAFORGE_API_KEY=sk-local isaforge serve model.gguf --parallel 8 --ctx 2048
  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"messages": [{"role": "user", "content": "Hi!"}]}'
"""


_positive_int = int_at_least(1)
D = Limits()


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text!r}")
    return v


def add_parser(sub) -> None:
    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server (concurrent requests "
                                     "decoded together)", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("model", nargs="?", default=None,
                   help="model file or folder (default: SmolLM2-135M-Instruct)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: any free)")
    s.add_argument("--parallel", type=_positive_int, default=4,
                   help="sequence slots decoded together (default 4); each holds a KV cache "
                        "of --ctx positions")
    s.add_argument("--ctx", type=_positive_int, default=None,
                   help="context per slot (default: the model's, at most 4096)")
    s.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on /v1 (default: "
                        "$ISAFORGE_API_KEY, else none); visible to other users in the process "
                        "list: prefer the variable or --api-key-file")
    s.add_argument("--api-key-file", default=None, metavar="FILE",
                   help="read the API key from FILE (its first line)")
    s.add_argument("--queue", type=_positive_int, default=64,
                   help="requests waiting for a slot before 429 (default 64)")
    s.add_argument("--max-body", type=_positive_int, default=4 << 20,
                   help="request body limit in bytes (default 4 MiB)")
    s.add_argument("--max-header-bytes", type=_positive_int, default=D.max_header_bytes,
                   help="request line and headers, in bytes, before a 431 (default "
                        f"{D.max_header_bytes})")
    s.add_argument("--max-headers", type=_positive_int, default=D.max_headers,
                   help=f"headers per request before a 431 (default {D.max_headers})")
    s.add_argument("--read-timeout", type=_positive_float, default=D.read_timeout,
                   help="seconds for a request's head, and again for its body, to arrive "
                        f"(default {D.read_timeout:g}); then 408 and the connection closes")
    s.add_argument("--keep-alive", type=_positive_float, default=D.keep_alive,
                   help=f"seconds an idle connection stays open (default {D.keep_alive:g})")
    s.add_argument("--max-connections", type=_positive_int, default=None,
                   help=f"open connections; the next gets a 503 (default {D.max_connections}, "
                        "at most half the open-file limit)")
    s.add_argument("--threads", type=_positive_int, default=None,
                   help="threads (default: physical cores)")
    s.add_argument("--kernel", default=None, help="force a kernel tier (see `isaforge info`)")
    s.add_argument("--kv-cache", choices=("f32", "f16", "int8"), default="f32")
    s.add_argument("--quant", default="auto",
                   help="how weights are held, as `isaforge run --quant` (default auto)")
    s.add_argument("--prefill-chunk", type=_positive_int, default=256,
                   help="prompt tokens prefilled between decode steps (default 256)")
    s.add_argument("--name", default=None, help="model id in the API (default: the file stem)")
    s.add_argument("--drain", type=float, default=30.0,
                   help="seconds to finish requests in flight on shutdown (default 30)")
    s.add_argument("-z", dest="tokenizer", default=None, help="llama2.c tokenizer file")
    s.add_argument("--lenient", action="store_true",
                   help="accept and ignore request fields this server does not know (default: "
                        "a 400 naming them)")


def main(a) -> int:
    try:
        import uvicorn
    except ImportError:
        raise RuntimeError("isaforge serve needs the serve extra: "
                           "pip install 'isaforge[serve]' (starlette, uvicorn)") from None
    from .app import create_app
    from .backend import Backend
    from .guard import guarded_protocol

    api_key = _api_key(a)
    limits = Limits(max_header_bytes=a.max_header_bytes, max_headers=a.max_headers,
                    read_timeout=a.read_timeout, keep_alive=a.keep_alive,
                    max_connections=a.max_connections or _default_connections())
    backend = Backend(a.model, parallel=a.parallel, ctx=a.ctx, threads=a.threads,
                      max_queue=a.queue, tokenizer=a.tokenizer, kernel=a.kernel,
                      kv_cache=a.kv_cache, prefill_chunk=a.prefill_chunk, name=a.name,
                      quant=a.quant)
    app = create_app(backend, api_key=api_key, max_body=a.max_body,
                     read_timeout=a.read_timeout, lenient=a.lenient)
    # the app drains (below); uvicorn's own grace is for the last bytes to be written
    config = uvicorn.Config(app, host=a.host, port=a.port, log_level="warning",
                            http=guarded_protocol(limits), timeout_keep_alive=a.keep_alive,
                            timeout_graceful_shutdown=5, lifespan="off")
    server = uvicorn.Server(config)
    srv = app.state.server

    async def drain():
        """Listening still: new requests get 503 while the ones in flight finish; at the
        deadline the rest are cut (each ends as its client can read), then uvicorn stops."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + a.drain
        while srv.busy() and loop.time() < deadline and not server.should_exit:
            await asyncio.sleep(0.05)
        if srv.busy():
            srv.cut()
            end = loop.time() + 2
            while srv.busy() and loop.time() < end:
                await asyncio.sleep(0.05)
        server.should_exit = True

    def on_signal(sig, frame):
        if srv.draining:  # a second signal: stop now
            server.should_exit = server.force_exit = True
            return
        srv.draining = True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not serving yet
            server.should_exit = True
            return
        srv.drain_task = loop.create_task(drain())

    server.handle_exit = on_signal
    # the model, tokenizer and template objects live as long as the server: out of the
    # collector's sight, a full collection (41 ms -> 0 with SmolLM2 loaded) skips them
    gc.freeze()
    print(f"isaforge serve: {backend.name} ({backend.parallel} slots x {backend.ctx} "
          f"positions) on http://{a.host}:{a.port}/v1", file=sys.stderr, flush=True)
    try:
        server.run()
    finally:
        srv.pool.shutdown(wait=False, cancel_futures=True)
        backend.close()
    return 0


def _api_key(a) -> str | None:
    """--api-key-file, else --api-key, else $ISAFORGE_API_KEY; refused at start unless it is
    printable ASCII, as an HTTP header carries it (another key could never authenticate)."""
    key, where = None, None
    if a.api_key_file:
        try:
            with open(a.api_key_file, encoding="utf-8") as f:
                key = f.readline().strip()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"--api-key-file {a.api_key_file}: {e}") from None
        where = f"--api-key-file {a.api_key_file}"
        if not key:
            raise ValueError(f"{where}: the file's first line is empty")
    elif a.api_key:
        key, where = a.api_key, "--api-key"
    elif os.environ.get("ISAFORGE_API_KEY"):
        key, where = os.environ["ISAFORGE_API_KEY"], "$ISAFORGE_API_KEY"
    if key is not None:
        bad = [c for c in key if not " " < c <= "~"]
        if bad:
            raise ValueError(f"{where}: the API key must be printable ASCII without spaces "
                             f"(an HTTP header carries it); it has {bad[0]!r}")
    return key


def _default_connections() -> int:
    """Limits().max_connections, at most half the open-file limit (the model's files, the
    listening socket and the rest need descriptors too)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return D.max_connections
    if soft == resource.RLIM_INFINITY:
        return D.max_connections
    return max(1, min(D.max_connections, soft // 2))
