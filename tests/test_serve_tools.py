"""Tool calls and reasoning through the server with the real `openai` client. stories260K
never writes a tool call, so the backend here is the real one (tokenizer, scheduler, batch
engine over stories260K) with each reply's tokens swapped for a scripted text's: the server's
decoding, parsing and streaming run on exactly what a model that wrote that text would give.
The chat template is a small Hermes-style one (its "<tool_call>" picks the syntax). A call
forced by tool_choice "required" or a named function is stories260K's own reply under the
grammar, not a script."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

openai = pytest.importorskip("openai")
uvicorn = pytest.importorskip("uvicorn")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("starlette")

from isaforge.serve.app import create_app  # noqa: E402
from isaforge.serve.backend import Backend  # noqa: E402
from isaforge.text.chatplan import chat_plan  # noqa: E402
from isaforge.text.toolcalls import call_ids, parse_tool_calls  # noqa: E402
from serve_helper import free_port  # noqa: E402

HERMES = (
    "{%- if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}"
    "{% endfor %}\nCall one as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>"
    "<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
    "{%- if m.role == 'tool' %}[{{ m.tool_call_id }}] {% endif %}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>"
    "{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{%- if flag is defined %}FLAG={{ flag }}\n{% endif %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if think %}<think>\n{% endif %}{% endif %}")
THINKING = HERMES.replace("{% if think %}", "{% if true %}")  # opens <think> itself

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {}}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TWO = ('Checking both.\n' + CALL + '\n<tool_call>\n{"name": "get_time", "arguments": {}}\n'
       '</tool_call>')
USER = [{"role": "user", "content": "Weather in Paris?"}]


class Scripted(Backend):
    """stories260K's backend whose replies are the texts in `replies` (one per choice, in
    order): the real request runs, each token it emits is swapped for the script's; a reply
    None is the model's own (a forced call: what the grammar lets stories260K write)."""

    def __init__(self, path):
        super().__init__(path, parallel=2)
        self.template = HERMES
        self.replies: list[str] = []
        self.prompts: list[str] = []
        self.said: list[str] = []  # each script as the server decodes it

    def request(self, tokens, max_new, params, emit, seed_offset=0):
        text = self.replies.pop(0)
        self.prompts.append(self.tokenizer.decode_tokens(tokens))
        if text is None:  # the model's own reply (under the request's grammar, if any)
            self.said.append(None)
            return super().request(tokens, max_new, params, emit, seed_offset)
        script = self.tokenizer.encode(text, bos=False)
        self.said.append(self.tokenizer.decode_tokens(script, prev_token=tokens[-1]))
        k = 0

        def swapped(kind, value, extra):
            nonlocal k
            if k > len(script):
                return
            if kind != "token":  # the budget ran out before the script did
                k = len(script) + 1
                emit(kind, value, extra)
                return
            emit("token", script[k], None)
            k += 1
            if k == len(script):
                k += 1
                emit("done", "stop", None)

        return super().request(tokens, min(max_new, len(script) + 1),
                               dataclasses.replace(params, ignore_eos=True), swapped,
                               seed_offset)


@pytest.fixture(scope="module")
def srv(stories):
    backend = Scripted(stories / "stories260K.bin")
    port = free_port()
    app = create_app(backend)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    t0 = time.monotonic()
    while not server.started:
        assert time.monotonic() - t0 < 30 and th.is_alive(), "the server did not start"
        time.sleep(0.05)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                           max_retries=0, timeout=60)
    yield backend, client
    server.should_exit = True
    th.join(15)
    app.state.server.pool.shutdown(wait=False, cancel_futures=True)
    backend.close()


def _ask(srv, replies, template=HERMES, **kw):
    backend, client = srv
    backend.template, backend._typed = template, None
    backend.replies = list(replies)
    kw.setdefault("messages", USER)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model="stories260K", **kw)


def _streamed(chunks):
    """What a client builds from the chunks: content, reasoning, calls, finish_reason."""
    content, reasoning, calls, finish = "", "", {}, None
    for ch in chunks:
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        reasoning += (d.model_extra or {}).get("reasoning_content") or ""
        for tc in d.tool_calls or ():
            c = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            c["id"] = tc.id or c["id"]
            c["name"] += tc.function.name or ""
            c["arguments"] += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    return content, reasoning, [calls[k] for k in sorted(calls)], finish


