"""Chat prompts: messages checked once, templates rendered as transformers does.

`render_chat` renders a model's Jinja2 chat template the way Hugging Face transformers'
``apply_chat_template`` does: a sandboxed, immutable Jinja2 environment with trim_blocks and
lstrip_blocks, the loop-control extension, a no-op ``{% generation %}`` block, and the helpers
``raise_exception``, ``tojson`` and ``strftime_now``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache

__all__ = ["ChatTemplateError", "chat_tokens", "check_messages", "render_chat",
           "render_conversation", "special_tokens"]


def _check_content(where: str, role: str, m: dict) -> None:
    content = m.get("content")
    if isinstance(content, str):
        return
    if content is None and role == "assistant" and m.get("tool_calls"):
        return  # an assistant turn that only calls tools (OpenAI sends content null)
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ValueError(f"{where} ({role}): content[{j}] must be a dict with a str "
                                 "'type'")
            if part["type"] != "text":
                raise ValueError(f"{where} ({role}): content[{j}] has type "
                                 f"{part['type']!r}; only 'text' parts are supported")
            if not isinstance(part.get("text"), str):
                raise ValueError(f"{where} ({role}): content[{j}]: 'text' must be a string, "
                                 f"got {type(part.get('text')).__name__}")
        return
    raise ValueError(f"{where} ({role}): 'content' must be a string, got "
                     f"{type(content).__name__} (or a list of {{'type': 'text', 'text': ...}} "
                     "parts)")


def _check_tool_calls(where: str, calls) -> None:
    if not isinstance(calls, list):
        raise ValueError(f"{where}: 'tool_calls' must be a list, got {type(calls).__name__}")
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(f"{where}: tool_calls[{j}] must be a dict with a 'function' "
                             "{'name': str, 'arguments': ...}")


def check_messages(messages) -> list[dict]:
    """A conversation checked, as OpenAI clients send it: a non-empty list (or tuple) of dicts
    with a non-empty str "role" and a "content" that is a str or a list of {"type": "text",
    "text": str} parts (an assistant turn with "tool_calls" may have none); "tool" messages
    as any other. Returns copies of the dicts (content lists kept as lists: templates that
    expect strings fail as they do under transformers), an assistant's tool-call
    `arguments` given as a JSON string (OpenAI's form) parsed into its value, as templates
    expect and as the server's request parser does (text that is not JSON stays a string)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    for i, m in enumerate(messages):
        where = f"chat message {i}: messages[{i}]"  # the API's words and the template's
        if not isinstance(m, dict):
            raise ValueError(f"{where} must be a dict with str 'role' and 'content', "
                             f"got {type(m).__name__}")
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"{where}: 'role' must be a non-empty string, got {role!r}")
        if m.get("tool_calls") is not None:
            _check_tool_calls(where, m["tool_calls"])
        _check_content(where, role, m)
    return [_parsed_arguments(m) for m in messages]


def _parsed_arguments(m: dict) -> dict:
    calls = m.get("tool_calls")
    if not calls:
        return dict(m)
    out = []
    for c in calls:
        fn = c["function"]
        if isinstance(fn.get("arguments"), str):
            try:
                c = {**c, "function": {**fn, "arguments": json.loads(fn["arguments"])}}
            except (ValueError, RecursionError):
                pass  # not JSON (or nested past the parser's limit): the string as given
        out.append(c)
    return {**m, "tool_calls": out}


class ChatTemplateError(ValueError):
    """A chat template failed while rendering. `kind` is the class of the error Jinja2 or
    Python raised (what transformers' apply_chat_template would raise: "TemplateError" from
    raise_exception, "UndefinedError", "SecurityError", "TypeError", ...), `detail` its text."""

    def __init__(self, kind: str, detail: str):
        self.kind, self.detail = kind, detail
        if kind == "TemplateError":  # the template's own raise_exception message
            super().__init__(f"chat template error: {detail}")
        else:
            super().__init__(f"chat template error: {kind}: {detail}")


