"""OpenAI's request fields, checked: every bad or unknown field is an APIError naming it (400,
OpenAI's error JSON shape), never a traceback (the known fields: fields.py). `parse_chat` /
`parse_completion` turn a JSON body into a `Params` (what to sample and where to stop) plus
the prompt."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from numbers import Integral, Real

from .fields import unknown, unknown_stream_options

MAX_STOP = 16  # stop strings per request (OpenAI allows 4)
MAX_N = 16  # choices per request
MAX_TOP_LOGPROBS = 20
MAX_DEPTH = 64  # JSON nesting, of the body and of each tool call's arguments


class APIError(Exception):
    """An error response: HTTP status, OpenAI's {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def bad(param: str, message: str) -> APIError:
    return APIError(400, message, param=param)


_SURROGATE = re.compile("[\ud800-\udfff]")
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def loads(data: bytes | str, what: str, param: str | None = None) -> object:
    """A JSON value, its text as the command line takes text: bytes that are not UTF-8 and
    lone surrogates (a JSON escape such as \\ud800 that pairs with nothing) become U+FFFD,
    what a UTF-8 decoder gives; nested at most MAX_DEPTH levels (templates and the checks
    walk it recursively). Anything else is an APIError naming `what`."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    text = data.decode("utf-8", "replace")
    try:
        v = json.loads(text)
    except RecursionError:  # the parser's own recursion limit: far deeper than MAX_DEPTH
        raise _too_deep(what, param) from None
    except ValueError as e:
        raise APIError(400, f"{what} is not valid JSON: {e}", param=param) from None
    if data.count(b"[") + data.count(b"{") > MAX_DEPTH:
        if _depth(v) > MAX_DEPTH:
            raise _too_deep(what, param)
    if _ESCAPED_SURROGATE.search(data):
        v = _replace_surrogates(v)
    return v


def _too_deep(what: str, param: str | None) -> APIError:
    return APIError(400, f"{what} nests JSON deeper than {MAX_DEPTH} levels", param=param,
                    code="json_too_deep")


def _depth(v) -> int:
    """Levels of arrays and objects (a scalar: 0), without recursion."""
    deepest, todo = 0, [(v, 1)]
    while todo:
        x, d = todo.pop()
        if isinstance(x, dict):
            x = x.values()
        elif not isinstance(x, list):
            continue
        deepest = max(deepest, d)
        todo.extend((y, d + 1) for y in x if isinstance(y, (list, dict)))
    return deepest


def _replace_surrogates(v):
    if isinstance(v, str):
        return _SURROGATE.sub("\ufffd", v)
    if isinstance(v, list):
        return [_replace_surrogates(x) for x in v]
    if isinstance(v, dict):
        return {_replace_surrogates(k): _replace_surrogates(x) for k, x in v.items()}
    return v


@dataclass
class Params:
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    logprobs: int | None  # None: off; k: the chosen token's and the top k
    n: int
    frequency_penalty: float
    presence_penalty: float
    repeat_penalty: float | None
    echo: bool = False
    ignore_eos: bool = False  # llama.cpp's extension: generate through end-of-turn tokens
    plan: object = None  # chat: serve/tools.ChatPlan (tools, template kwargs, reply parsing)
    top_k: int = 0  # llama.cpp's truncations (0, 0 and 1: off) and OpenAI's logit_bias
    min_p: float = 0.0
    typical_p: float = 1.0
    logit_bias: dict[int, float] | None = None
    constraint: object | None = None  # response_format / grammar compiled (structured.py)


def _is_int(v) -> bool:
    return isinstance(v, Integral) and not isinstance(v, bool)


def _num(body: dict, name: str, lo: float, hi: float, default=None):
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v):
        raise bad(name, f"'{name}' must be a number, got {json.dumps(v)}")
    if not lo <= v <= hi:
        raise bad(name, f"'{name}' must be between {lo:g} and {hi:g}, got {v}")
    return float(v)


def _int(body: dict, name: str, lo: int, hi: int | None = None, default=None):
    v = body.get(name)
    if v is None:
        return default
    if not _is_int(v):
        raise bad(name, f"'{name}' must be an integer, got {json.dumps(v)}")
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"between {lo} and {hi}"
        raise bad(name, f"'{name}' must be {rng}, got {v}")
    return int(v)


def _bool(body: dict, name: str, default: bool = False) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(name, f"'{name}' must be a boolean, got {json.dumps(v)}")
    return v


def _stop(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise bad("stop", "'stop' must be a string or a list of strings")
    if len(v) > MAX_STOP:
        raise bad("stop", f"'stop' may hold at most {MAX_STOP} strings, got {len(v)}")
    return tuple(s for s in v if s)


UNSUPPORTED = {  # known fields refused, by value, rather than silently ignored
    "response_format": None, "grammar": None,  # structured.py checks and compiles them
    "tool_choice": None, "parallel_tool_calls": None,  # checked by serve/tools.chat_plan
    "best_of": "best_of is not supported",
    "suffix": "suffix (insertion) is not supported",
    "audio": "audio output is not supported",
    "modalities": None,
}


def _fields(body: dict, chat: bool, lenient: bool) -> None:
    """Unknown fields (fields.py) are a 400 naming the first, unless lenient."""
    if lenient:
        return
    names = unknown(body, chat)
    so = body.get("stream_options")
    if not names and isinstance(so, dict):
        names = [f"stream_options.{k}" for k in unknown_stream_options(so)]
    if names:
        what = ", ".join(json.dumps(n) for n in names)
        raise APIError(400, f"unknown field{'s' if len(names) > 1 else ''} {what} for "
                            f"{'/v1/chat/completions' if chat else '/v1/completions'}: this "
                            "server refuses what it does not implement rather than ignore it "
                            "(the fields it knows: docs/server.md; or run it with --lenient)",
                       param=names[0], code="unknown_field")


def _logit_bias(body: dict, vocab: int | None) -> dict[int, float] | None:
    """OpenAI's {"token id": bias in [-100, 100]}, ids below the vocabulary's size."""
    v = body.get("logit_bias")
    if v is None:
        return None
    if not isinstance(v, dict):
        raise bad("logit_bias", "'logit_bias' must be an object mapping token ids to biases")
    out = {}
    for k, b in v.items():
        if not (k.isascii() and k.isdigit()) or (vocab is not None and int(k) >= vocab):
            rng = "" if vocab is None else f" in [0, {vocab})"
            raise bad("logit_bias", f"'logit_bias' key {json.dumps(k)} is not a token id{rng}")
        if isinstance(b, bool) or not isinstance(b, Real) or not -100 <= b <= 100:
            raise bad("logit_bias", f"'logit_bias' of token {k} must be a number between -100 "
                                    f"and 100, got {json.dumps(b)}")
        out[int(k)] = float(b)
    return out or None


def _common(body: dict, chat: bool, lenient: bool = False, vocab: int | None = None
            ) -> Params:
    _fields(body, chat, lenient)
    for name, why in UNSUPPORTED.items():
        if why and body.get(name) not in (None, {}, [], {"type": "text"}):
            raise bad(name, why)
    if body.get("modalities") not in (None, ["text"]):
        raise bad("modalities", "only the text modality is supported")
    max_tokens = _int(body, "max_tokens", 1)
    if chat and body.get("max_completion_tokens") is not None:
        mct = _int(body, "max_completion_tokens", 1)
        if max_tokens is not None and mct != max_tokens:
            raise bad("max_completion_tokens", "'max_tokens' and 'max_completion_tokens' differ")
        max_tokens = mct
    stream = _bool(body, "stream")
    so = body.get("stream_options")
    include_usage = False
    if so is not None:
        if not isinstance(so, dict):
            raise bad("stream_options", "'stream_options' must be an object")
        if not stream:
            raise bad("stream_options", "'stream_options' is only allowed with stream: true")
        include_usage = _bool(so, "include_usage")
    if chat:
        logprobs = None
        if _bool(body, "logprobs"):
            logprobs = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, default=0)
        elif body.get("top_logprobs") is not None:
            raise bad("top_logprobs", "'top_logprobs' needs 'logprobs': true")
    else:
        logprobs = _int(body, "logprobs", 0, MAX_TOP_LOGPROBS)
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise bad("seed", f"'seed' must be an integer, got {json.dumps(seed)}")
    return Params(
        max_tokens=max_tokens,
        temperature=_num(body, "temperature", 0.0, 2.0),
        top_p=_num(body, "top_p", 0.0, 1.0),
        seed=None if seed is None else int(seed),
        stop=_stop(body),
        stream=stream,
        include_usage=include_usage,
        logprobs=logprobs,
        n=_int(body, "n", 1, MAX_N, default=1),
        frequency_penalty=_num(body, "frequency_penalty", -2.0, 2.0, default=0.0),
        presence_penalty=_num(body, "presence_penalty", -2.0, 2.0, default=0.0),
        repeat_penalty=_num(body, "repeat_penalty", 1e-6, 10.0),  # llama.cpp's extension
        echo=_bool(body, "echo") if not chat else False,
        ignore_eos=_bool(body, "ignore_eos"),
        top_k=_int(body, "top_k", 0, default=0),
        min_p=_num(body, "min_p", 0.0, 1.0, default=0.0),
        typical_p=_num(body, "typical_p", 0.0, 1.0, default=1.0),
        logit_bias=_logit_bias(body, vocab),
    )


def parse_chat(body: dict, lenient: bool = False, vocab: int | None = None
               ) -> tuple[list, list | None, Params]:
    """(messages, tools, params) of a /v1/chat/completions body (lenient: unknown fields
    ignored; vocab: logit_bias ids checked below it)."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages", "'messages' must be a non-empty list of messages")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise bad("tools", "'tools' must be a list of objects")
        tools = tools or None
    return ([_message(m, i) for i, m in enumerate(msgs)], tools,
            _common(body, True, lenient, vocab))


