"""The Python API's OpenAI-shaped and batched entry points: Model.generate over a list of
prompts (each result equal to the prompt alone), create_completion / create_chat_completion
(the server's shapes; their text equal to generate / chat at the same settings; streamed
chunks adding up to the whole), tokenize / detokenize, embed (pooling, unit norm, the same
bits alone and in a list), one set of sampling defaults (the profile's) with a keyword-only
GenerationConfig, and structured output (response_format, grammar, a forced tool_choice)
enforced as the server enforces it, bad arguments refused by name."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import isaforge
from isaforge import GenerationConfig, StructuredOutputError
from isaforge.runtime.embed import pooling_for
from test_isaf import TINY, write_tiny_gguf

PROMPTS = ["Once upon a time", "The cat", "Lily went to", "Once upon a time"]
TEMPLATE = ("{% for m in messages %}<s>{{ m.role }}{{ m.content }}<|im_end|>{% endfor %}"
            "{% if add_generation_prompt %}<s>assistant{% endif %}")
USER = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def m(stories):
    return isaforge.load(stories / "stories260K.bin", threads=2, parallel=3)


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("api") / "tiny.gguf",
                           replace(TINY, seq_len=256), template=TEMPLATE, seed=5)
    return isaforge.load(path)


@pytest.mark.parametrize("sampling", [dict(temperature=0), dict(temperature=1.0, seed=7)])
def test_generate_list_equals_each_prompt_alone(m, sampling):
    batch = m.generate(PROMPTS, max_new_tokens=60, **sampling)
    alone = [m.generate(p, max_new_tokens=60, **sampling) for p in PROMPTS]
    assert batch == alone
    assert len(set(alone)) == 3 and all(alone)
    assert batch[0] == batch[3]
    with pytest.raises(ValueError, match="one prompt"):
        m.generate(PROMPTS, stream=True)


def test_generate_list_on_one_slot(stories, m):
    """With one KV slot the batch runs one prompt after another: the same texts."""
    one = isaforge.load(stories / "stories260K.bin", threads=1)
    assert one.engine.n_seqs == 1 and m.engine.n_seqs == 3
    assert one.generate(PROMPTS, max_new_tokens=30, temperature=0) == m.generate(
        PROMPTS, max_new_tokens=30, temperature=0)
    with pytest.raises(ValueError, match="parallel must be an integer >= 1"):
        isaforge.load(stories / "stories260K.bin", parallel=0)


def test_create_completion_shape_and_text(m):
    r = m.create_completion("Once upon a time", max_tokens=20, temperature=0, logprobs=2)
    assert set(r) == {"id", "object", "created", "model", "system_fingerprint", "choices",
                      "usage"}
    assert r["object"] == "text_completion" and r["model"] == "stories260K"
    assert r["id"].startswith("cmpl-")
    (c,) = r["choices"]
    assert c["text"] == m.generate("Once upon a time", max_new_tokens=20, temperature=0)
    assert c["finish_reason"] == "length" and c["index"] == 0
    lp = c["logprobs"]
    assert "".join(lp["tokens"]) == c["text"] and len(lp["token_logprobs"]) == 20
    assert all(len(t) == 2 for t in lp["top_logprobs"])
    assert lp["text_offset"][0] == 0
    assert r["usage"] == {"prompt_tokens": 5, "completion_tokens": 20, "total_tokens": 25}
    chunks = list(m.create_completion("Once upon a time", max_tokens=20, temperature=0,
                                      stream=True))
    assert all(ch["object"] == "text_completion" for ch in chunks)
    assert "".join(ch["choices"][0]["text"] for ch in chunks) == c["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    # echo, token ids, a stop string, n choices with seeds seed, seed + 1
    e = m.create_completion([1, 403, 407], max_tokens=5, temperature=0, echo=True)
    assert e["choices"][0]["text"].startswith("Once upon")
    for stop in (["Lily"], "Lily"):
        s = m.create_completion("Once upon a time", max_tokens=20, temperature=0, stop=stop)
        assert s["choices"][0]["text"] == c["text"].split("Lily")[0]
        assert s["choices"][0]["finish_reason"] == "stop"
    with pytest.raises(ValueError, match="stop must be a list of strings"):
        m.create_completion("Once", stop=[1])
    with pytest.raises(ValueError, match="seed must be an integer"):
        m.create_completion("Once", seed="7")
    with pytest.raises(ValueError, match="presence_penalty must be a number between -2 and 2"):
        m.create_completion("Once", presence_penalty=3)
    two = m.create_completion("Once", max_tokens=15, temperature=1.0, seed=3, n=2)
    assert [ch["text"] for ch in two["choices"]] == [
        m.create_completion("Once", max_tokens=15, temperature=1.0, seed=s)["choices"][0]["text"]
        for s in (3, 4)]


def test_create_completion_refuses_bad_arguments(m):
    with pytest.raises(ValueError, match="temperature"):
        m.create_completion("Once", temperature=-1)
    with pytest.raises(ValueError, match="max_tokens"):
        m.create_completion("Once", max_tokens=0)
    with pytest.raises(ValueError, match="logprobs must be an integer in"):
        m.create_completion("Once", logprobs=21)
    with pytest.raises(ValueError, match=r"out of range \[0, 512\)"):
        m.create_completion([1, 512])
    with pytest.raises(StructuredOutputError, match="^response_format: ") as e:
        m.create_completion("Once", response_format={"type": "json"})
    assert e.value.param == "response_format"
    with pytest.raises(ValueError, match="no chat template"):
        m.create_chat_completion(USER)
    # a long budget is cut at the context (512 positions)
    r = m.create_completion("Once", max_tokens=10_000, temperature=0)
    assert r["usage"]["total_tokens"] <= 512


def test_create_chat_completion(chat_model):
    cm = chat_model
    r = cm.create_chat_completion(USER, max_tokens=30, temperature=0, logprobs=True,
                                  top_logprobs=3)
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
    (c,) = r["choices"]
    text = cm.chat(USER, max_new_tokens=30, temperature=0)
    assert c["message"] == {"role": "assistant", "content": text}
    assert c["finish_reason"] in ("stop", "length")
    content = c["logprobs"]["content"]
    assert "".join(t["token"] for t in content) == text
    assert all(len(t["top_logprobs"]) == 3 for t in content)
    assert r["usage"]["prompt_tokens"] == len(cm.chat_tokens(USER))
    chunks = list(cm.create_chat_completion(USER, max_tokens=30, temperature=0, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(ch["object"] == "chat.completion.chunk" for ch in chunks)
    assert "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks) == text
    assert chunks[-1]["choices"][0]["finish_reason"] == c["finish_reason"]
    with pytest.raises(StructuredOutputError, match="^tool_choice: .* needs 'tools'"):
        cm.create_chat_completion(USER, tool_choice="required")
    with pytest.raises(StructuredOutputError, match="^response_format: "):
        cm.create_chat_completion(USER, response_format={"type": "json_schema"})
    with pytest.raises(ValueError, match="top_logprobs needs logprobs"):
        cm.create_chat_completion(USER, top_logprobs=2)
    with pytest.raises(ValueError, match=r"top_logprobs must be an integer in \[0, 20\]"):
        cm.create_chat_completion(USER, logprobs=True, top_logprobs=-1)


def test_one_set_of_defaults_and_a_config(chat_model):
    """generate, complete and chat all take the profile's sampling (the model card's 0.2 /
    0.9 for a chat model: generate used 1.0 before); a GenerationConfig passed as `config`
    sets what the keywords leave, a keyword given wins."""
    cm = chat_model
    assert (cm.profile.temperature, cm.profile.top_p) == (0.2, 0.9)
    card = cm.generate("aa", max_new_tokens=30, seed=11)
    assert card == cm.generate("aa", max_new_tokens=30, seed=11, temperature=0.2, top_p=0.9)
    assert card != cm.generate("aa", max_new_tokens=30, seed=11, temperature=1.0)
    toks = cm.encode("aa")
    assert cm.complete(toks, max_new_tokens=30, seed=11) == card
    cfg = GenerationConfig(temperature=0, max_new_tokens=12)
    greedy = cm.generate("aa", temperature=0, max_new_tokens=12)
    assert cm.generate("aa", config=cfg) == greedy
    assert cm.generate("aa", config=cfg, max_new_tokens=30) == cm.generate(
        "aa", temperature=0, max_new_tokens=30)
    assert cm.chat(USER, config=cfg) == cm.chat(USER, temperature=0, max_new_tokens=12)
    with pytest.raises(TypeError):
        cm.generate("aa", 12, 0, 0.9, None, False, None, cfg)  # config is keyword-only


def test_tokenize_detokenize(m, chat_model):
    assert m.tokenize("Once upon a time") == [403, 407, 261, 378]
    assert m.tokenize("Once upon a time", add_special=True) == [1, 403, 407, 261, 378]
    assert m.detokenize([1, 403, 407, 261, 378]) == "Once upon a time"
    cm = chat_model
    ids = cm.tokenize("<|im_end|>aa")
    assert cm.detokenize(ids) == "aa" and len(ids) == 2  # one control token, not its text
    assert len(cm.tokenize("<|im_end|>aa", special=False)) > 2
    with pytest.raises(ValueError, match="out of range"):
        m.detokenize([600])


def test_embed(m):
    one = m.embed("Once upon a time")
    batch = m.embed(["The cat", "Once upon a time"])
    assert one.shape == (64,) and batch.shape == (2, 64) and one.dtype == np.float32
    assert batch[1].tobytes() == one.tobytes()
    assert np.allclose(np.linalg.norm(batch.astype(np.float64), axis=1), 1, atol=1e-6)
    # mean pooling of the core's hidden states, in float64, rounded once
    h = m.engine.hidden([1, 403, 407, 261, 378]).astype(np.float64)
    raw = m.embed("Once upon a time", normalize=False)
    assert raw.tobytes() == h.mean(axis=0).astype(np.float32).tobytes()
    assert m.embed("Once upon a time", pooling="last", normalize=False).tobytes() == (
        h[-1].astype(np.float32).tobytes())
    assert m.embed("Once upon a time", pooling="cls", normalize=False).tobytes() == (
        h[0].astype(np.float32).tobytes())
    with pytest.raises(ValueError, match="pooling must be one of mean, last, cls"):
        m.embed("a", pooling="max")
    with pytest.raises(ValueError, match="longer than the context"):
        m.embed("once " * 600)
    # the cache it overwrote is not reused: generation after it is unchanged
    before = m.generate("Once upon a time", max_new_tokens=20, temperature=0)
    m.embed("Lily")
    assert m.generate("Once upon a time", max_new_tokens=20, temperature=0) == before


def test_pooling_from_gguf_metadata():
    assert pooling_for({}) == "mean"
    assert pooling_for({"general.architecture": "bert", "bert.pooling_type": 2}) == "cls"
    assert pooling_for({"general.architecture": "qwen3", "qwen3.pooling_type": 3}) == "last"
    assert pooling_for({"general.architecture": "llama", "llama.pooling_type": 0}) == "mean"


TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
HERMES = ("{% for m in messages %}<s>{{ m.role }}{{ m.content }}<|im_end|>{% endfor %}"
          "{% if tools %}<tool_call>{% endif %}{% if add_generation_prompt %}<s>assistant"
          "{% endif %}")
CALL = '<tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>'


def test_chat_completion_reads_tool_calls_as_the_server_does(chat_model):
    """The plan comes from text/chatplan.chat_plan (the server's): a reply holding a call
    becomes message.tool_calls with finish_reason "tool_calls", whole and streamed (the
    reply's text fed by hand: a random model does not write calls)."""
    from isaforge.completions import _chat_chunks
    from isaforge.runtime.responses import Choice, choice_body, structured_output

    plan = structured_output(TOOLS, "auto", template=HERMES)
    assert plan.tools == TOOLS and plan.syntax == "hermes"

    def choice():
        c = Choice(chat_model.tokenizer, 0, 0, (), None)
        c.reply, c.finish = plan.reply(5, 0), "stop"
        return c

    c = choice()
    c.text = ["Sure. ", CALL]
    body = choice_body(c, True)
    assert body["finish_reason"] == "tool_calls"
    (call,) = body["message"]["tool_calls"]
    assert call["function"] == {"name": "weather", "arguments": '{"city": "Paris"}'}
    c = choice()
    parts = ["Sure. ", CALL[:9], CALL[9:30], CALL[30:]]
    events = [(0, "text", p, c) for p in parts] + [(0, "done", "stop", c)]
    chunks = list(_chat_chunks(iter(events), {"id": "x"}, 1))
    deltas = [ch["choices"][0]["delta"] for ch in chunks[1:-1]]
    assert "".join(d.get("content", "") for d in deltas).strip() == "Sure."
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["function"]["name"] == "weather" and calls[0]["id"] == call["id"]
    assert calls[1]["function"]["arguments"] == '{"city": "Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # through the model: the tools reach the template, the random reply stays content
    r = chat_model.create_chat_completion(USER, tools=TOOLS, max_tokens=8, temperature=0)
    assert r["usage"]["prompt_tokens"] == len(chat_model.chat_tokens(USER, TOOLS))
    assert isinstance(r["choices"][0]["message"]["content"], str)
    with pytest.raises(StructuredOutputError, match="tool_choice names the function") as e:
        chat_model.create_chat_completion(USER, tools=TOOLS, tool_choice={
            "type": "function", "function": {"name": "nope"}})
    assert e.value.param == "tool_choice"
    with pytest.raises(StructuredOutputError, match="chat_template_kwargs may not set"):
        chat_model.create_chat_completion(USER, chat_template_kwargs={"messages": []})


# -- structured output: stories260K under a Hermes-style template (the server tests' own) ----

jsonschema = pytest.importorskip("jsonschema")
FORCED_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_time"}}]
ARGS = {"get_weather": FORCED_TOOLS[0]["function"]["parameters"],
        "get_time": {"type": "object", "properties": {}, "additionalProperties": False}}


@pytest.fixture(scope="module")
def hermes_model(stories):
    """stories260K with tests/test_serve_tools.py's Hermes-style template: a real model whose
    vocabulary spells the call markers, writing the call only under the grammar."""
    pytest.importorskip("llguidance")
    from test_serve_tools import HERMES as TEMPLATE_HERMES

    model = isaforge.load(stories / "stories260K.bin", threads=1)
    model.loaded.metadata["tokenizer.chat_template"] = TEMPLATE_HERMES
    return model


def _calls(r):
    (c,) = r["choices"]
    assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None
    out = []
    for call in c["message"]["tool_calls"]:
        args = json.loads(call["function"]["arguments"])
        jsonschema.validate(args, ARGS[call["function"]["name"]])
        out.append((call["function"]["name"], args))
    return out


def _streamed_calls(chunks):
    calls, finish = {}, None
    for ch in chunks:
        d = ch["choices"][0]["delta"]
        for tc in d.get("tool_calls", ()):
            c = calls.setdefault(tc["index"], ["", ""])
            c[0] += tc.get("function", {}).get("name") or ""
            c[1] += tc["function"]["arguments"]
        assert not d.get("content")
        finish = ch["choices"][0]["finish_reason"] or finish
    assert finish == "tool_calls"
    return [(n, json.loads(a)) for n, a in (calls[k] for k in sorted(calls))]


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "get_time"}}])
def test_forced_tool_choice(hermes_model, choice):
    """tool_choice "required" / a named function: the reply is a call the grammar forced,
    valid against the tool's parameters, the same whole and streamed; stories260K writes no
    call without it."""
    kw = dict(tools=FORCED_TOOLS, max_tokens=200, temperature=0, parallel_tool_calls=False)
    free = hermes_model.create_chat_completion(USER, **kw)
    assert "tool_calls" not in free["choices"][0]["message"]
    calls = _calls(hermes_model.create_chat_completion(USER, tool_choice=choice, **kw))
    want = "get_weather" if choice == "required" else "get_time"
    assert [n for n, _ in calls] == [want]
    assert _streamed_calls(hermes_model.create_chat_completion(
        USER, tool_choice=choice, stream=True, **kw)) == calls
    # the call goes back with its result (arguments as OpenAI's JSON string) and the
    # answer is text again
    r = hermes_model.create_chat_completion(USER, **kw, tool_choice=choice)
    msg = r["choices"][0]["message"]
    msgs = USER + [msg, {"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"],
                         "content": "sunny"}]
    prompt = hermes_model.render_chat(msgs, tools=FORCED_TOOLS)
    sent = json.dumps({"name": want, "arguments": calls[0][1]})
    assert f"<tool_call>{sent}</tool_call>" in prompt
    final = hermes_model.create_chat_completion(msgs, tools=FORCED_TOOLS, max_tokens=20,
                                                temperature=0)
    assert final["choices"][0]["finish_reason"] in ("stop", "length")
    assert isinstance(final["choices"][0]["message"]["content"], str)


