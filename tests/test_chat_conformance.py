"""Chat templates rendered as transformers' apply_chat_template renders them, on llama.cpp's
collection of real model templates (../shared/conformance/llama.cpp/chat: cases.json, one
case per template and conversation, with transformers' output or error). Every case must be
equal: the rendered text where transformers rendered one, else the same error class and
message (ChatTemplateError.kind / .detail; transformers reported `Class: message`).
Templates that call strftime_now render on the case's date."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import pytest

from isaforge.text.chat import ChatTemplateError, render_chat

CHAT = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "llama.cpp" / "chat"


def _cases() -> list[dict]:
    f = CHAT / "cases.json"
    if not f.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"llama.cpp's chat cases not found at {f}")
        return []
    return json.loads(f.read_text("utf-8"))["cases"]


CASES = _cases()


def test_cases_present():
    if not CASES:
        pytest.skip(f"llama.cpp's chat cases not found at {CHAT}")
    assert len(CASES) >= 300
    assert sum(c["transformers_error"] is not None for c in CASES) >= 50  # errors checked too


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case):
    template = case.get("template") or (CHAT / "templates" / case["template_file"]).read_text(
        "utf-8")
    extra = dict(case.get("extra") or {})
    if case.get("date"):
        day = datetime.datetime.strptime(case["date"], "%Y-%m-%d")
        extra["strftime_now"] = day.strftime
    args = (template, case["conversation"], case["add_generation_prompt"], case["bos_token"],
            case["eos_token"])
    if case["transformers_error"] is None:
        assert render_chat(*args, **extra) == case["transformers"]
    else:
        with pytest.raises(ChatTemplateError) as e:
            render_chat(*args, **extra)
        assert f"{e.value.kind}: {e.value.detail}" == case["transformers_error"]