def test_round_trip_tools_call_result_answer(srv):
    backend, _ = srv
    r = _ask(srv, [CALL], tools=TOOLS, seed=11)
    assert "Tools: get_weather get_time" in backend.prompts[-1]
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    (call,) = ch.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id == call_ids(11, 0)()  # seeded: the same id every time
    # the call and its result go back; the template renders them; the answer is text
    msgs = USER + [ch.message.model_dump(exclude_none=True),
                   {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    r2 = _ask(srv, ["It is sunny in Paris."], tools=TOOLS, messages=msgs)
    prompt = backend.prompts[-1]
    assert ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
            in prompt)
    assert f"<|im_start|>tool[{call.id}] sunny, 21 C<|im_end|>" in prompt
    assert r2.choices[0].finish_reason == "stop" and r2.choices[0].message.tool_calls is None
    assert r2.choices[0].message.content == backend.said[-1]


def test_streamed_calls_equal_the_whole_reply(srv):
    backend, _ = srv
    whole = _ask(srv, [TWO], tools=TOOLS, seed=5).choices[0]
    said = backend.said[-1]
    assert (whole.message.content, [c.model_dump() for c in whole.message.tool_calls]) == \
        parse_tool_calls(said, "hermes", TOOLS, call_ids(5, 0))
    assert whole.message.content == " Checking both."  # the tokenizer's dummy prefix
    chunks = list(_ask(srv, [TWO], tools=TOOLS, seed=5, stream=True))
    content, reasoning, calls, finish = _streamed(chunks)
    assert (content, reasoning, finish) == (" Checking both.", "", "tool_calls")
    assert calls == [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                     for c in whole.message.tool_calls]
    heads = [tc for ch in chunks if ch.choices for tc in ch.choices[0].delta.tool_calls or ()
             if tc.id]
    assert [(h.index, h.type, h.function.name, h.function.arguments) for h in heads] == [
        (0, "function", "get_weather", ""), (1, "function", "get_time", "")]


def test_parallel_tool_calls_false_keeps_one(srv):
    for stream in (False, True):
        r = _ask(srv, [TWO], tools=TOOLS, parallel_tool_calls=False, stream=stream)
        if stream:
            _, _, calls, finish = _streamed(r)
            names = [c["name"] for c in calls]
        else:
            names = [c.function.name for c in r.choices[0].message.tool_calls]
            finish = r.choices[0].finish_reason
        assert names == ["get_weather"] and finish == "tool_calls"


def test_no_tools_or_tool_choice_none_leave_text(srv):
    backend, _ = srv
    for kw in ({}, {"tools": TOOLS, "tool_choice": "none"}):
        r = _ask(srv, [CALL], **kw)
        assert "Tools:" not in backend.prompts[-1]
        m = r.choices[0]
        assert m.message.content == backend.said[-1] and m.message.tool_calls is None
        assert m.finish_reason == "stop"
    # a call naming a tool that was not offered is text too
    r = _ask(srv, [CALL.replace("get_weather", "launch")], tools=TOOLS)
    assert r.choices[0].message.tool_calls is None and "launch" in r.choices[0].message.content


FORCED_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather now", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {}}}]
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}


def _valid(name, arguments):
    """The call names an offered tool and its arguments validate against its parameters."""
    params = {t["function"]["name"]: t["function"]["parameters"] or NO_ARGS
              for t in FORCED_TOOLS}
    assert name in params
    args = json.loads(arguments)
    jsonschema.validate(args, params[name])
    return args


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "get_time"}}])
def test_forced_call_round_trip(srv, choice, stream):
    """tool_choice "required" / a named function: stories260K's reply under the grammar is
    a valid call (it writes none unforced), the call and its result go back, and the answer
    after them is text."""
    backend, _ = srv
    want = "get_weather" if choice == "required" else "get_time"
    kw = dict(tools=FORCED_TOOLS, max_tokens=200, seed=4, parallel_tool_calls=False)
    free = _ask(srv, [None], **kw).choices[0]
    assert free.message.tool_calls is None and free.finish_reason in ("stop", "length")
    r = _ask(srv, [None], tool_choice=choice, stream=stream, **kw)
    if stream:
        content, _, calls, finish = _streamed(r)
        assert content == "" and finish == "tool_calls"
        (call,) = calls
        name, args, cid = call["name"], call["arguments"], call["id"]
    else:
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.content is None
        (c,) = ch.message.tool_calls
        name, args, cid = c.function.name, c.function.arguments, c.id
    assert name == want and cid == call_ids(4, 0)()
    parsed = _valid(name, args)
    msgs = USER + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "tool_call_id": cid, "content": "sunny, 21 C"}]
    r2 = _ask(srv, ["It is sunny in Paris."], tools=FORCED_TOOLS, messages=msgs)
    sent = json.dumps({"name": name, "arguments": parsed})
    assert f"<tool_call>{sent}</tool_call>" in backend.prompts[-1]
    assert f"<|im_start|>tool[{cid}] sunny, 21 C<|im_end|>" in backend.prompts[-1]
    assert r2.choices[0].finish_reason == "stop" and r2.choices[0].message.tool_calls is None


def test_required_parallel_and_n(srv):
    """"required" with parallel_tool_calls (the default) takes one call or several; each of n
    choices is forced on its own; streamed equals whole."""
    r = _ask(srv, [None] * 4, tools=FORCED_TOOLS, tool_choice="required", max_tokens=360,
             n=4, seed=7, temperature=1.0)  # choice k: seed 7 + k
    counts = []
    for ch in r.choices:
        assert ch.finish_reason == "tool_calls" and ch.message.content is None
        counts.append(len(ch.message.tool_calls))
        for c in ch.message.tool_calls:
            _valid(c.function.name, c.function.arguments)
    assert counts == [2, 1, 1, 2]  # as Model.create_chat_completion gives for seeds 7-10
    first = r.choices[0].message.tool_calls
    _, _, calls, finish = _streamed(_ask(srv, [None], tools=FORCED_TOOLS, stream=True,
                                         tool_choice="required", max_tokens=360, seed=7,
                                         temperature=1.0))
    assert finish == "tool_calls" and calls == [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in first]


