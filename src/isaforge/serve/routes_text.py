"""POST /tokenize and POST /detokenize in llama.cpp's server shapes, so its clients (and
scripts that count tokens before sending a prompt) work unchanged:

  /tokenize {"content": str, "add_special": false, "parse_special": true, "with_pieces": false}
    -> {"tokens": [id, ...]}, or with_pieces {"tokens": [{"id": id, "piece": piece}, ...]}: a
    piece is its text when its bytes are UTF-8, else the list of its byte values
  /detokenize {"tokens": [id, ...]} -> {"content": str}

Tokens are the model's own: `add_special` adds what generation adds (BOS where the model
wants one), `parse_special` reads control-token texts such as "<|im_start|>" as those tokens.
A piece is the token's bytes as llama.cpp's token_to_piece gives them (a byte token: its
byte; a control token: its text), and /detokenize joins the pieces, as llama.cpp does: a
SentencePiece vocabulary's dummy prefix shows as a leading space. Bad input is a 400 naming
the field; unknown fields are refused unless the server is lenient, as on /v1."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..text.llama2c import Llama2cTokenizer
from .protocol import APIError, bad, loads

TOKENIZE_FIELDS = frozenset({"content", "add_special", "parse_special", "with_pieces"})
DETOKENIZE_FIELDS = frozenset({"tokens"})


def piece_bytes(tok, t: int) -> bytes:
    """Token t's bytes, llama.cpp's token_to_piece with special tokens rendered."""
    if isinstance(tok, Llama2cTokenizer):
        return tok.decode(-1, t)  # "<0xXX>": that byte; else the stored piece
    return tok.piece(t)


def piece_json(b: bytes) -> str | list[int]:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return list(b)


def _flag(body: dict, name: str, default: bool) -> bool:
    v = body.get(name, default)
    if not isinstance(v, bool):
        raise bad(name, f"'{name}' must be a boolean, got {json.dumps(v)}")
    return v


def _object(raw: bytes, known: frozenset, lenient: bool, path: str) -> dict:
    body = loads(raw, "the body")
    if not isinstance(body, dict):
        raise APIError(400, "the body must be a JSON object")
    extra = [k for k in body if k not in known]
    if extra and not lenient:
        raise APIError(400, f"unknown field {json.dumps(extra[0])} for {path} (it takes "
                            f"{', '.join(sorted(known))})", param=extra[0],
                       code="unknown_field")
    return body


def tokenize(backend, raw: bytes, lenient: bool) -> dict:
    body = _object(raw, TOKENIZE_FIELDS, lenient, "/tokenize")
    content = body.get("content")
    if not isinstance(content, str):
        raise bad("content", f"'content' must be a string, got {json.dumps(content)[:80]}")
    add_special = _flag(body, "add_special", False)
    special = _flag(body, "parse_special", True)
    with_pieces = _flag(body, "with_pieces", False)
    tok = backend.tokenizer
    try:
        ids = tok.encode(content, bos=add_special and backend.profile.add_bos, special=special)
    except ValueError as e:
        raise bad("content", str(e)) from None
    if not with_pieces:
        return {"tokens": ids}
    return {"tokens": [{"id": t, "piece": piece_json(piece_bytes(tok, t))} for t in ids]}


def detokenize(backend, raw: bytes, lenient: bool) -> dict:
    body = _object(raw, DETOKENIZE_FIELDS, lenient, "/detokenize")
    ids = body.get("tokens")
    vocab = backend.tokenizer.vocab_size
    if not isinstance(ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise bad("tokens", "'tokens' must be a list of token ids")
    wrong = next((t for t in ids if not 0 <= t < vocab), None)
    if wrong is not None:
        raise bad("tokens", f"'tokens' holds {wrong}, not a token id in [0, {vocab})")
    text = b"".join(piece_bytes(backend.tokenizer, t) for t in ids)
    return {"content": text.decode("utf-8", "replace")}


def routes(srv) -> list[Route]:
    """The two routes over an app.Server (its API key, body limits and worker pool)."""

    def endpoint(fn):
        async def handle(request: Request):
            try:
                srv._auth(request)
                raw = await srv._body(request)
                return JSONResponse(await srv._work(fn, srv.backend, raw, srv.lenient))
            except APIError as e:
                return JSONResponse(e.body(), status_code=e.status, headers=e.headers)
        return handle

    return [Route("/tokenize", endpoint(tokenize), methods=["POST"]),
            Route("/detokenize", endpoint(detokenize), methods=["POST"])]
