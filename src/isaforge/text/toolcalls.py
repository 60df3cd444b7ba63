"""Tool calls in a model's reply: the syntax a chat template asks for, a streaming parser that
splits the reply into content and OpenAI-shaped tool calls, and the constraint a grammar engine
needs to force a call.

Syntaxes (chosen by `detect_syntax` from the template's text):

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, possibly several
  (Hermes 2 Pro / 3, Qwen2.5, Qwen3, QwQ).
- ``llama3``: a JSON object ``{"name": ..., "parameters": {...}}`` where the reply starts
  (or after ``<|python_tag|>``), possibly several separated by ``;`` (Llama 3.1 to 3.3).
- ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` and the newer
  ``[TOOL_CALLS]name[ARGS]{...}``; the JSON array also where the reply starts, since
  ``[TOOL_CALLS]`` is a control token a decoder drops.
- ``json``: any other template: a whole reply that is one JSON object with "name" and
  "arguments" (or "parameters") naming an offered tool.

Only calls that parse as JSON and name an offered tool are calls; anything else stays content,
as the model wrote it. Whitespace between content and a call is dropped.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable

__all__ = ["SYNTAXES", "ToolCallParser", "call_constraint", "call_ids", "detect_syntax",
           "parse_tool_calls", "tool_names"]

SYNTAXES = ("hermes", "llama3", "mistral", "json")

_MARKERS = {  # literal openers a syntax looks for anywhere in the reply
    "hermes": ("<tool_call>",),
    "llama3": ("<|python_tag|>",),
    "mistral": ("[TOOL_CALLS]",),
    "json": (),
}
_AT_START = {"hermes": "", "llama3": "{", "mistral": "[", "json": "{"}  # bare JSON openers
_WS = " \t\r\n"


def detect_syntax(template: str | None) -> str:
    """The tool-call syntax a chat template's text asks the model for."""
    t = template or ""
    if "[TOOL_CALLS]" in t:
        return "mistral"
    if "<tool_call>" in t:
        return "hermes"
    if "<|python_tag|>" in t or ('"parameters": dictionary of argument name' in t):
        return "llama3"
    return "json"


def tool_names(tools) -> list[str]:
    """The function names of OpenAI `tools` ({"type": "function", "function": {"name"}}); a
    bare {"name": ...} is taken too."""
    out = []
    for t in tools or ():
        fn = t.get("function", t) if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out.append(fn["name"])
    return out


def call_ids(seed: int | None, choice: int = 0, syntax: str | None = None
             ) -> Callable[[], str]:
    """A source of tool-call ids: "call_" + 24 hex digits, or for the mistral syntax 9 letters
    and digits (Mistral's templates refuse any other id when the call comes back). The same
    sequence for the same seed and choice (a seeded request replays exactly), random without
    a seed."""
    rng = random.Random(uuid.uuid4().int if seed is None
                        else f"isaforge-tool-call:{seed}:{choice}")
    if syntax == "mistral":
        abc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        return lambda: "".join(rng.choice(abc) for _ in range(9))
    return lambda: "call_" + f"{rng.getrandbits(96):024x}"


def _json_end(s: str, i: int, st: list) -> int | None:
    """The index after the JSON object or array that starts at s[i] (string-aware bracket
    matching), or None while it is incomplete. `st` = [pos, depth, in_string, escaped] carries
    the scan across calls, so text fed piece by piece is scanned once."""
    pos, depth, in_str, esc = st
    pos = max(pos, i)
    while pos < len(s):
        ch = s[pos]
        pos += 1
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                st[:] = [pos, depth, in_str, esc]
                return pos
    st[:] = [pos, depth, in_str, esc]
    return None


