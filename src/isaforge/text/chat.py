"""Chat prompts and stop strings.

`render_chat` renders a model's Jinja2 chat template the way Hugging Face transformers'
``apply_chat_template`` does: a sandboxed, immutable Jinja2 environment with trim_blocks and
lstrip_blocks, the loop-control extension, a no-op ``{% generation %}`` block, and the helpers
``raise_exception``, ``tojson`` and ``strftime_now``.

`StopMatcher` cuts streamed text at the first stop string without ever printing any part of it.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

__all__ = ["render_chat", "StopMatcher", "validate_messages"]


def validate_messages(messages) -> list[dict]:
    """Check a conversation: a non-empty list of dicts with str "role" and str "content"."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ValueError(f"messages[{i}] must be a dict, got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}]: 'role' must be a non-empty string, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}] ({role}): 'content' must be a string, "
                             f"got {type(content).__name__}")
    return list(messages)


@lru_cache(maxsize=8)
def _compile(template: str):
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

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

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template)


def render_chat(template: str, messages: list[dict], add_generation_prompt: bool = True,
                bos_token: str = "", eos_token: str = "", **extra) -> str:
    """Render `messages` with the Jinja2 chat `template` (as transformers does). Extra keyword
    arguments become template variables (e.g. tools=..., date_string=...). Raises ValueError
    for bad messages or a template that fails to compile or render."""
    import jinja2

    if not isinstance(template, str) or not template:
        raise ValueError("the chat template must be a non-empty string")
    msgs = validate_messages(messages)
    try:
        compiled = _compile(template)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"chat template syntax error (line {e.lineno}): {e.message}") from None
    try:
        variables = {"tools": None, "documents": None, **extra}  # transformers' defaults
        return compiled.render(messages=msgs, add_generation_prompt=bool(add_generation_prompt),
                               bos_token=bos_token, eos_token=eos_token, **variables)
    except jinja2.TemplateError as e:
        raise ValueError(f"chat template error: {e}") from None
    except (TypeError, KeyError, IndexError, AttributeError, ZeroDivisionError) as e:
        raise ValueError(f"chat template error: {type(e).__name__}: {e}") from None


class StopMatcher:
    """Cut a text stream at the first stop string.

    ``feed(text) -> (emit, stopped)``: `emit` is text that is safe to print (it never contains
    any part of a stop string); text that could still become the start of a stop string is held
    back. Once a stop string is complete, everything before it is emitted, ``stopped`` is True,
    the stop string and whatever follows are dropped, and later feeds return ("", True).
    ``flush()`` releases the held-back text at the end of the stream.
    """

    def __init__(self, stop_strings=()):
        stops = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings)
        for s in stops:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty strings, got {s!r}")
        self.stop_strings: tuple[str, ...] = tuple(dict.fromkeys(stops))
        self._buf = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the stream

    def _hold(self) -> int:
        """Length of the longest tail of the buffer that is a proper prefix of a stop."""
        buf, best = self._buf, 0
        for s in self.stop_strings:
            for k in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:k]):
                    best = k
                    break
        return best

    def feed(self, text: str) -> tuple[str, bool]:
        if not isinstance(text, str):
            raise ValueError(f"StopMatcher.feed() needs a str, got {type(text).__name__}")
        if self.stopped:
            return "", True
        self._buf += text
        if not self.stop_strings:
            out, self._buf = self._buf, ""
            return out, False
        hits = [(i, -len(s), s) for s in self.stop_strings if (i := self._buf.find(s)) >= 0]
        if hits:
            i, _, s = min(hits)
            out, self._buf = self._buf[:i], ""
            self.stopped, self.matched = True, s
            return out, True
        keep = self._hold()
        cut = len(self._buf) - keep
        out, self._buf = self._buf[:cut], self._buf[cut:]
        return out, False

    def flush(self) -> str:
        """The held-back text (none after a stop); the matcher is then empty."""
        out, self._buf = ("" if self.stopped else self._buf), ""
        return out
