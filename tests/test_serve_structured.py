"""Structured output through `isaforge serve` and the real `openai` client on stories260K:
20 JSON schemas whose replies parse and validate, JSON mode, llama.cpp's GBNF `grammar`,
the 400s of bad fields, schemas and grammars, constrained and unconstrained requests sharing
steps each equal to the same request alone, and the 501 without llguidance."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from serve_helper import serve

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
if os.environ.get("CI") == "true":
    import llguidance  # noqa: F401 - the [test] extra installs it: CI runs these tests
else:
    pytest.importorskip("llguidance")

PROMPT = "Once upon a time"


def _s(n=12):
    return {"type": "string", "maxLength": n}


def _i(lo=0, hi=99):
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _obj(props, req=None):
    return {"type": "object", "properties": props,
            "required": list(props if req is None else req), "additionalProperties": False}


# every string, array and number bounded: the reply ends within max_tokens (a number with
# free digits, or a string without maxLength, may run as long as a tiny model likes)
SCHEMAS = [
    _obj({"name": _s()}),
    _obj({"age": _i()}),
    _obj({"ok": {"type": "boolean"}}),
    _obj({"color": {"enum": ["red", "green", "blue"]}}),
    _obj({"name": _s(), "age": _i(0, 120), "alive": {"type": "boolean"}}),
    _obj({"tags": {"type": "array", "items": _s(8), "minItems": 1, "maxItems": 3}}),
    _obj({"scores": {"type": "array", "items": _i(0, 9), "maxItems": 4}}),
    _obj({"pet": _obj({"kind": {"enum": ["cat", "dog"]}, "name": _s(10)})}),
    _obj({"a": _obj({"b": _obj({"c": {"type": "boolean"}})})}),
    _obj({"x": {"type": "number", "multipleOf": 0.5, "minimum": -10, "maximum": 10}}),
    _obj({"size": {"enum": [1, 2, 3]}, "unit": {"const": "cm"}}),
    _obj({"todo": {"type": "array", "items": _obj({"id": _i(), "done": {"type": "boolean"}}),
                   "maxItems": 2}}),
    _obj({"title": _s(16), "note": _s(8)}, req=["title"]),
    _obj({"v": {"anyOf": [{"type": "boolean"}, _i(0, 5)]}}),
    _obj({"v": {"type": ["string", "null"], "maxLength": 6}}),
    {"type": "array", "items": {"enum": ["yes", "no"]}, "minItems": 2, "maxItems": 2},
    {"enum": ["small", "medium", "large"]},
    _obj({"when": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}}),
    _obj({"who": _obj({"first": _s(8), "last": _s(8)}),
          "friends": {"type": "array", "items": _s(6), "maxItems": 2}}),
    {"$defs": {"pt": _obj({"x": _i(), "y": _i()})},
     **_obj({"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}})},
]


@pytest.fixture(scope="module")
def srv(stories):
    with serve(stories / "stories260K.bin", "--parallel", "4") as s:
        yield s


def _fmt(schema, strict=True):
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema,
                                                   "strict": strict}}


def _complete(c, prompt=PROMPT, max_tokens=200, **extra):
    r = c.completions.create(model="stories260K", prompt=prompt, max_tokens=max_tokens,
                             temperature=0, extra_body=extra or None)
    return r.choices[0].text, r.choices[0].finish_reason


@pytest.mark.parametrize("k", range(len(SCHEMAS)))
def test_schema_replies_validate(srv, k):
    text, reason = _complete(srv.client(), response_format=_fmt(SCHEMAS[k], strict=k % 2 == 0))
    assert reason == "stop"  # the grammar ended it, within the budget
    jsonschema.validate(json.loads(text), SCHEMAS[k])


def test_schema_streamed_and_seeded(srv):
    c = srv.client()
    fmt = _fmt(SCHEMAS[4])
    whole, _ = _complete(c, response_format=fmt)
    chunks = list(c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=200,
                                       temperature=0, stream=True,
                                       extra_body={"response_format": fmt}))
    assert "".join(ch.choices[0].text for ch in chunks) == whole
    assert chunks[-1].choices[0].finish_reason == "stop"
    r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=200, temperature=1,
                             seed=3, n=4, extra_body={"response_format": fmt})
    assert len({ch.text for ch in r.choices}) > 1  # each choice its own parse state
    for ch in r.choices:
        assert ch.finish_reason == "stop"
        jsonschema.validate(json.loads(ch.text), SCHEMAS[4])


# endings that complete a JSON text cut anywhere: an open string, key, number or literal
_ENDINGS = ("", '"', 'n"', "0", " null", ": null", '": null', "ue", "rue", "e", "alse", "lse",
            "se", "ull", "ll", "l")


def _closers(s: str) -> str:
    """The brackets that close what `s` opened (strings skipped)."""
    stack, in_str, esc = [], False, False
    for ch in s:
        if in_str:
            esc, in_str = (False, True) if esc else (ch == "\\", ch != '"')
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    return "".join(reversed(stack))


def _object_prefix(text: str) -> bool:
    """Whether `text` is the start of a JSON object: one of a few endings completes it."""
    base = text.rstrip().removesuffix(",")
    for end in _ENDINGS:
        try:
            if isinstance(json.loads(base + end + _closers(base + end)), dict):
                return True
        except ValueError:
            pass
    return False


def test_object_prefix_check():
    for text in ('{"a": "x', '{"key', '{"a": 1, ', '{"a": -', '{"a": [tr', '{"a": {"b": "c\\',
                 '{"a": 1.5', '{"a": "}"'):
        assert _object_prefix(text), text
    for text in ('["a"', '{"a" 1', '{"a": 1}}', '{a', "x"):
        assert not _object_prefix(text), text


def test_json_object(srv):
    c = srv.client()
    text, reason = _complete(c, max_tokens=60, response_format={"type": "json_object"})
    assert text.startswith("{")
    # stories260K writes a key that never ends: cut at the budget, the text is still a
    # prefix of a JSON object
    assert isinstance(json.loads(text), dict) if reason == "stop" else _object_prefix(text)
    # llama.cpp's json_object with a schema is that schema
    fmt = {"type": "json_object", "schema": SCHEMAS[3]}
    text, reason = _complete(c, response_format=fmt)
    assert reason == "stop" and json.loads(text)["color"] in ("red", "green", "blue")


def test_gbnf_grammar(srv):
    c = srv.client()
    gbnf = ('root ::= "The " animal " is " colour "."\n'
            'animal ::= "cat" | "dog" | "bird"\ncolour ::= "red" | "blue" | [a-z]{3,5}')
    text, reason = _complete(c, grammar=gbnf)
    assert reason == "stop"
    words = text.split()
    assert words[0] == "The" and words[1] in ("cat", "dog", "bird") and words[2] == "is"
    assert text.endswith(".") and 3 <= len(words[3]) - 1 <= 5 and words[3][:-1].isalpha()
    # grammar text of any unconstrained sample: the same model without it says otherwise
    assert _complete(c, max_tokens=12)[0] != text


@pytest.mark.parametrize("extra, param, why", [
    ({"response_format": _fmt({"type": "nope"})}, "response_format", "Invalid type: nope"),
    ({"response_format": _fmt({"type": "string", "format": "nope"})}, "response_format",
     "Unknown format: nope"),
    ({"response_format": _fmt({"properties": {"a": {"$ref": "#/missing"}}})},
     "response_format", "does not exist"),
    ({"response_format": _fmt({"type": "array", "uniqueItems": True})}, "response_format",
     'Unimplemented keys: ["uniqueItems"]'),  # never a reply that ignores a keyword
    ({"response_format": {"type": "json_schema"}}, "response_format",
     "'response_format.json_schema' must be an object"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format", "'response_format.json_schema.schema' must be an object"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {}, "strict": 1}}},
     "response_format", "strict' must be a boolean"),
    ({"response_format": {"type": "xml"}}, "response_format", "'response_format.type' must be"),
    ({"response_format": "json"}, "response_format", "'response_format' must be an object"),
    ({"grammar": "root ::= missing"}, "grammar", "Rule 'missing' not found"),
    ({"grammar": 'root ::= "a" ('}, "grammar", "GBNF"),
    ({"grammar": ""}, "grammar", "'grammar' must be a non-empty string"),
    ({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "grammar",
     "either"),
])
def test_bad_fields_400(srv, extra, param, why):
    c = srv.client()
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=5, extra_body=extra)
    assert e.value.body["param"] == param and why in e.value.body["message"]


def test_text_format_is_plain(srv):
    c = srv.client()
    assert _complete(c, max_tokens=20, response_format={"type": "text"}) == \
        _complete(c, max_tokens=20)


def test_shared_steps_equal_alone(srv):
    """Constrained and unconstrained requests at once (4 slots, 8 requests): each reply
    equals the same request sent alone, byte for byte."""
    reqs = [dict(prompt=p, max_tokens=48) for p in ("One day", "Tom and Sam", "The dog",
                                                   "Lily had")]
    reqs += [dict(prompt=p, max_tokens=200, response_format=_fmt(SCHEMAS[k]))
             for p, k in (("One day", 4), ("The cat", 18), ("Sue said", 11), ("Ben", 5))]

    def one(r):
        r = dict(r)
        p, n = r.pop("prompt"), r.pop("max_tokens")
        return _complete(srv.client(), p, n, **r)

    alone = [one(r) for r in reqs]
    before = _metric(srv, "isaforge_decode_steps_total"), _metric(
        srv, "isaforge_generated_tokens_total")
    with ThreadPoolExecutor(len(reqs)) as pool:
        together = list(pool.map(one, reqs))
    steps = _metric(srv, "isaforge_decode_steps_total") - before[0]
    gen = _metric(srv, "isaforge_generated_tokens_total") - before[1]
    assert together == alone
    assert [r for _, r in together[:4]] == ["length"] * 4
    assert [r for _, r in together[4:]] == ["stop"] * 4
    assert steps < 0.75 * gen  # rows were decoded together


def _metric(srv, name: str) -> float:
    code, text = srv.get("/metrics")
    assert code == 200
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_without_llguidance_501(stories, tmp_path, monkeypatch):
    """A server without the engine answers a constrained request with a 501 naming the
    package, and plain requests as ever."""
    shadow = tmp_path / "llguidance"
    shadow.mkdir()
    (shadow / "__init__.py").write_text('raise ImportError("not installed")\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]))
    with serve(stories / "stories260K.bin") as s:
        code, _, body = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 5,
                                                   "response_format": {"type": "json_object"}})
        assert code == 501 and body["error"]["code"] == "grammar_unavailable"
        assert "llguidance" in body["error"]["message"]
        assert body["error"]["param"] == "response_format"
        tools = [{"type": "function", "function": {"name": "f"}}]  # a call forced: the same
        code, _, body = s.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "tools": tools,
            "tool_choice": "required"})
        assert code == 501 and body["error"]["param"] == "tool_choice"
        code, _, body = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 5})
        assert code == 200 and body["choices"][0]["finish_reason"] == "length"


def test_chat_smollm2(smollm2_gguf):
    """Chat with the client's own response_format on SmolLM2 (byte-level BPE, 49,152 tokens,
    end-of-turn stop ids): the reply validates, and ends at the grammar's end."""
    schema = _obj({"city": _s(20), "temperature": _i(-50, 50),
                   "sky": {"enum": ["clear", "cloudy", "rain"]}})
    with serve(smollm2_gguf, "--parallel", "2") as s:
        c = s.client()
        msgs = [{"role": "user", "content": "The weather in Paris, as JSON."}]
        r = c.chat.completions.create(model=s_model(c), messages=msgs, max_tokens=120,
                                      temperature=0, response_format=_fmt(schema))
        ch = r.choices[0]
        assert ch.finish_reason == "stop"
        jsonschema.validate(json.loads(ch.message.content), schema)
        r = c.chat.completions.create(model=s_model(c), messages=msgs, max_tokens=60,
                                      temperature=0, response_format={"type": "json_object"})
        assert r.choices[0].finish_reason == "stop"
        assert isinstance(json.loads(r.choices[0].message.content), dict)


def s_model(c) -> str:
    return c.models.list().data[0].id
