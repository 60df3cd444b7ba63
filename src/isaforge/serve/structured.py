"""Structured output: a request's `response_format` (OpenAI's) or `grammar` (llama.cpp's GBNF
field) checked and compiled into the text.grammar.Constraint its requests run under.

- {"type": "text"} or neither field: no constraint;
- {"type": "json_object"}: any JSON object (llama.cpp's {"type": "json_object", "schema":
  {...}} is that schema);
- {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}: JSON
  valid against the schema (strict or not: the schema is always enforced);
- "grammar": "root ::= ...": text of that GBNF grammar.

A field of the wrong shape, or a schema or grammar the engine cannot compile (unsupported
keywords included), is a 400 naming the field and the problem, never unconstrained output;
without the grammar engine installed, a 501 naming the package."""

from __future__ import annotations

import json

from ..text.grammar import GrammarError, GrammarUnavailable
from .protocol import APIError, bad

TYPES = ("text", "json_object", "json_schema")


def requested(body: dict) -> tuple[str, object, str] | None:
    """(kind, spec, param) of the constraint `body` asks for, or None."""
    rf, grammar = body.get("response_format"), body.get("grammar")
    want = None
    if rf is not None:
        want = _response_format(rf)
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise bad("grammar", "'grammar' must be a non-empty string (a GBNF grammar)")
        if want is not None:
            raise bad("grammar", "give either 'grammar' or a JSON 'response_format', not both")
        want = ("gbnf", grammar, "grammar")
    return want


def _response_format(rf) -> tuple[str, object, str] | None:
    p = "response_format"
    if not isinstance(rf, dict):
        raise bad(p, f"'{p}' must be an object, got {json.dumps(rf)[:80]}")
    kind = rf.get("type")
    if kind not in TYPES:
        raise bad(p, f"'{p}.type' must be one of {', '.join(map(repr, TYPES))}, got "
                     f"{json.dumps(kind)[:80]}")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = rf.get("schema")  # llama.cpp's extension
        if schema is None:
            return ("json_object", None, p)
        if not isinstance(schema, dict):
            raise bad(p, f"'{p}.schema' must be an object (a JSON schema)")
        return ("json_schema", schema, p)
    js = rf.get("json_schema")
    if not isinstance(js, dict):
        raise bad(p, f"'{p}.json_schema' must be an object with a 'schema'")
    name = js.get("name")
    if name is not None and not isinstance(name, str):
        raise bad(p, f"'{p}.json_schema.name' must be a string")
    strict = js.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise bad(p, f"'{p}.json_schema.strict' must be a boolean")
    schema = js.get("schema")
    if not isinstance(schema, dict):
        raise bad(p, f"'{p}.json_schema.schema' must be an object (a JSON schema)")
    return ("json_schema", schema, p)


def constraint(backend, body: dict):
    """The compiled Constraint `body` asks for (backend.constraint, cached), or None."""
    want = requested(body)
    if want is None:
        return None
    kind, spec, param = want
    try:
        return backend.constraint(kind, spec)
    except GrammarUnavailable as e:
        raise APIError(501, str(e), type="server_error", param=param,
                       code="grammar_unavailable") from None
    except GrammarError as e:
        raise bad(param, f"'{param}' cannot be enforced: {e}") from None
