"""`isaforge serve [MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx N]
[--api-key KEY]`."""

from __future__ import annotations

import argparse
import gc
import os
import sys

from ..settings import int_at_least

EPILOG = """\
Endpoints: POST /v1/chat/completions, POST /v1/completions (stream: true gives server-sent
events ending in [DONE]), GET /v1/models, GET /health, GET /metrics (Prometheus).
Binds to 127.0.0.1 unless --host says otherwise. SIGINT/SIGTERM: stop accepting, finish the
requests in flight (--drain seconds at most), exit 0.

examples:
  isaforge serve                                  # SmolLM2 on http://127.0.0.1:8080/v1
  isaforge serve model.gguf --parallel 8 --ctx 2048 --api-key sk-local
  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"messages": [{"role": "user", "content": "Hi!"}]}'
"""


_positive_int = int_at_least(1)


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
                        "$ISAFORGE_API_KEY, else none)")
    s.add_argument("--queue", type=_positive_int, default=64,
                   help="requests waiting for a slot before 429 (default 64)")
    s.add_argument("--max-body", type=_positive_int, default=4 << 20,
                   help="request body limit in bytes (default 4 MiB)")
    s.add_argument("--threads", type=_positive_int, default=None,
                   help="threads (default: physical cores)")
    s.add_argument("--kernel", default=None, help="force a kernel tier (see `isaforge info`)")
    s.add_argument("--kv-cache", choices=("f32", "f16", "int8"), default="f32")
    s.add_argument("--prefill-chunk", type=_positive_int, default=256,
                   help="prompt tokens prefilled between decode steps (default 256)")
    s.add_argument("--name", default=None, help="model id in the API (default: the file stem)")
    s.add_argument("--drain", type=float, default=30.0,
                   help="seconds to finish requests in flight on shutdown (default 30)")
    s.add_argument("-z", dest="tokenizer", default=None, help="llama2.c tokenizer file")


def main(a) -> int:
    try:
        import uvicorn
    except ImportError:
        raise RuntimeError("isaforge serve needs the serve extra: "
                           "pip install 'isaforge[serve]' (starlette, uvicorn)") from None
    from .app import create_app
    from .backend import Backend

    backend = Backend(a.model, parallel=a.parallel, ctx=a.ctx, threads=a.threads,
                      max_queue=a.queue, tokenizer=a.tokenizer, kernel=a.kernel,
                      kv_cache=a.kv_cache, prefill_chunk=a.prefill_chunk, name=a.name)
    app = create_app(backend, api_key=a.api_key or os.environ.get("ISAFORGE_API_KEY") or None,
                     max_body=a.max_body)
    config = uvicorn.Config(app, host=a.host, port=a.port, log_level="warning",
                            timeout_graceful_shutdown=a.drain, lifespan="off")
    server = uvicorn.Server(config)
    srv = app.state.server
    orig = server.handle_exit

    def on_signal(sig, frame):  # new requests get 503 while the ones in flight finish
        srv.draining = True
        orig(sig, frame)  # a second SIGINT forces the exit
        server._captured_signals.clear()  # drained: exit 0, not by re-raising the signal

    server.handle_exit = on_signal
    # the model, tokenizer and template objects live as long as the server: out of the
    # collector's sight, a full collection (41 ms -> 0 with SmolLM2 loaded) skips them
    gc.freeze()
    print(f"isaforge serve: {backend.name} ({backend.parallel} slots x {backend.ctx} "
          f"positions) on http://{a.host}:{a.port}/v1", file=sys.stderr, flush=True)
    try:
        server.run()
    finally:
        backend.close()
    return 0
