"""Tool calls and reasoning read from replies (text/toolcalls.py, text/reasoning.py,
serve/tools.Reply): recorded replies in each syntax, streamed split at every character
boundary (the joined events equal the whole reply's parse), look-alike text left as content,
the syntax and reasoning read from real chat templates, and call_constraint's shape."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO
from isaforge.serve.tools import ChatPlan, Reply, chat_plan
from isaforge.text.chat import render_chat
from isaforge.text.reasoning import ReasoningSplitter, generation_prompt, starts_inside, thinks
from isaforge.text.toolcalls import (
    ToolCallParser,
    call_constraint,
    call_ids,
    detect_syntax,
    join_events,
    parse_tool_calls,
)

# ../shared/conformance beside the repository (or beside a folder of worktrees)
TEMPLATES = next((p / "shared" / "conformance" / "llama.cpp" / "chat" / "templates"
                  for p in REPO.parents if (p / "shared" / "conformance").is_dir()),
                 REPO / "missing")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time",
                                         "parameters": {}}}
TOOLS = [WEATHER, TIME]

PARIS = '{"city": "Paris"}'
ZURICH = '{"city": "Zürich 東京"}'

# (syntax, reply as a model writes it, content, [(name, arguments)])
RECORDED = [
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
               '</tool_call>', None, [("get_weather", PARIS)]),
    ("hermes", 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": '
               '{"city": "Zürich 東京"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", '
               '"arguments": {}}\n</tool_call>', "Let me look.",
     [("get_weather", ZURICH), ("get_time", "{}")]),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}'
               '</tool_call>', None, [("get_weather", PARIS)]),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}', None,
     [("get_weather", PARIS)]),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Pa}r\\"is"}}; '
               '{"name": "get_time", "parameters": {}}', None,
     [("get_weather", '{"city": "Pa}r\\"is"}'), ("get_time", "{}")]),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                '{"name": "get_time", "arguments": {}}]', None,
     [("get_weather", PARIS), ("get_time", "{}")]),
    ("mistral", '[{"name": "get_weather", "arguments": {"city": "Paris"}}]', None,
     [("get_weather", PARIS)]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', None,
     [("get_weather", PARIS)]),
    ("json", ' {"name": "get_weather", "arguments": {"city": "Paris"}}\n', None,
     [("get_weather", PARIS)]),
    ("json", '{"name": "get_time", "parameters": {}}', None, [("get_time", "{}")]),
]

# (syntax, reply): not calls, so the reply is all content, as written
LOOKALIKES = [
    ("hermes", 'Use <tool_call> tags to call tools.'),
    ("hermes", '<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>'),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": }</tool_call> ok'),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Pa'),
    ("llama3", 'The answer is {"name": "get_weather", "parameters": {}}'),
    ("llama3", '{ "x": 1 } is a JSON object'),
    ("llama3", '{not json at all'),
    ("mistral", '[1] First, the weather.'),
    ("mistral", '[TOOL_CALLS][{"name": "nope", "arguments": {}}]'),
    ("mistral", '[{"name": "get_weather", "arguments": [1]}]'),
    ("json", '{"name": "get_weather", "arguments": {"city": "Paris"}} and then some'),
    ("json", 'Call {"name": "get_weather", "arguments": {"city": "Paris"}}'),
    ("json", '{"name": "get_weather"}'),
    ("json", '{"name": "get_weather", "arguments": {"city": "Paris"}'),
]


def _stream(parser, pieces):
    ev = []
    for p in pieces:
        ev += parser.feed(p)
    return ev + parser.finish()


def _cuts(text, two=True):
    """Every split of `text` in two, and (short texts) in three, and one character a piece."""
    n = len(text)
    yield [text]
    yield list(text)
    for i in range(n + 1):
        yield [text[:i], text[i:]]
    if two:
        for i in range(n + 1):
            for j in range(i, n + 1, 3):
                yield [text[:i], text[i:j], text[j:]]


@pytest.mark.parametrize("syntax,text,content,calls", RECORDED)
def test_recorded_calls_whole_and_streamed(syntax, text, content, calls):
    got = parse_tool_calls(text, syntax, TOOLS, call_ids(7))
    assert got[0] == content
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in got[1]] == calls
    for c in got[1]:
        assert c["type"] == "function" and json.loads(c["function"]["arguments"]) is not None
    for pieces in _cuts(text):
        assert join_events(_stream(ToolCallParser(syntax, TOOLS, call_ids(7)), pieces)) == got


@pytest.mark.parametrize("syntax,text", LOOKALIKES)
def test_lookalikes_stay_content(syntax, text):
    assert parse_tool_calls(text, syntax, TOOLS) == (text, [])
    for pieces in _cuts(text, two=False):
        assert join_events(_stream(ToolCallParser(syntax, TOOLS), pieces)) == (text, [])


def test_no_tools_offered_means_no_calls():
    text = RECORDED[0][1]
    assert parse_tool_calls(text, "hermes", []) == (text, [])


def test_content_goes_out_at_once_and_markers_are_held():
    p = ToolCallParser("hermes", TOOLS)
    assert p.feed("Hello there") == [("content", "Hello there")]
    assert p.feed(" <tool_") == []  # whitespace and a marker's beginning wait
    assert p.feed("x") == [("content", " <tool_x")]
    p = ToolCallParser("hermes", TOOLS, call_ids(1))
    assert p.feed('<tool_call>{"name": "get_time", "arguments": {}}') == []
    (kind, call), = p.feed("</tool_call>")
    assert kind == "call" and call["name"] == "get_time"


def test_parallel_false_keeps_the_first_call():
    text = RECORDED[1][1]
    content, calls = parse_tool_calls(text, "hermes", TOOLS, max_calls=1)
    assert content == "Let me look." and [c["function"]["name"] for c in calls] == [
        "get_weather"]


def test_call_ids():
    a, b = call_ids(42, 0), call_ids(42, 0)
    ids = [a(), a()]
    assert ids == [b(), b()] and ids[0] != ids[1]
    assert all(re.fullmatch("call_[0-9a-f]{24}", i) for i in ids)
    assert call_ids(42, 1)() != ids[0]
    assert re.fullmatch("[A-Za-z0-9]{9}", call_ids(None, 0, "mistral")())
    assert call_ids(None)() != call_ids(None)()


# -- reasoning --------------------------------------------------------------------------------

THOUGHT = [  # (starts inside, reply, reasoning, content)
    (False, "<think>\nThe user greets me.\n</think>\n\nHello!", "The user greets me.",
     "Hello!"),
    (True, "Okay, 2 + 2 = 4.\n</think>\n\nIt is 4.", "Okay, 2 + 2 = 4.", "It is 4."),
    (True, "thinking until the budget ends", "thinking until the budget ends", ""),
    (False, "No block here <think>x</think>", "", "No block here <think>x</think>"),
    (False, "<thin", "", "<thin"),
    (False, "  <think></think>Done", "", "Done"),
]


@pytest.mark.parametrize("inside,text,reasoning,content", THOUGHT)
def test_reasoning_split_at_every_boundary(inside, text, reasoning, content):
    for pieces in _cuts(text):
        ev = _stream(ReasoningSplitter(inside), pieces)
        assert "".join(v for k, v in ev if k == "reasoning") == reasoning
        assert "".join(v for k, v in ev if k == "content") == content


def _plan(syntax, thinks_, inside, parallel=True):
    return ChatPlan(tools=TOOLS, kwargs={}, syntax=syntax, parallel=parallel,
                    thinks=thinks_, inside=inside)


def _deltas_joined(deltas):
    """The message an OpenAI client builds from stream deltas."""
    content, reasoning, calls = "", "", {}
    for d in deltas:
        content += d.get("content", "")
        reasoning += d.get("reasoning_content", "")
        for tc in d.get("tool_calls", ()):
            c = calls.setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
            c["id"] = tc.get("id") or c["id"]
            c["name"] += tc.get("function", {}).get("name", "")
            c["arguments"] += tc["function"]["arguments"]
    return content, reasoning, [calls[k] for k in sorted(calls)]


def test_qwen3_reply_with_reasoning_and_calls_streamed():
    text = ('<think>\nThe user wants the weather.\n</think>\n\n<tool_call>\n{"name": '
            '"get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    whole = Reply(_plan("hermes", True, False), 3, 0)
    whole.feed(text)
    whole.finish()
    msg = whole.message()
    assert msg["content"] is None and msg["reasoning_content"] == "The user wants the weather."
    (call,) = msg["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": PARIS}
    for pieces in _cuts(text, two=False):
        r = Reply(_plan("hermes", True, False), 3, 0)
        deltas = [d for p in pieces for d in r.feed(p)] + r.finish()
        content, reasoning, calls = _deltas_joined(deltas)
        assert content == "" and reasoning == msg["reasoning_content"]
        assert calls == [{"id": call["id"], "name": "get_weather", "arguments": PARIS}]
        assert r.message() == msg


def test_tool_call_deltas_are_openai_shaped():
    r = Reply(_plan("hermes", False, False), 5, 0)
    deltas = r.feed(RECORDED[1][1]) + r.finish()
    assert deltas[0] == {"content": "Let me look."}
    head, args = deltas[1]["tool_calls"][0], deltas[2]["tool_calls"][0]
    assert head["index"] == 0 and head["type"] == "function" and head["id"].startswith("call_")
    assert head["function"] == {"name": "get_weather", "arguments": ""}
    assert args == {"index": 0, "function": {"arguments": ZURICH}}
    assert deltas[3]["tool_calls"][0]["index"] == 1


# -- real templates ---------------------------------------------------------------------------

def _template(name):
    p = TEMPLATES / f"{name}.jinja"
    if not p.is_file():
        pytest.skip("the conformance templates are not here")
    return p.read_text()


@pytest.mark.parametrize("name,syntax", [
    ("Qwen-Qwen2.5-7B-Instruct", "hermes"), ("Qwen-Qwen3-0.6B", "hermes"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3"), ("meta-llama-Llama-3.2-3B-Instruct", "llama3"),
    ("meta-llama-Llama-3.3-70B-Instruct", "llama3"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral"),
    ("Mistral-Small-3.2-24B-Instruct-2506", "mistral"), ("google-gemma-2-2b-it", "json"),
])
def test_syntax_of_real_templates(name, syntax):
    assert detect_syntax(_template(name)) == syntax


def test_reasoning_of_real_templates():
    qwen3, r1 = _template("Qwen-Qwen3-0.6B"), _template(
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
    assert thinks(qwen3) and thinks(r1) and not thinks(_template("Qwen-Qwen2.5-7B-Instruct"))
    assert starts_inside(generation_prompt(r1, enable_thinking=True))  # "...<think>\n"
    assert not starts_inside(generation_prompt(r1))  # its "not enable_thinking" closes it
    assert not starts_inside(generation_prompt(qwen3))
    off = generation_prompt(qwen3, enable_thinking=False)
    assert "<think>" in off and not starts_inside(off)
    plan = chat_plan({}, None, r1)
    assert plan.thinks and plan.inside and plan.syntax is None
    assert not chat_plan({"chat_template_kwargs": {"enable_thinking": False}}, None,
                         qwen3).inside


ROUND_TRIP = ["Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B",
              "NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "meta-llama-Llama-3.1-8B-Instruct",
              "meta-llama-Llama-3.2-3B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407",
              "Mistral-Small-3.2-24B-Instruct-2506"]


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_parsed_calls_render_back(name):
    """A call parsed from a reply, sent back as the assistant turn (arguments as the JSON
    string OpenAI clients send, parsed by protocol.parse_chat) with the tool's result, renders
    through the model's template."""
    from isaforge.serve.backend import _flatten
    from isaforge.serve.protocol import parse_chat

    tpl = _template(name)
    syntax = detect_syntax(tpl)
    reply = {"hermes": RECORDED[0][1], "llama3": RECORDED[3][1], "mistral": RECORDED[6][1]}
    content, calls = parse_tool_calls(reply[syntax], syntax, TOOLS, call_ids(1, 0, syntax))
    body = {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": content, "tool_calls": calls},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny, 21 C"}],
        "tools": TOOLS}
    msgs, tools, _ = parse_chat(body)
    msgs = [_flatten(m) for m in msgs]  # null content as "", as the server gives templates
    text = render_chat(tpl, msgs, tools=tools, bos_token="<s>", eos_token="</s>")
    assert "get_weather" in text and "Paris" in text and "sunny, 21 C" in text


