"""Structured output requested: OpenAI's `response_format`, llama.cpp's `grammar` (GBNF) and
a tool_choice that forces a call, checked and turned into the (kind, spec) that
text/grammar.constraint_for compiles. The server (serve/structured.py, errors as 400s) and the
Python API (Model.create_chat_completion / create_completion) both read requests here.

- {"type": "text"} or neither field: no constraint;
- {"type": "json_object"}: any JSON object (llama.cpp's {"type": "json_object", "schema":
  {...}} is that schema);
- {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}: JSON
  valid against the schema (strict or not: the schema is always enforced);
- "grammar": "root ::= ...": text of that GBNF grammar;
- tool_choice "required" or a named function: the template's call syntax around the call
  object (text/chatplan.ChatPlan.forced).

A field of the wrong shape, or a schema or grammar the engine cannot compile (unsupported
keywords included), is a StructuredOutputError naming the field and the problem, never
unconstrained output."""

from __future__ import annotations

import json

from .chatplan import StructuredOutputError
from .grammar import GrammarError

TYPES = ("text", "json_object", "json_schema")


def _bad(param: str, message: str) -> StructuredOutputError:
    return StructuredOutputError(param, message)


def requested(body: dict, plan=None) -> tuple[str, object, str] | None:
    """(kind, spec, param) of the constraint `body` asks for (with a chat's ChatPlan `plan`:
    a forced tool call too), or None."""
    rf, grammar = body.get("response_format"), body.get("grammar")
    want = None
    if rf is not None:
        want = _response_format(rf)
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise _bad("grammar", "'grammar' must be a non-empty string (a GBNF grammar)")
        if want is not None:
            raise _bad("grammar", "give either 'grammar' or a JSON 'response_format', not "
                                  "both")
        want = ("gbnf", grammar, "grammar")
    forced = plan.forced() if plan is not None else None
    if forced is not None:
        if want is not None:
            raise _bad("tool_choice", f"tool_choice forces a tool call, which '{want[2]}' "
                                      "would constrain as well: give one of them")
        want = (*forced, "tool_choice")
    return want


def _response_format(rf) -> tuple[str, object, str] | None:
    p = "response_format"
    if not isinstance(rf, dict):
        raise _bad(p, f"'{p}' must be an object, got {json.dumps(rf)[:80]}")
    kind = rf.get("type")
    if kind not in TYPES:
        raise _bad(p, f"'{p}.type' must be one of {', '.join(map(repr, TYPES))}, got "
                      f"{json.dumps(kind)[:80]}")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = rf.get("schema")  # llama.cpp's extension
        if schema is None:
            return ("json_object", None, p)
        if not isinstance(schema, dict):
            raise _bad(p, f"'{p}.schema' must be an object (a JSON schema)")
        return ("json_schema", schema, p)
    js = rf.get("json_schema")
    if not isinstance(js, dict):
        raise _bad(p, f"'{p}.json_schema' must be an object with a 'schema'")
    name = js.get("name")
    if name is not None and not isinstance(name, str):
        raise _bad(p, f"'{p}.json_schema.name' must be a string")
    strict = js.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise _bad(p, f"'{p}.json_schema.strict' must be a boolean")
    schema = js.get("schema")
    if not isinstance(schema, dict):
        raise _bad(p, f"'{p}.json_schema.schema' must be an object (a JSON schema)")
    return ("json_schema", schema, p)


def compiled(compile, body: dict, plan=None):
    """The Constraint `body` asks for, made by compile(kind, spec) (a Backend's or Model's
    cached constraint_for), or None. A grammar that cannot be compiled raises
    StructuredOutputError naming the field; a missing engine raises GrammarUnavailable."""
    want = requested(body, plan)
    if want is None:
        return None
    kind, spec, param = want
    try:
        return compile(kind, spec)
    except GrammarError as e:
        raise _bad(param, f"'{param}' cannot be enforced: {e}") from None
