"""POST /v1/embeddings in OpenAI's shape: `input` a string, a list of strings, a list of token
ids or a list of lists of them; `encoding_format` "float" (default) or "base64" (the float32
vector's little-endian bytes); `dimensions` only as the model's own (no truncation is done).
Each input is one job on the Scheduler (runtime/batch.py run_job: between generation steps,
in a free slot), pooled as the model says (runtime/embed.py) and L2-normalized, so an input's
vector is the same bits alone or in any batch."""

from __future__ import annotations

import asyncio
import base64
import json

from starlette.responses import JSONResponse

from ..runtime.batch import QueueFullError
from ..runtime.embed import embed_tokens, pooling_for
from .protocol import APIError, bad, loads

__all__ = ["embeddings", "parse"]

MAX_INPUTS = 2048  # inputs per request (OpenAI's limit)
RETRY_AFTER_S = 1


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse(body: dict, vocab: int, dim: int) -> tuple[list, bool]:
    """(inputs: str or list of token ids each, base64?) of an embeddings body."""
    x = body.get("input")
    if isinstance(x, str):
        inputs = [x]
    elif isinstance(x, list) and x and all(_is_int(t) for t in x):
        inputs = [x]
    elif isinstance(x, list) and x and all(isinstance(s, str) for s in x):
        inputs = list(x)
    elif isinstance(x, list) and x and all(isinstance(s, list) and s and
                                           all(_is_int(t) for t in s) for s in x):
        inputs = list(x)
    else:
        raise bad("input", "'input' must be a string, a list of strings, a list of token ids "
                           "or a list of lists of token ids (none empty)")
    if len(inputs) > MAX_INPUTS:
        raise bad("input", f"'input' may hold at most {MAX_INPUTS} inputs, got {len(inputs)}")
    for i, s in enumerate(inputs):
        if isinstance(s, list) and not all(0 <= t < vocab for t in s):
            raise bad("input", f"input[{i}]: token ids must be in [0, {vocab})")
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise bad("encoding_format", f"'encoding_format' must be \"float\" or \"base64\", got "
                                     f"{json.dumps(fmt)}")
    d = body.get("dimensions")
    if d is not None and (not _is_int(d) or d != dim):
        raise bad("dimensions", f"'dimensions' must be the model's {dim} (vectors are not "
                                f"truncated), got {json.dumps(d)}")
    return inputs, fmt == "base64"


async def embeddings(srv, request):
    """The route's handler over serve.app's Server `srv` (its auth, body limits, pool)."""
    try:
        srv._auth(request)
        if srv.draining:
            raise APIError(503, "the server is shutting down", type="server_error",
                           code="shutting_down", headers={"Retry-After": str(RETRY_AFTER_S)})
        raw = await srv._body(request)
        b = srv.backend
        body = loads(raw, "the body")
        if not isinstance(body, dict):
            raise APIError(400, "the body must be a JSON object")
        model = srv._model(body)
        inputs, b64 = parse(body, b.loaded.config.vocab_size, b.loaded.config.dim)
        toks = await srv._work(_tokens, b, inputs)
        pooling = pooling_for(b.loaded.metadata)
        loop = asyncio.get_running_loop()
        try:
            futs = [b.scheduler.run_job(lambda eng, slot, t=t: embed_tokens(eng, t, pooling,
                                                                             True, slot))
                    for t in toks]
        except QueueFullError as e:  # run_job refuses only once the scheduler is closed
            raise APIError(503, str(e), type="server_error", code="shutting_down") from None
        try:
            vecs = await asyncio.gather(*(asyncio.wrap_future(f, loop=loop) for f in futs))
        except asyncio.CancelledError:
            if not any(f.cancelled() for f in futs):
                raise  # this request's own task was cancelled
            raise APIError(503, "the server is shutting down", type="server_error",
                           code="shutting_down") from None
        data = [{"object": "embedding", "index": i,
                 "embedding": (base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
                               if b64 else v.tolist())} for i, v in enumerate(vecs)]
        n = sum(len(t) for t in toks)
        srv.metrics.request("embeddings", 200)
        return JSONResponse({"object": "list", "data": data, "model": model,
                             "usage": {"prompt_tokens": n, "total_tokens": n}})
    except APIError as e:
        srv.metrics.request("embeddings", e.status)
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def _tokens(backend, inputs: list) -> list[list[int]]:
    """Each input's token ids (text with BOS as the model adds it), checked against the
    context: an input longer than it is a 400 naming input[i]."""
    ctx = backend.ctx
    out = []
    for i, s in enumerate(inputs):
        t = backend.encode(s) if isinstance(s, str) else [int(v) for v in s]
        if not t:
            raise bad("input", f"input[{i}] encodes to no tokens")
        if len(t) > ctx:
            raise bad("input", f"input[{i}] is {len(t)} tokens; the context holds {ctx}")
        out.append(t)
    return out