def test_required_parallel_calls(hermes_model):
    """"required" with parallel_tool_calls (the default): one call or several, each valid."""
    counts = []
    for seed in (1, 4):
        r = hermes_model.create_chat_completion(USER, tools=FORCED_TOOLS,
                                                tool_choice="required", max_tokens=400,
                                                temperature=1.0, seed=seed)
        counts.append(len(_calls(r)))
    assert counts == [1, 2]


def test_response_format_and_grammar(hermes_model, m):
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0,
                                                     "maximum": 9}},
              "required": ["a"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    r = hermes_model.create_chat_completion(USER, response_format=fmt, max_tokens=50,
                                            temperature=0)
    assert r["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(r["choices"][0]["message"]["content"]), schema)
    c = m.create_completion("Once", response_format={"type": "json_object"}, max_tokens=20,
                            temperature=0)  # keys without bound: the budget ends it
    assert c["choices"][0]["text"].startswith('{"')
    # the same text the server's reading gives: Model.constraint of the same schema
    assert m.create_completion("Once", response_format=fmt, max_tokens=50, temperature=0)[
        "choices"][0]["text"] == m.generate("Once", 50, temperature=0,
                                            constraint=m.constraint("json_schema", schema))
    g = m.create_completion("Once", grammar='root ::= "yes" | "no"', max_tokens=10,
                            temperature=0)["choices"][0]
    assert g["text"] in ("yes", "no") and g["finish_reason"] == "stop"
    streamed = "".join(ch["choices"][0]["text"] for ch in m.create_completion(
        "Once", response_format=fmt, max_tokens=50, temperature=0, stream=True))
    assert streamed == m.create_completion("Once", response_format=fmt, max_tokens=50,
                                           temperature=0)["choices"][0]["text"]
    with pytest.raises(StructuredOutputError, match="^grammar: give either"):
        m.create_completion("Once", grammar="root ::= x", response_format=fmt)
    with pytest.raises(StructuredOutputError, match="^response_format: 'response_format' "
                                                    "cannot be enforced: the JSON schema"):
        m.create_completion("Once", response_format={"type": "json_schema", "json_schema": {
            "schema": {"type": "object", "properties": {"a": {"type": "strange"}}}}})
    with pytest.raises(StructuredOutputError, match="^tool_choice: .*'response_format' "
                                                    "would constrain"):
        hermes_model.create_chat_completion(USER, tools=FORCED_TOOLS, tool_choice="required",
                                            response_format=fmt)


def test_tool_call_arguments_string_parsed(hermes_model):
    """An assistant turn's arguments as OpenAI's JSON string reach the template as an
    object, as the server's request parser gives them; text that is not JSON stays."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    msgs = USER + [{"role": "assistant", "content": None, "tool_calls": [call]}]
    text = hermes_model.render_chat(msgs)
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert hermes_model.chat_tokens(msgs) == hermes_model.tokenizer.encode(
        text, bos=hermes_model.add_bos)
    bad = {**call, "function": {**call["function"], "arguments": "{city"}}
    text = hermes_model.render_chat(USER + [{"role": "assistant", "tool_calls": [bad]}])
    assert '"arguments": "{city"' in text
