"""Tool calls and reasoning in chat replies: the request's `tool_choice`,
`parallel_tool_calls` and `chat_template_kwargs` checked, and each choice's text split into
OpenAI's message fields (content, reasoning_content, tool_calls), whole or as stream deltas.
The server (serve/tools.py, its errors as 400s) and the Python API
(Model.create_chat_completion, through runtime/responses.structured_output) both plan a chat
request here, so what is honoured is decided in one place.

The syntax of calls comes from the chat template (toolcalls.py), reasoning blocks from
reasoning.py. A reply is parsed for calls only when tools were offered to the template;
"required" and a named function are forced by a grammar (`forced()`, compiled by the caller
with text/grammar.constraint_for): the reply is the call, or with parallel_tool_calls (the
default) one or more calls, as llama.cpp's grammar allows. A template that thinks: when its
generation prompt opens <think>, the reasoning is free text up to the first </think>, then
the call is forced; otherwise the grammar holds from the first token (no reasoning block, as
llama.cpp's non-lazy grammar for "required" has it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

from .reasoning import CLOSE, ReasoningSplitter, generation_prompt, starts_inside, thinks
from .toolcalls import (
    ToolCallParser,
    call_constraint,
    call_ids,
    detect_syntax,
    join_events,
    tool_names,
)


class StructuredOutputError(ValueError):
    """A request field about the reply's structure (tool_choice, parallel_tool_calls,
    chat_template_kwargs, response_format, grammar) that is malformed or cannot be enforced;
    `param` names it, `message` says why (the server's 400, the Python API's ValueError)."""

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param, self.message = param, message


def _bad(param: str, message: str) -> StructuredOutputError:
    return StructuredOutputError(param, message)


# variables the template gets from the request itself: chat_template_kwargs may not set them
RESERVED = ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token",
            "documents")


@dataclass
class ChatPlan:
    """How one chat request renders and how its replies are read."""

    tools: list | None  # offered to the template (None: none, or tool_choice "none")
    kwargs: dict  # chat_template_kwargs
    syntax: str | None  # tool-call syntax when replies are parsed for calls
    parallel: bool
    thinks: bool  # the template writes <think> blocks
    inside: bool  # ... and its generation prompt opens one
    choice: str | dict = "auto"
    compiled: object = None  # the Constraint the reply runs under (the Python API sets it)

    def reply(self, seed: int | None, index: int) -> Reply | None:
        """A choice's reply reader, None when the text is all content."""
        if self.syntax is None and not self.thinks:
            return None
        return Reply(self, seed, index)

    def constraint(self) -> dict | None:
        """What a grammar must force for tool_choice "required" or a named function
        (text/toolcalls.call_constraint), None for "auto" / "none"."""
        if self.choice in ("auto", "none") or self.syntax is None:
            return None
        name = self.choice["function"]["name"] if isinstance(self.choice, dict) else None
        return call_constraint(self.syntax, self.tools, name)

    def forced(self) -> tuple[str, dict] | None:
        """(kind, spec) of the grammar that forces the call, for text/grammar.constraint_for
        ("tagged_json"), None when nothing is forced. Several calls only for "required" with
        parallel_tool_calls; reasoning first when the generation prompt opened <think>."""
        c = self.constraint()
        if c is None:
            return None
        spec = {"prefix": c["prefix"], "schema": c["schema"], "suffix": c["suffix"]}
        if c["separator"] and self.parallel and self.choice == "required":
            spec["separator"] = c["separator"]
        if self.inside:
            spec["after"] = CLOSE
        return ("tagged_json", spec)


def _choice(v, tools) -> str | dict:
    if v is None:
        return "auto"
    if v in ("auto", "none", "required"):
        if v == "required" and not tools:
            raise _bad("tool_choice", "tool_choice 'required' needs 'tools'")
        return v
    fn = v.get("function") if isinstance(v, dict) else None
    if not (isinstance(v, dict) and v.get("type") == "function" and isinstance(fn, dict)
            and isinstance(fn.get("name"), str)):
        raise _bad("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or "
                                 "{'type': 'function', 'function': {'name': ...}}")
    if fn["name"] not in tool_names(tools):
        raise _bad("tool_choice", f"tool_choice names the function {json.dumps(fn['name'])}, "
                                 "which is not among 'tools'")
    return v