# -- forcing a call ---------------------------------------------------------------------------

def test_call_constraint_shape():
    c = call_constraint("hermes", TOOLS)
    assert (c["syntax"], c["prefix"], c["suffix"], c["separator"]) == (
        "hermes", "<tool_call>\n", "\n</tool_call>", "\n</tool_call>\n<tool_call>\n")
    alts = c["schema"]["anyOf"]
    assert [a["properties"]["name"] for a in alts] == [{"const": "get_weather"},
                                                      {"const": "get_time"}]
    assert alts[0]["properties"]["arguments"] == WEATHER["function"]["parameters"]
    # no parameters: exactly {}, not any object (a small model would fill its budget)
    assert alts[1]["properties"]["arguments"] == {"type": "object", "properties": {},
                                                  "additionalProperties": False}
    assert all(a["required"] == ["name", "arguments"] for a in alts)
    assert "lark" not in c  # text/grammar.tagged_json builds the grammar
    one = call_constraint("llama3", TOOLS, name="get_weather")
    assert (one["prefix"], one["suffix"], one["separator"]) == ("", "", "; ")
    assert one["schema"]["properties"]["name"] == {"const": "get_weather"}
    assert one["schema"]["required"] == ["name", "parameters"]
    assert call_constraint("json", TOOLS)["separator"] is None  # the reply is one call
    # Mistral's [TOOL_CALLS] is a control token: the bare array, which the parser reads
    m = call_constraint("mistral", TOOLS)
    assert (m["prefix"], m["suffix"], m["separator"]) == ("[", "]", ", ")
    # text each constraint forces, one call or several, parses back as those calls
    time_, paris = ('{"name": "get_time", "%s": {}}', '{"name": "get_weather", "%s": %s}')
    for syntax in ("hermes", "llama3", "mistral", "json"):
        c = call_constraint(syntax, TOOLS)
        key = "parameters" if syntax == "llama3" else "arguments"
        calls = [time_ % key, paris % (key, PARIS)][:1 if c["separator"] is None else 2]
        forced = c["prefix"] + (c["separator"] or "").join(calls) + c["suffix"]
        content, got = parse_tool_calls(forced, syntax, TOOLS)
        assert content is None, syntax
        assert [(g["function"]["name"], json.loads(g["function"]["arguments"])) for g in got] \
            == [("get_time", {}), ("get_weather", {"city": "Paris"})][:len(calls)], syntax
    with pytest.raises(ValueError, match="not among the tools"):
        call_constraint("hermes", TOOLS, name="nope")
    with pytest.raises(ValueError, match="unknown tool-call syntax"):
        call_constraint("xml", TOOLS)


