"""Chat templates come from model files, so rendering one is bounded like any other input.

`LimitedEnvironment` is Jinja2's immutable sandbox (what transformers uses) plus budgets:

- output size: the rendered text is collected chunk by chunk and refused past `max_chars`;
  operations that would build a large value in one step are refused before they run:
  `*` / `+` on strings and lists, `**` on big integers, `%` and the `format` filter with
  huge widths, `range` beyond `max_chars` items, width arguments of `center`, `ljust`, ...;
- time: a watchdog raises an exception inside the rendering thread (any thread, not only the
  main one) after `seconds`, which stops loops that emit nothing;
- recursion: a recursive macro ends as a template error, not a RecursionError traceback.

Every refusal is a `TemplateLimitError` (a ValueError) naming the limit and the setting that
raises it (ISAFORGE_TEMPLATE_MAX_CHARS, ISAFORGE_TEMPLATE_SECONDS; see settings.py).
"""

from __future__ import annotations

import ctypes
import re
import threading

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateLimitError(ValueError):
    """A chat template went over a budget (output size, time, recursion, one huge value)."""


class _Deadline(BaseException):
    """Raised asynchronously in the rendering thread by the watchdog (BaseException: no
    `except Exception` on the way may swallow it)."""


_WIDTH = re.compile(r"%[-+ #0]*(\d+)|\{[^{}]*?:[^{}]*?(\d+)[^{}]*\}")
_WIDTH_METHODS = {"center", "ljust", "rjust", "zfill", "expandtabs", "format", "wrap",
                  "indent", "wordwrap", "truncate"}


def _size(x) -> int | None:
    return len(x) if isinstance(x, (str, bytes, list, tuple)) else None


class LimitedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with `max_chars` as the bound on any value a template builds."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, max_chars: int, **kw):
        super().__init__(**kw)
        self.max_chars = max_chars
        self.globals["range"] = self._range
        for name in ("center", "indent", "wordwrap", "truncate", "format"):
            if name in self.filters:
                self.filters[name] = self._checked_filter(name, self.filters[name])

    def _too_big(self, what: str, n: int):
        return TemplateLimitError(
            f"chat template: {what} of {n} exceeds the limit of {self.max_chars} characters "
            "(ISAFORGE_TEMPLATE_MAX_CHARS)")

    def _check_int(self, what: str, v) -> None:
        if type(v) is int and abs(v) > self.max_chars:
            raise self._too_big(what, abs(v))

    def _check_format(self, fmt) -> None:
        if isinstance(fmt, str):
            for m in _WIDTH.finditer(fmt):
                self._check_int("a format width", int(m.group(1) or m.group(2)))

    def _range(self, *args):
        r = range(*args)
        if len(r) > self.max_chars:
            raise self._too_big("range()", len(r))
        return r

    def _checked_filter(self, name: str, fn):
        def checked(*args, **kwargs):
            for v in list(args[1:]) + list(kwargs.values()):
                self._check_int(f"the {name} filter's argument", v)
            if name == "format" and args:
                self._check_format(args[0])
            return fn(*args, **kwargs)
        if hasattr(fn, "jinja_pass_arg"):  # pass_context / pass_environment markers
            checked.jinja_pass_arg = fn.jinja_pass_arg
        return checked

    def call_binop(self, context, operator, left, right):
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if _size(seq) is not None and type(n) is int and _size(seq) * n > self.max_chars:
                    raise self._too_big("a repeated value", _size(seq) * n)
        elif operator == "+":
            a, b = _size(left), _size(right)
            if a is not None and b is not None and a + b > self.max_chars:
                raise self._too_big("a concatenation", a + b)
        elif operator == "**":
            if type(left) is int and type(right) is int and abs(left) > 1 and (
                    right > 4096 or abs(left).bit_length() * right > 65536):
                raise TemplateLimitError(
                    f"chat template: {left} ** {right} is too large an integer")
        elif operator == "%":
            self._check_format(left)
        return super().call_binop(context, operator, left, right)

    def getattr(self, obj, attribute):
        if isinstance(obj, str) and attribute in ("format", "format_map"):
            self._check_format(obj)  # str.format is looked up here, then called
        return super().getattr(obj, attribute)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's signature
        name = getattr(__obj, "__name__", "")
        if name in _WIDTH_METHODS:
            for v in list(args) + list(kwargs.values()):
                __self._check_int(f"the argument of {name}()", v)
        return super().call(__context, __obj, *args, **kwargs)


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None)


def render_limited(template: jinja2.Template, variables: dict, max_chars: int,
                   seconds: float) -> str:
    """Render `template` with `variables` within `max_chars` characters and `seconds` of wall
    time, else TemplateLimitError. Other template errors propagate as Jinja2 raises them."""
    tid = threading.get_ident()
    lock, state = threading.Lock(), {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                _raise_in(tid, _Deadline)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    try:
        timer.start()
        try:
            out: list[str] = []
            n = 0
            for chunk in template.generate(**variables):
                n += len(chunk)
                if n > max_chars:
                    raise TemplateLimitError(
                        f"chat template: the rendered prompt exceeds the limit of {max_chars} "
                        "characters (ISAFORGE_TEMPLATE_MAX_CHARS)")
                out.append(chunk)
            return "".join(out)
        finally:
            with lock:
                state["done"] = True
            timer.cancel()
            if state["fired"]:
                _raise_in(tid, None)  # withdraw it if it has not been delivered yet
    except _Deadline:
        raise TemplateLimitError(
            f"chat template: rendering took longer than {seconds:g} s "
            "(ISAFORGE_TEMPLATE_SECONDS)") from None
    except RecursionError:
        raise TemplateLimitError("chat template: recursion too deep") from None
    except MemoryError:
        raise TemplateLimitError("chat template: out of memory while rendering") from None