@lru_cache(maxsize=8)
def _compile(template: str, max_chars: int):
    import jinja2
    from jinja2.ext import Extension, loopcontrols

    from .sandbox import LimitedEnvironment

    class _Generation(Extension):
        """``{% generation %}...{% endgeneration %}`` (transformers marks assistant text with
        it for training masks); here it renders its body unchanged."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = LimitedEnvironment(max_chars, trim_blocks=True, lstrip_blocks=True,
                             extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template)


def render_chat(template: str, messages: list[dict], add_generation_prompt: bool = True,
                bos_token: str = "", eos_token: str = "", max_chars: int | None = None,
                **extra) -> str:
    """Render `messages` with the Jinja2 chat `template` (as transformers does). Extra keyword
    arguments become template variables (e.g. tools=..., date_string=...). Raises ValueError
    for bad messages or a template that fails to compile or render, and TemplateLimitError
    (a ValueError) past the limits of text/sandbox.py: `max_chars` of output (default
    settings.template_max_chars()) and settings.template_seconds() of rendering."""
    import jinja2

    from .. import settings
    from .sandbox import TemplateLimitError, render_limited

    if not isinstance(template, str) or not template:
        raise ValueError("the chat template must be a non-empty string")
    msgs = check_messages(messages)
    try:
        max_chars = max_chars or settings.template_max_chars()
        compiled = _compile(template, max_chars)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"chat template syntax error (line {e.lineno}): {e.message}") from None
    except RecursionError:  # e.g. thousands of nested brackets: jinja2's parser recurses
        raise ValueError("chat template nests too deeply to compile") from None
    try:
        variables = {"tools": None, "documents": None, **extra}  # transformers' defaults
        variables.update(messages=msgs, add_generation_prompt=bool(add_generation_prompt),
                         bos_token=bos_token, eos_token=eos_token)
        return render_limited(compiled, variables, max_chars, settings.template_seconds())
    except TemplateLimitError:
        raise
    except jinja2.TemplateError as e:
        raise ChatTemplateError(type(e).__name__, str(e)) from None
    except (TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError,
            OverflowError, ValueError, RecursionError) as e:
        raise ChatTemplateError(type(e).__name__, str(e)) from None


def special_text(tokenizer, token_id: int | None) -> str:
    """A special token's text (for the template's bos_token / eos_token), "" for none."""
    if token_id is None or token_id < 0:
        return ""
    p = tokenizer.piece(token_id)
    return p.decode("utf-8", "replace") if isinstance(p, bytes) else str(p)


def special_tokens(tokenizer) -> dict:
    """The tokenizer's special tokens as transformers gives them to a template: bos_token and
    eos_token (always, "" for none), unk_token / pad_token where the model names them, and
    additional_special_tokens: every control token's text (a GGUF does not record which of
    them transformers' tokenizer_config listed)."""
    out = {"bos_token": special_text(tokenizer, tokenizer.bos_id),
           "eos_token": special_text(tokenizer, tokenizer.eos_id)}
    named = {tokenizer.bos_id, tokenizer.eos_id}
    for key in ("unk", "pad"):
        tid = getattr(tokenizer, f"{key}_id", None)
        if isinstance(tid, int) and tid >= 0:
            out[f"{key}_token"] = special_text(tokenizer, tid)
            named.add(tid)
    specials = getattr(tokenizer, "_special_all", None)
    if specials is not None:
        out["additional_special_tokens"] = [t for t, i in specials if tokenizer.is_control(i)]
    return out


def render_conversation(tokenizer, template: str, messages,
                        add_generation_prompt: bool = True, max_chars: int | None = None,
                        **extra) -> str:
    """`messages` rendered by `template` with the tokenizer's special tokens (special_tokens)
    and `extra` (e.g. tools=[...]) as template variables."""
    variables = {**special_tokens(tokenizer), **extra}
    return render_chat(template, messages, add_generation_prompt=add_generation_prompt,
                       max_chars=max_chars, **variables)


# -- message text is text ---------------------------------------------------------------------
# A template writes special tokens (turn boundaries) around the messages; the messages' own
# text must stay text, or a user who types "<|im_end|>" would end their turn. So every string
# the caller gave (messages, tools) has each special-token text in it swapped for a private
# placeholder before rendering; the rendered prompt is then cut at the special tokens the
# template wrote, and the placeholders go back as plain text, tokenized as text.

_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"


def _escape(x, table: dict[str, str], specials: list[str], nonce: str):
    if isinstance(x, str):
        for sp in specials:  # longest first, as the tokenizer partitions
            if sp in x:
                mark = table.setdefault(sp, f"{_MARK_OPEN}{nonce}{len(table)}{_MARK_CLOSE}")
                x = x.replace(sp, mark)
        return x
    if isinstance(x, dict):
        return {k: _escape(v, table, specials, nonce) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_escape(v, table, specials, nonce) for v in x]
    return x


def _strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)


def _encode_guarded(tokenizer, text: str, marks: dict[str, str], bos: bool) -> list[int]:
    """Token ids of a prompt whose placeholders (marks: placeholder -> special text) are text:
    the template's special tokens partitioned out as the tokenizer does, every run of text
    between them (placeholders restored) encoded with special=False."""
    import re

    frags = tokenizer._partition(text, True)
    merged: list[str | int] = []
    for f in frags:
        if isinstance(f, str) and merged and isinstance(merged[-1], str):
            merged[-1] += f
        else:
            merged.append(f)
    pat = re.compile("|".join(re.escape(k) for k in marks))
    ids = [tokenizer.bos_id] if bos else []
    for f in merged:
        if isinstance(f, int):
            ids.append(f)
        else:
            ids += tokenizer.encode(pat.sub(lambda m: marks[m.group(0)], f), bos=False,
                                    special=False)
    return ids


def chat_tokens(tokenizer, template: str, messages, max_chars: int | None = None,
                **extra) -> list[int]:
    """Token ids of the rendered conversation plus the assistant prompt: BOS added when the
    tokenizer asks for it and the template did not already write it. Special-token texts
    inside the messages (and `extra`, e.g. tools) are tokenized as text, never as the
    special tokens (a typed "<|im_end|>" cannot end a turn)."""
    bos_text = special_text(tokenizer, tokenizer.bos_id)
    specials = [t for t, _ in getattr(tokenizer, "_special_all", ())]
    given = [messages, extra]
    hit = [sp for sp in specials if any(sp in s for s in _strings(given))] if specials else []
    if not hit:
        text = render_conversation(tokenizer, template, messages, max_chars=max_chars, **extra)
        bos = tokenizer.add_bos and not (bos_text and text.startswith(bos_text))
        return tokenizer.encode(text, bos=bos, special=True)
    check_messages(messages)  # its errors name the caller's messages, not the escaped ones
    nonce, n = "", 0
    while any(f"{_MARK_OPEN}{nonce}" in s for s in _strings(given)):
        n += 1
        nonce = f"{n}:"
    table: dict[str, str] = {}
    msgs = _escape(list(messages), table, hit, nonce)
    extra = _escape(extra, table, hit, nonce)
    text = render_conversation(tokenizer, template, msgs, max_chars=max_chars, **extra)
    bos = tokenizer.add_bos and not (bos_text and text.startswith(bos_text))
    return _encode_guarded(tokenizer, text, {v: k for k, v in table.items()}, bos)