@pytest.mark.parametrize("body,param,msg", [
    ({"tool_choice": "sometimes"}, "tool_choice", "must be 'auto'"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
     "not among 'tools'"),
    ({"parallel_tool_calls": "no"}, "parallel_tool_calls", "must be a boolean"),
    ({"chat_template_kwargs": []}, "chat_template_kwargs", "must be an object"),
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs", "may not set"),
])
def test_bad_tool_fields(body, param, msg):
    from isaforge.serve.protocol import APIError

    with pytest.raises(APIError, match=msg) as e:
        chat_plan(body, TOOLS, "<tool_call>")
    assert e.value.status == 400 and e.value.param == param


def test_tool_choice_none_offers_nothing():
    plan = chat_plan({"tool_choice": "none"}, TOOLS, "<tool_call>")
    assert plan.tools is None and plan.syntax is None and plan.reply(1, 0) is None
    plan = chat_plan({"parallel_tool_calls": False}, TOOLS, "<tool_call>")
    assert plan.tools == TOOLS and plan.syntax == "hermes" and not plan.parallel


def test_plan_constraint_is_call_constraint():
    plan = _plan("hermes", False, False)
    assert plan.constraint() is None and plan.forced() is None  # "auto"
    plan.choice = "required"
    c = call_constraint("hermes", TOOLS)
    assert plan.constraint() == c
    # "required" with parallel_tool_calls: one call or several, joined by the separator
    assert plan.forced() == ("tagged_json", {"prefix": c["prefix"], "schema": c["schema"],
                                             "suffix": c["suffix"],
                                             "separator": c["separator"]})
    plan.parallel = False
    assert "separator" not in plan.forced()[1]
    plan.choice = {"type": "function", "function": {"name": "get_time"}}
    assert plan.constraint() == call_constraint("hermes", TOOLS, name="get_time")
    plan.parallel = True  # a named function: that one call
    assert "separator" not in plan.forced()[1]
    # the prompt opened <think>: free reasoning up to </think>, then the call
    plan = _plan("hermes", True, True)
    plan.choice = "required"
    assert plan.forced()[1]["after"] == "</think>"
    plan = _plan("hermes", True, False)  # the model would open it: the call from the start
    plan.choice = "required"
    assert "after" not in plan.forced()[1]


