"""The server's face of text/chatplan.py (tool calls, reasoning, tool_choice,
parallel_tool_calls, chat_template_kwargs): the same plan as the Python API's, its errors as
400s naming the field."""

from __future__ import annotations

from ..text.chatplan import RESERVED, ChatPlan, Reply, StructuredOutputError
from ..text.chatplan import chat_plan as _chat_plan
from .protocol import bad

__all__ = ["RESERVED", "ChatPlan", "Reply", "chat_plan"]


def chat_plan(body: dict, tools: list | None, template: str | None) -> ChatPlan:
    """text.chatplan.chat_plan, a bad field an APIError (400) naming it."""
    try:
        return _chat_plan(body, tools, template)
    except StructuredOutputError as e:
        raise bad(e.param, e.message) from None