@pytest.mark.parametrize("marker,syntax", [("[TOOL_CALLS]", "mistral"),
                                           ("<|python_tag|>", "llama3"), ("CALL:", "json")])
def test_forced_call_in_each_syntax(srv, marker, syntax):
    """The template's syntax shapes the forced text: Mistral's bare array, Llama 3's object
    with "parameters", a whole-reply object (the control-token markers are never written);
    each parses back as the forced call, whole and streamed."""
    template = HERMES.replace("<tool_call>", marker).replace("</tool_call>", "")
    assert chat_plan({}, FORCED_TOOLS, template).syntax == syntax
    kw = dict(template=template, tools=FORCED_TOOLS, max_tokens=200, seed=3,
              parallel_tool_calls=False)
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        r = _ask(srv, [None], tool_choice=choice, **kw).choices[0]
        assert r.finish_reason == "tool_calls" and r.message.content is None
        (c,) = r.message.tool_calls
        assert c.function.name == ("get_time" if isinstance(choice, dict) else "get_weather")
        _valid(c.function.name, c.function.arguments)
        assert c.id == call_ids(3, 0, syntax)()  # Mistral's: 9 letters and digits
        _, _, calls, finish = _streamed(_ask(srv, [None], tool_choice=choice, stream=True,
                                             **kw))
        assert finish == "tool_calls" and calls == [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}]


def test_forced_call_waits_for_an_open_think_block(srv):
    """A prompt that opened <think>: the reasoning is free text up to </think> (the call is
    forced after it), so stories260K, which never closes the block, reasons until the
    budget ends: no call, all reasoning (tests/test_grammar.py walks the call after it)."""
    r = _ask(srv, [None], template=THINKING, tools=FORCED_TOOLS, tool_choice="required",
             max_tokens=30)
    ch = r.choices[0]
    assert ch.finish_reason == "length" and ch.message.tool_calls is None
    assert ch.message.model_extra["reasoning_content"] and not ch.message.content


def test_forced_choice_errors(srv):
    with pytest.raises(openai.BadRequestError, match="not among 'tools'"):
        _ask(srv, [], tools=TOOLS, tool_choice={"type": "function",
                                                "function": {"name": "nope"}})
    with pytest.raises(openai.BadRequestError, match="needs 'tools'") as e:
        _ask(srv, [], tool_choice="required")
    assert e.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError, match="would constrain as well") as e:
        _ask(srv, [], tools=TOOLS, tool_choice="required",
             response_format={"type": "json_object"})
    assert e.value.body["param"] == "tool_choice"
    bad = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "strange"}}}}}]
    with pytest.raises(openai.BadRequestError, match="'tool_choice' cannot be enforced"):
        _ask(srv, [], tools=bad, tool_choice="required")


def test_reasoning_split_when_the_prompt_opens_think(srv):
    backend, _ = srv
    reply = "The user asks about Paris.\n</think>\n\n" + CALL
    r = _ask(srv, [reply], template=THINKING, tools=TOOLS, seed=2)
    assert backend.prompts[-1].endswith("<|im_start|>assistant\n<think>\n")
    m = r.choices[0].message
    assert m.model_extra["reasoning_content"] == "The user asks about Paris."
    assert m.content is None and m.tool_calls[0].function.name == "get_weather"
    content, reasoning, calls, finish = _streamed(
        _ask(srv, [reply], template=THINKING, tools=TOOLS, seed=2, stream=True))
    assert (content, reasoning, finish) == ("", "The user asks about Paris.", "tool_calls")
    assert calls[0]["id"] == m.tool_calls[0].id
    # no tools: the answer after the block is content
    r = _ask(srv, ["Hmm.</think>Hello!"], template=THINKING)
    m = r.choices[0].message
    assert (m.model_extra["reasoning_content"], m.content) == ("Hmm.", "Hello!")


def test_chat_template_kwargs(srv):
    backend, _ = srv
    _ask(srv, ["ok"], extra_body={"chat_template_kwargs": {"flag": "on"}})
    assert backend.prompts[-1].endswith("FLAG=on\n<|im_start|>assistant\n")
    with pytest.raises(openai.BadRequestError, match="must be an object") as e:
        _ask(srv, [], extra_body={"chat_template_kwargs": ["flag"]})
    assert e.value.body["param"] == "chat_template_kwargs"


def test_each_choice_is_read_on_its_own(srv):
    backend, _ = srv
    r = _ask(srv, [CALL, "No tools needed."], tools=TOOLS, n=2, seed=9)
    a, b = r.choices
    assert a.finish_reason == "tool_calls" and a.message.tool_calls[0].id == call_ids(9, 0)()
    assert b.finish_reason == "stop" and b.message.tool_calls is None
    assert b.message.content == backend.said[-1]