def test_required_and_named_plan():
    """chat_plan takes "required" and a named function, forced by a grammar; a forced call
    and response_format cannot both constrain the reply."""
    from isaforge.text.chatplan import StructuredOutputError
    from isaforge.text.structured import requested

    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        body = {"tool_choice": choice}
        plan = chat_plan(body, TOOLS, "<tool_call>")
        kind, spec, param = requested(body, plan)
        assert (kind, param) == ("tagged_json", "tool_choice") and spec["prefix"] == \
            "<tool_call>\n"
        body["response_format"] = {"type": "json_object"}
        with pytest.raises(StructuredOutputError, match="'response_format' would constrain"
                           ) as e:
            requested(body, plan)
        assert e.value.param == "tool_choice"


FRAGMENTS = ["<tool_call>", "</tool_call>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]",
             '{"name": "get_time", "arguments": {}}', '{"name": "get_weather", "parameters": '
             '{"city": "P}"}}', '[{"name": "get_time", "arguments": {}}]', "get_time", "{", "}",
             "[", "]", ";", " ", "\n", "  \n", "text", "ü東", '"', "\\", "<tool", "[TOOL",
             "<think>", "</think>"]


@pytest.mark.parametrize("syntax", ["hermes", "llama3", "mistral", "json"])
def test_random_replies_split_anywhere_equal_the_whole(syntax):
    """Replies stitched from markers, calls, brackets, quotes and text at random (a fixed
    seed): fed a character at a time, or cut at random places, they parse as the whole."""
    import random

    rng = random.Random(syntax)
    for _ in range(300):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 8)))
        cap = rng.choice([None, 1])
        whole = parse_tool_calls(text, syntax, TOOLS, call_ids(1), max_calls=cap)
        cuts = [sorted(rng.sample(range(len(text) + 1), 2)) for _ in range(5)]
        for pieces in [list(text)] + [[text[:a], text[a:b], text[b:]] for a, b in cuts]:
            p = ToolCallParser(syntax, TOOLS, call_ids(1), cap)
            assert join_events(_stream(p, pieces)) == whole, (text, pieces)
        for inside in (False, True):
            one, each = ReasoningSplitter(inside), ReasoningSplitter(inside)
            ev = one.feed(text) + one.finish()
            ev2 = [e for ch in text for e in each.feed(ch)] + each.finish()
            for kind in ("reasoning", "content"):
                assert "".join(v for k, v in ev if k == kind) == "".join(
                    v for k, v in ev2 if k == kind), (text, inside)
