"""The server's face of text/structured.py: a request's `response_format`, `grammar` or
forcing `tool_choice` compiled (Backend.constraint, cached) into the text.grammar.Constraint
its requests run under; a bad field a 400 naming it, without the grammar engine installed a
501 naming the package."""

from __future__ import annotations

from ..text.grammar import GrammarUnavailable
from ..text.structured import StructuredOutputError, compiled
from .protocol import APIError, bad


def constraint(backend, body: dict, plan=None):
    """The compiled Constraint `body` (and a chat's ChatPlan `plan`) asks for, or None."""
    try:
        return compiled(backend.constraint, body, plan)
    except StructuredOutputError as e:
        raise bad(e.param, e.message) from None
    except GrammarUnavailable as e:
        param = "tool_choice" if plan is not None and plan.forced() else (
            "grammar" if body.get("grammar") is not None else "response_format")
        raise APIError(501, str(e), type="server_error", param=param,
                       code="grammar_unavailable") from None
