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

__all__ = ["chat_tokens", "check_messages", "render_chat", "render_conversation"]


def check_messages(messages) -> list[dict]:
    """A conversation checked: a non-empty list (or tuple) of dicts with a non-empty str
    "role" and a str "content"; returns copies of the dicts."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    for i, m in enumerate(messages):
        where = f"chat message {i}: messages[{i}]"  # the API's words and the template's
        if not isinstance(m, dict):
            raise ValueError(f"{where} must be a dict with str 'role' and 'content', "
                             f"got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not role:
            raise ValueError(f"{where}: 'role' must be a non-empty string, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"{where} ({role}): 'content' must be a string, "
                             f"got {type(content).__name__}")
    return [dict(m) for m in messages]


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
    from .sandbox import render_limited

    if not isinstance(template, str) or not template:
        raise ValueError("the chat template must be a non-empty string")
    msgs = check_messages(messages)
    try:
        max_chars = max_chars or settings.template_max_chars()
        compiled = _compile(template, max_chars)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"chat template syntax error (line {e.lineno}): {e.message}") from None
    try:
        variables = {"tools": None, "documents": None, **extra}  # transformers' defaults
        variables.update(messages=msgs, add_generation_prompt=bool(add_generation_prompt),
                         bos_token=bos_token, eos_token=eos_token)
        return render_limited(compiled, variables, max_chars, settings.template_seconds())
    except jinja2.TemplateError as e:
        raise ValueError(f"chat template error: {e}") from None
    except (TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError,
            OverflowError) as e:
        raise ValueError(f"chat template error: {type(e).__name__}: {e}") from None


def special_text(tokenizer, token_id: int | None) -> str:
    """A special token's text (for the template's bos_token / eos_token), "" for none."""
    if token_id is None or token_id < 0:
        return ""
    p = tokenizer.piece(token_id)
    return p.decode("utf-8", "replace") if isinstance(p, bytes) else str(p)


def render_conversation(tokenizer, template: str, messages,
                        add_generation_prompt: bool = True, max_chars: int | None = None) -> str:
    """`messages` rendered by `template` with the tokenizer's BOS and EOS texts."""
    return render_chat(template, messages, add_generation_prompt=add_generation_prompt,
                       bos_token=special_text(tokenizer, tokenizer.bos_id),
                       eos_token=special_text(tokenizer, tokenizer.eos_id),
                       max_chars=max_chars)


def chat_tokens(tokenizer, template: str, messages, max_chars: int | None = None) -> list[int]:
    """Token ids of the rendered conversation plus the assistant prompt: BOS added when the
    tokenizer asks for it and the template did not already write it."""
    text = render_conversation(tokenizer, template, messages, max_chars=max_chars)
    bos_text = special_text(tokenizer, tokenizer.bos_id)
    bos = tokenizer.add_bos and not (bos_text and text.startswith(bos_text))
    return tokenizer.encode(text, bos=bos, special=True)