def _loads(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


class ToolCallParser:
    """Streaming split of a reply into content and tool calls. ``feed(text)`` and ``finish()``
    return events: ("content", str) and ("call", {"id", "name", "arguments"}) with arguments
    a JSON string. Content that could still be the start of a call (a marker's prefix, a
    call being read, whitespace before one) is held back until it is decided; every other
    character goes out at once. The events of any split of a reply join to those of the
    whole (`parse_tool_calls`). `max_calls` keeps only the first calls (the rest dropped)."""

    def __init__(self, syntax: str, tools, ids: Callable[[], str] | None = None,
                 max_calls: int | None = None):
        if syntax not in SYNTAXES:
            raise ValueError(f"unknown tool-call syntax {syntax!r} (one of {SYNTAXES})")
        self.syntax = syntax
        self.names = set(tool_names(tools))
        self.ids = ids or call_ids(None)
        self.max_calls = max_calls
        self.markers = _MARKERS[syntax]
        self.buf = ""  # text not yet decided
        self.calls = 0  # calls found (also those past max_calls)
        self.at_call_pos = syntax != "hermes"  # a bare JSON call may start here
        self.open: str | None = None  # the opener of the call being read
        self.scan: list = [0, 0, False, False]  # _json_end's state over the call being read
        self.done_json: list | None = None  # json syntax: the whole-reply call, pending
        self.done_raw = ""  # ... and its text, content if more text follows
        self.pending_ws = ""  # whitespace before the call being read

    # -- the syntaxes' calls ------------------------------------------------------------------

    def _call(self, obj) -> dict | None:
        """An OpenAI call from a parsed {"name", "arguments" | "parameters"}, or None."""
        if not isinstance(obj, dict) or obj.get("name") not in self.names:
            return None
        keys = [k for k in ("arguments", "parameters") if k in obj]
        if not keys:
            if self.syntax == "json":  # a bare object needs both keys to count
                return None
            args = {}
        else:
            args = obj[keys[0]]
        if isinstance(args, str):  # some models write the arguments as a JSON string
            args = _loads(args)
        if not isinstance(args, dict):
            return None
        return {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}

    def _calls_of(self, opener: str, body: str) -> list[dict] | None:
        """The calls of a complete call text (after its opener), or None if it is not one."""
        body = body.strip(_WS)
        if opener == "<tool_call>":
            c = self._call(_loads(body))
            return [c] if c else None
        if opener in ("{", "<|python_tag|>"):
            c = self._call(_loads(body))
            return [c] if c else None
        if opener in ("[", "[TOOL_CALLS]"):
            if opener == "[TOOL_CALLS]" and not body.startswith("["):
                name, sep, args = body.partition("[ARGS]")
                c = self._call({"name": name.strip(_WS), "arguments": _loads(args)}) if sep \
                    else None
                return [c] if c else None
            arr = _loads(body)
            if not isinstance(arr, list) or not arr:
                return None
            out = [self._call(o) for o in arr]
            return out if all(out) else None
        return None

    def _end_of_call(self, final: bool) -> int | None:
        """Where the call being read ends in self.buf (after its opener), None if not yet."""
        op, b = self.open, self.buf
        start = len(op) if op not in ("{", "[") else 0
        if op == "<tool_call>":
            j = b.find("</tool_call>", max(start, self.scan[0] - 12))
            if j >= 0:
                return j
            self.scan[0] = len(b)
            return len(b) if final else None
        k = start
        while k < len(b) and b[k] in _WS:
            k += 1
        if k == len(b):
            return None
        if op == "[TOOL_CALLS]" and b[k] != "[":
            a = b.find("[ARGS]", k)
            if a < 0:
                return None
            k = a + 6
            while k < len(b) and b[k] in _WS:
                k += 1
            if k == len(b):
                return None
        if b[k] not in "{[":
            return k  # not JSON: _calls_of refuses it
        if op in ("{", "["):  # a bare call must look like one from its second character
            inner = k + 1
            while inner < len(b) and b[inner] in _WS:
                inner += 1
            if inner == len(b):
                return None
            if b[inner] != ('"' if op == "{" else "{"):
                return inner
        return _json_end(b, k, self.scan)

    # -- the stream ---------------------------------------------------------------------------

    def _emit_content(self, out: list, text: str) -> None:
        if text:
            out.append(("content", text))
            self.at_call_pos = False

    def _emit_calls(self, out: list, calls: list[dict]) -> None:
        for c in calls:
            if self.max_calls is None or self.calls < self.max_calls:
                out.append(("call", {"id": self.ids(), **c}))
            self.calls += 1

    def _opener_at(self) -> tuple[int, str] | None:
        """The first opener in self.buf: a marker anywhere, or a bare JSON bracket where a
        call may start (nothing but whitespace before it)."""
        best = None
        for m in self.markers:
            j = self.buf.find(m)
            if j >= 0 and (best is None or j < best[0]):
                best = (j, m)
        bare = _AT_START[self.syntax]
        if bare and self.at_call_pos and not (self.syntax == "json" and self.calls):
            k = len(self.buf) - len(self.buf.lstrip(self._gap()))
            rest = self.buf[k:]
            if any(m.startswith(rest) for m in self.markers):
                return best  # "[" may yet be "[TOOL_CALLS]"
            if rest[:1] == bare and (best is None or k < best[0]):
                best = (k, bare)
        return best

    def _held(self) -> int:
        """How much of the end of self.buf (no opener in it) could still begin a call."""
        b = self.buf
        keep = 0
        for m in self.markers:
            for n in range(min(len(m) - 1, len(b)), 0, -1):
                if b.endswith(m[:n]):
                    keep = max(keep, n)
                    break
        body = b[:len(b) - keep]
        keep += len(body) - len(body.rstrip(_WS))
        if self.at_call_pos and _AT_START[self.syntax] and not b.strip(self._gap()):
            keep = len(b)  # only whitespace where a bare call may start
        return keep

    def feed(self, text: str) -> list[tuple[str, object]]:
        out: list = []
        self.buf += text
        self._step(out, final=False)
        return out

    def finish(self) -> list[tuple[str, object]]:
        out: list = []
        self._step(out, final=True)
        while self.open is not None:  # a call that never closed: its opener was text
            op, self.open = self.open, None
            self._emit_content(out, self.pending_ws + self.buf[:len(op)])
            self.buf = self.buf[len(op):]
            self._step(out, final=True)
        if self.done_json is not None:  # the json syntax: the reply was one call, whole
            self._emit_calls(out, self.done_json)
            self.done_json, self.buf = None, ""
        return out

    def _step(self, out: list, final: bool) -> None:
        while True:
            if self.done_json is not None:
                if self.buf.strip(_WS):  # more after the object: the reply is text
                    self._emit_content(out, self.done_raw + self.buf)
                    self.done_json, self.buf = None, ""
                return
            if self.open is None:
                hit = self._opener_at()
                if hit is None:
                    keep = 0 if final else self._held()
                    lead = self.buf[:len(self.buf) - keep]
                    if lead:
                        if self.calls and self.at_call_pos:
                            lead = lead.lstrip(self._gap())  # whitespace after a call
                        self._emit_content(out, lead)
                        self.buf = self.buf[len(self.buf) - keep:]
                    return
                j, op = hit
                before = self.buf[:j]
                self.pending_ws = before[len(before.rstrip(_WS)):]
                before = before.rstrip(_WS)
                if self.calls and self.at_call_pos:
                    before = before.lstrip(self._gap())
                self._emit_content(out, before)
                self.buf = self.buf[j:]
                self.open = op
                self.scan = [0, 0, False, False]
            end = self._end_of_call(final)
            if end is None:
                return
            op = self.open
            body = self.buf[len(op) if op not in ("{", "[") else 0:end]
            tail = self.buf[end:]
            if op == "<tool_call>" and tail.startswith("</tool_call>"):
                tail = tail[len("</tool_call>"):]
            raw = self.buf[:len(self.buf) - len(tail)]
            calls = self._calls_of(op, body)
            self.open = None
            if calls is None:  # not a call: its text is content, read on after its opener
                self._emit_content(out, self.pending_ws + self.buf[:len(op)])
                self.buf = self.buf[len(op):]
                continue
            self.buf = tail
            if self.syntax == "json":
                self.done_json, self.done_raw = calls, self.pending_ws + raw
                self.at_call_pos = True
                continue
            self._emit_calls(out, calls)
            self.at_call_pos = True

    def _gap(self) -> str:
        """What may stand between calls: whitespace, and ";" between Llama 3 calls."""
        return _WS + ";" if self.syntax == "llama3" and self.calls else _WS


def parse_tool_calls(text: str, syntax: str, tools, ids: Callable[[], str] | None = None,
                     max_calls: int | None = None) -> tuple[str | None, list[dict]]:
    """(content, calls) of a whole reply: content None when only calls (and whitespace) are
    there; each call OpenAI's {"id", "type": "function", "function": {"name", "arguments"}}."""
    p = ToolCallParser(syntax, tools, ids, max_calls)
    events = p.feed(text) + p.finish()
    return join_events(events)


def join_events(events) -> tuple[str | None, list[dict]]:
    content = "".join(v for k, v in events if k == "content")
    calls = [openai_call(v) for k, v in events if k == "call"]
    if calls and not content.strip(_WS):
        content = None
    return content, calls


def openai_call(c: dict) -> dict:
    return {"id": c["id"], "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]}}


# -- forcing a call ---------------------------------------------------------------------------

_FRAME = {  # the literal text around the calls' JSON, between two calls, and the key
    # the arguments go under. Mistral's is the bare array: "[TOOL_CALLS]" is a control token,
    # which a grammar over text cannot write and a decoder drops (the parser reads the array)
    "hermes": ("<tool_call>\n", "\n</tool_call>", "\n</tool_call>\n<tool_call>\n",
               "arguments"),
    "llama3": ("", "", "; ", "parameters"),
    "mistral": ("[", "]", ", ", "arguments"),
    "json": ("", "", None, "arguments"),  # the whole reply is one call
}
NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


def call_constraint(syntax: str, tools, name: str | None = None) -> dict:
    """What a grammar engine must force for tool_choice "required" (name None: any offered
    tool) or a named function: {"syntax", "prefix": literal text, "schema": JSON schema of
    one call object {"name": const, <args key>: the tool's "parameters" schema}, "suffix":
    literal text, "separator": the literal text between two calls (None: one call only)}.
    text/grammar.tagged_json makes the grammar (its JSON without free whitespace: a small
    model under a whitespace-tolerant grammar can fill its budget with newlines). A tool
    without parameters takes exactly {}. Raises ValueError for an unknown syntax, no tools,
    or a name not offered."""
    if syntax not in _FRAME:
        raise ValueError(f"unknown tool-call syntax {syntax!r} (one of {SYNTAXES})")
    prefix, suffix, sep, key = _FRAME[syntax]
    fns = [t.get("function", t) for t in tools or () if isinstance(t, dict)]
    fns = [f for f in fns if isinstance(f, dict) and isinstance(f.get("name"), str)]
    if name is not None:
        fns = [f for f in fns if f["name"] == name]
        if not fns:
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools")
    if not fns:
        raise ValueError("a forced tool call needs at least one tool")
    alts = []
    for f in fns:
        params = f.get("parameters")
        if not isinstance(params, dict) or not params:
            params = NO_PARAMETERS
        alts.append({"type": "object",
                     "properties": {"name": {"const": f["name"]}, key: params},
                     "required": ["name", key], "additionalProperties": False})
    schema = alts[0] if len(alts) == 1 else {"anyOf": alts}
    return {"syntax": syntax, "prefix": prefix, "schema": schema, "suffix": suffix,
            "separator": sep}