def _message(m, i: int) -> dict:
    """A message as the template sees it: OpenAI's tool-call arguments (a JSON string) parsed
    into an object, as templates expect (and as llama.cpp's server does)."""
    if not isinstance(m, dict):
        raise bad(f"messages[{i}]", f"messages[{i}] must be an object")
    calls = m.get("tool_calls")
    if isinstance(calls, list) and calls:
        out = []
        for j, c in enumerate(calls):
            fn = c.get("function") if isinstance(c, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                where = f"messages[{i}].tool_calls[{j}].function.arguments"
                try:
                    fn = {**fn, "arguments": loads(fn["arguments"], where, where)}
                except APIError as e:
                    if e.code == "json_too_deep":
                        raise
                    # not JSON: left as the string it is
                c = {**c, "function": fn}
            out.append(c)
        m = {**m, "tool_calls": out}
    return m


def parse_completion(body: dict, lenient: bool = False, vocab: int | None = None
                     ) -> tuple[str | list[int], Params]:
    """(prompt, params) of a /v1/completions body: the prompt a string, a one-string list or
    a list of token ids (lenient, vocab: as parse_chat)."""
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if isinstance(p, list) and p and all(_is_int(t) for t in p):
        p = [int(t) for t in p]
    elif not isinstance(p, str):
        raise bad("prompt", "'prompt' must be a string or a list of token ids (one prompt per "
                            "request)")
    return p, _common(body, False, lenient, vocab)