def chat_plan(body: dict, tools: list | None, template: str | None) -> ChatPlan:
    """The plan of a chat body whose `tools` protocol.parse_chat checked."""
    choice = _choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _bad("parallel_tool_calls", "'parallel_tool_calls' must be a boolean, got "
                                         f"{json.dumps(parallel)}")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise _bad("chat_template_kwargs", "'chat_template_kwargs' must be an object")
    for k in kwargs:
        if k in RESERVED:
            raise _bad("chat_template_kwargs", f"chat_template_kwargs may not set {k!r} (the "
                                              "request gives it)")
    offered = tools if tools and choice != "none" else None
    t = template or ""
    think = thinks(t)
    if think and "enable_thinking" in t:  # thinking on unless asked off, as llama.cpp has it
        kwargs = {"enable_thinking": True, **kwargs}
    return ChatPlan(tools=offered, kwargs=kwargs,
                    syntax=_syntax(t) if offered else None,
                    parallel=parallel is not False, thinks=think,
                    inside=think and _inside(t, json.dumps(kwargs, sort_keys=True)),
                    choice=choice)


@lru_cache(maxsize=16)
def _syntax(template: str) -> str:
    return detect_syntax(template)


@lru_cache(maxsize=64)
def _inside(template: str, kwargs_json: str) -> bool:
    """Whether the generation prompt leaves a <think> block open (a template that cannot
    render a one-message conversation: no)."""
    try:
        return starts_inside(generation_prompt(template, **json.loads(kwargs_json)))
    except ValueError:
        return False


class Reply:
    """One choice's text read as OpenAI's message: reasoning first, then content and calls.
    ``feed(text)`` / ``finish()`` give stream deltas ({"reasoning_content"}, {"content"},
    {"tool_calls": [...]}) and collect the message (`message`)."""

    def __init__(self, plan: ChatPlan, seed: int | None, index: int):
        self.think = ReasoningSplitter(plan.inside) if plan.thinks else None
        self.calls = None
        if plan.syntax:
            self.calls = ToolCallParser(plan.syntax, plan.tools,
                                        call_ids(seed, index, plan.syntax),
                                        None if plan.parallel else 1)
        self.reasoning: list[str] = []
        self.events: list = []  # content and call events
        self.n_calls = 0

    def _content(self, text: str, out: list) -> None:
        evs = self.calls.feed(text) if self.calls else [("content", text)]
        self._out(evs, out)

    def _out(self, evs, out: list) -> None:
        for kind, v in evs:
            self.events.append((kind, v))
            if kind == "content":
                if out and "content" in out[-1]:
                    out[-1]["content"] += v
                else:
                    out.append({"content": v})
            else:
                k = self.n_calls
                self.n_calls += 1
                out.append({"tool_calls": [{"index": k, "id": v["id"], "type": "function",
                                            "function": {"name": v["name"],
                                                         "arguments": ""}}]})
                out.append({"tool_calls": [{"index": k,
                                            "function": {"arguments": v["arguments"]}}]})

    def _split(self, evs, out: list) -> None:
        for kind, v in evs:
            if kind == "reasoning":
                self.reasoning.append(v)
                if out and "reasoning_content" in out[-1]:
                    out[-1]["reasoning_content"] += v
                else:
                    out.append({"reasoning_content": v})
            else:
                self._content(v, out)

    def feed(self, text: str) -> list[dict]:
        out: list = []
        if self.think:
            self._split(self.think.feed(text), out)
        else:
            self._content(text, out)
        return out

    def finish(self) -> list[dict]:
        out: list = []
        if self.think:
            self._split(self.think.finish(), out)
        if self.calls:
            self._out(self.calls.finish(), out)
        return out

    def message(self) -> dict:
        """The message fields after finish(): content (None when only calls), tool_calls
        when there are any, reasoning_content when the template thinks."""
        content, calls = join_events(self.events)
        msg: dict = {"content": content}
        if self.think:
            msg["reasoning_content"] = "".join(self.reasoning) or None
        if calls:
            msg["tool_calls"] = calls
        return msg
