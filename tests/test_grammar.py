"""Constrained generation (text/grammar.py) on stories260K and small GGUF vocabularies: the
token-bytes view of each tokenizer kind, constraint_for's refusals, the Python API's output
under JSON schema / regex / GBNF / prefix+schema+suffix constraints, the batch scheduler's
constrained and unconstrained rows each equal to the request alone, and the package without
llguidance."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import isaforge
from isaforge.runtime.batch import BatchEngine, Request, Scheduler
from isaforge.text.grammar import (
    GrammarError,
    constraint_for,
    tagged_json,
    token_bytes,
    tool_call_schema,
)
from isaforge.text.hf import byte_to_unicode, load_tokenizer

if os.environ.get("CI") == "true":
    import llguidance  # noqa: F401 - the [test] extra installs it: CI runs these tests
else:
    pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")

PROMPT = "Once upon a time"
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2}},
    "required": ["name", "age", "pets"], "additionalProperties": False}


@pytest.fixture(scope="module")
def model(stories):
    return isaforge.load(stories / "stories260K.bin")


def test_llama2c_token_bytes(model):
    tok = model.tokenizer
    b = token_bytes(tok)
    assert len(b) == tok.vocab_size == 512
    assert [b[i][:1] for i in (0, 1, 2)] == [b"\xff"] * 3  # unk, BOS, EOS: special
    assert b[3 + 0x41] == b"A" and b[3 + 0x0A] == b"\n"  # "<0x41>": the byte
    the = tok.encode("the", bos=False)  # run.c adds the dummy-prefix space
    assert len(the) == 1 and b[the[0]] == b" the"  # the leading space is the token's


def test_gguf_token_bytes():
    u = byte_to_unicode()
    texts = [*u.values(), "ab", u[0x20] + "ab", u[0xC3] + u[0xA9], "<|end|>"]
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": texts,
          "tokenizer.ggml.token_type": [1] * (len(texts) - 1) + [3],
          "tokenizer.ggml.merges": ["a b", u[0x20] + " ab"], "tokenizer.ggml.pre": "gpt-2",
          "tokenizer.ggml.eos_token_id": len(texts) - 1}
    tok = load_tokenizer(md, "tiny.gguf")
    b = token_bytes(tok)
    assert b[:256] == [bytes([k]) for k in u]  # byte-level characters: their bytes
    assert b[256:] == [b"ab", b" ab", "é".encode(), b"\xff<|end|>"]
    c = constraint_for(tok, "regex", "( ab)+")  # stop ids: the tokenizer's, <|end|>
    assert c.stop_ids == (259,)
    m = c.matcher()
    space = list(u).index(0x20)
    # forced text goes as its tokens (the longest match), " " then "ab" is not offered
    assert np.flatnonzero(m.allowed()).tolist() == [257]
    assert m.advance(257) and m.accepting and not m.finished
    assert np.flatnonzero(m.allowed()).tolist() == [space, 257, 259]
    assert not m.advance(list(u).index(ord("x"))) and m.error


def test_spm_gguf_token_bytes():
    """A SentencePiece vocabulary in GGUF (Gemma's kind): "▁" is a space, "<0xXX>" the byte,
    control and unknown tokens special, a user-defined token its text."""
    pieces = [("<unk>", 2), ("<s>", 3), ("</s>", 3), ("<0x41>", 6), ("<0x0A>", 6), ("▁", 1),
              ("▁a", 1), ("é", 1), ("<start_of_turn>", 3), ("<tab>", 4)]
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": [p for p, _ in pieces],
          "tokenizer.ggml.scores": [0.0] * len(pieces),
          "tokenizer.ggml.token_type": [t for _, t in pieces],
          "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
          "tokenizer.ggml.unknown_token_id": 0}
    tok = load_tokenizer(md, "spm.gguf")
    assert token_bytes(tok) == [b"\xff<unk>", b"\xff<s>", b"\xff</s>", b"A", b"\n", b" ",
                                b" a", "é".encode(), b"\xff<start_of_turn>", b"<tab>"]
    m = constraint_for(tok, "regex", "( a)+A").matcher()
    assert np.flatnonzero(m.allowed()).tolist() == [6]  # " a", the longest-match spelling
    assert m.advance(6) and np.flatnonzero(m.allowed()).tolist() == [3, 5, 6]
    assert m.advance(3) and m.accepting and m.finished


@pytest.mark.parametrize("kind, spec, why", [
    ("json_schema", {"type": "nope"}, "the JSON schema: Invalid type: nope"),
    ("json_schema", {"type": "string", "format": "weird"}, "Unknown format: weird"),
    ("json_schema", {"$ref": "#/nowhere"}, "does not exist"),
    ("json_schema", "{not json", "the JSON schema is not valid JSON"),
    ("json_schema", [1], "must be a JSON object"),
    ("json_schema", False, "no value matches it"),
    ("json_schema", {"type": "object", "propertyNames": {"pattern": "^a"}},
     r'Unimplemented keys: \["propertyNames"\]'),
    ("json_schema", {"if": {"type": "string"}, "then": {"maxLength": 3}},
     r'Unimplemented keys: \["if", "then"\]'),
    ("lark", "start: missing", 'the Lark grammar: .*unknown name: "missing"'),
    ("regex", "(", "the regular expression: .*unclosed group"),
    ("gbnf", "root ::= other", "the GBNF grammar: .*Rule 'other' not found"),
    ("gbnf", "", "must be a non-empty string"),
    ("tagged_json", {"prefix": "<a>"}, "tagged_json constraint is"),
    ("yaml", "x", "unknown constraint kind 'yaml'"),
])
def test_refusals_name_the_problem(model, kind, spec, why):
    with pytest.raises(GrammarError, match="(?s)" + why):
        model.constraint(kind, spec)


def test_schema_output_validates(model):
    c = model.constraint("json_schema", PERSON)
    for seed in (None, 1, 2, 3):
        text = model.generate(PROMPT, 200, temperature=0 if seed is None else 1.0, seed=seed,
                              constraint=c)
        jsonschema.validate(json.loads(text), PERSON)
    # the same constraint again: every generation gets a fresh parse state
    assert model.generate(PROMPT, 200, temperature=0, constraint=c) == \
        model.generate(PROMPT, 200, temperature=0, constraint=c)
    stream = "".join(model.generate(PROMPT, 200, temperature=0, constraint=c, stream=True))
    assert stream == model.generate(PROMPT, 200, temperature=0, constraint=c)


def test_grammars_end_when_complete(model):
    # the grammar's end ends the generation: the 100-token budget is not what stopped these
    assert model.generate(PROMPT, 100, temperature=0,
                          constraint=model.constraint("regex", "(yes|no)!")) in ("yes!", "no!")
    gbnf = 'root ::= "The " animal "."\nanimal ::= "cat" | "dog" | "bird"'
    out = model.generate(PROMPT, 100, temperature=0, constraint=model.constraint("gbnf", gbnf))
    assert out in ("The cat.", "The dog.", "The bird.")
    ids = list(model.pairs(PROMPT, isaforge.GenerationConfig(
        max_new_tokens=100, temperature=0, constraint=model.constraint("gbnf", gbnf))))
    assert model.tokenizer.decode_tokens([t for _, t in ids]) == out and len(ids) < 10


def test_tagged_json(model):
    schema = {"type": "object", "properties": {
        "name": {"const": "get_weather"},
        "arguments": {"type": "object", "properties": {"city": {"type": "string",
                                                                "maxLength": 10}},
                      "required": ["city"], "additionalProperties": False}},
              "required": ["name", "arguments"], "additionalProperties": False}
    spec = {"prefix": "<tool_call>\n", "schema": schema, "suffix": "\n</tool_call>"}
    out = model.generate(PROMPT, 120, temperature=0,
                         constraint=model.constraint("tagged_json", spec))
    assert out.startswith("<tool_call>\n{") and out.endswith("}\n</tool_call>")
    call = json.loads(out[len("<tool_call>\n"):-len("\n</tool_call>")])
    jsonschema.validate(call, schema)
    assert call["name"] == "get_weather"
    # the same through a Lark grammar of one's own: tagged_json() is that grammar's text
    lark = model.constraint("lark", tagged_json("<tool_call>\n", schema, "\n</tool_call>"))
    assert model.generate(PROMPT, 120, temperature=0, constraint=lark) == out


def test_tool_call_schema(model):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
        "required": ["city"], "additionalProperties": False}}},
             {"type": "function", "function": {"name": "now"}}]
    schema = tool_call_schema(tools)
    spec = {"prefix": "<tool_call>", "schema": schema, "suffix": "</tool_call>"}
    c = model.constraint("tagged_json", spec)
    names = set()
    for seed in range(1, 7):
        out = model.generate(PROMPT, 150, temperature=1.0, seed=seed, constraint=c)
        call = json.loads(out.removeprefix("<tool_call>").removesuffix("</tool_call>"))
        jsonschema.validate(call, schema)
        names.add(call["name"])
    assert names == {"get_weather", "now"}  # either tool, by the sampler's draw
    one = tool_call_schema(tools[:1])  # a named function: that one alone
    assert one["properties"]["name"] == {"const": "get_weather"}
    with pytest.raises(GrammarError, match=r"tools\[0\] has no function name"):
        tool_call_schema([{"type": "function"}])


def test_generate_list_under_a_constraint(model):
    """Model.generate over a list of prompts (the scheduler's batch) applies the constraint
    to each, each text equal to its prompt's alone."""
    c = model.constraint("json_schema", PERSON)
    prompts = [PROMPT, "The cat", "Lily went to"]
    batch = model.generate(prompts, 200, temperature=0, constraint=c)
    assert batch == [model.generate(p, 200, temperature=0, constraint=c) for p in prompts]
    for out in batch:
        jsonschema.validate(json.loads(out), PERSON)


CALL_SCHEMA = tool_call_schema([{"type": "function", "function": {
    "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
        "required": ["city"], "additionalProperties": False}}}])
HERMES_SEP = "\n</tool_call>\n<tool_call>\n"


def test_tagged_json_separator_allows_several(model):
    """With a separator the grammar takes one call or several (tool_choice "required" with
    parallel_tool_calls): stories260K, sampled, writes one call or a few (seeds whose
    calls end within the budget: another loops until it is spent)."""
    spec = {"prefix": "<tool_call>\n", "schema": CALL_SCHEMA, "suffix": "\n</tool_call>",
            "separator": HERMES_SEP}
    c = model.constraint("tagged_json", spec)
    counts = set()
    for seed in (1, 5, 6):
        out = model.generate(PROMPT, 400, temperature=1.0, seed=seed, constraint=c)
        assert out.startswith("<tool_call>\n") and out.endswith("\n</tool_call>")
        calls = out[len("<tool_call>\n"):-len("\n</tool_call>")].split(HERMES_SEP)
        for call in calls:
            jsonschema.validate(json.loads(call), CALL_SCHEMA)
        counts.add(len(calls))
    assert 1 in counts and max(counts) > 1
    assert tagged_json("[", {}, "]", ", ").startswith('start: "[" value (", " value)* "]"')


def _walk(model, c, text: str) -> tuple[bool, bool]:
    """(every token of `text` taken, the grammar complete after them) under `c`."""
    m = c.matcher()
    for t in model.tokenizer.encode(text, bos=False):
        if not m.advance(t):
            return False, False
    return True, m.accepting


def test_tagged_json_after_a_reasoning_block(model):
    """`after`: free text up to the first "</think>", a blank line, then the call (a prompt
    that opened <think>); the text cannot go on after "</think>" any other way."""
    spec = {"prefix": "<tool_call>\n", "schema": CALL_SCHEMA, "suffix": "\n</tool_call>",
            "after": "</think>"}
    c = model.constraint("tagged_json", spec)
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert _walk(model, c, "Paris? <think> a city.</think>\n\n" + call) == (True, True)
    assert _walk(model, c, "Paris.</think>\n\n" + call[:20]) == (True, False)
    assert _walk(model, c, "Paris.</think> It is.")[0] is False
    assert _walk(model, c, "Paris.</think>\n\n</think>")[0] is False
    with pytest.raises(GrammarError, match="prefix, suffix, separator and after must be "
                                           "strings"):
        model.constraint("tagged_json", {**spec, "after": 3})


def _run(engine, reqs, together: bool):
    """The requests' token lists through one Scheduler: all admitted in one step (submitted
    while the scheduler thread waits for its lock), or one after the other."""
    sched = Scheduler(engine)
    outs = {id(r): [] for r in reqs}
    done = {}

    def emit_for(r):
        def emit(kind, value, extra):
            if kind == "token":
                outs[id(r)].append(value)
            else:
                done[id(r)] = (kind, value)
        return emit
    try:
        if together:
            with sched._cv:
                for r in reqs:
                    r.emit = emit_for(r)
                    sched.submit(r)
            while len(done) < len(reqs):
                sched._thread.join(0.01)
        else:
            for r in reqs:
                r.emit = emit_for(r)
                sched.submit(r)
                while id(r) not in done:
                    sched._thread.join(0.01)
        steps, rows = sched.stats.decode_steps, sched.stats.decode_rows
    finally:
        sched.close()
    return [(outs[id(r)], done[id(r)]) for r in reqs], steps, rows


def test_batch_rows_equal_alone(model, stories):
    engine = BatchEngine(isaforge.model.read_model(stories / "stories260K.bin"), 4)
    c = model.constraint("json_schema", PERSON)
    prompts = [model.encode(p) for p in (PROMPT, "Tom and Sam", "One day", "The cat")]

    def reqs():
        return [Request(tokens=prompts[0], max_new=60, emit=None, temperature=0,
                        stop_ids=model.stop_ids),
                Request(tokens=prompts[1], max_new=200, emit=None, temperature=0,
                        stop_ids=model.stop_ids, constraint=c),
                Request(tokens=prompts[2], max_new=60, emit=None, temperature=0.8, seed=7,
                        stop_ids=model.stop_ids),
                Request(tokens=prompts[3], max_new=200, emit=None, temperature=1.0, seed=5,
                        stop_ids=model.stop_ids, constraint=c)]
    alone, _, _ = _run(engine, reqs(), together=False)
    together, steps, rows = _run(engine, reqs(), together=True)
    assert together == alone
    assert rows >= 2 * steps  # the rows really ran in shared steps
    for toks, end in (together[1], together[3]):
        assert end == ("done", "stop")  # the grammar's end, not the budget
        jsonschema.validate(json.loads(model.tokenizer.decode_tokens(toks)), PERSON)
    assert together[0][1] == ("done", "length") and len(together[0][0]) == 60


def test_without_llguidance(stories, tmp_path):
    """The package imports and generates without the engine; a constraint names it."""
    code = f"""
import sys
sys.modules["llguidance"] = None  # import llguidance -> ImportError
import isaforge
from isaforge.text.grammar import GrammarUnavailable
m = isaforge.load({str(stories / "stories260K.bin")!r})
assert m.generate("Once", 5, temperature=0)
try:
    m.constraint("json_object")
except GrammarUnavailable as e:
    print(e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("structured output needs the llguidance package, which is not "
                                "installed (pip install 'isaforge[grammar]')")


def _random_schema(rng, depth=0) -> dict:
    """A random bounded schema, an object at the top: every string, array and number has a
    bound, so any value of it is short and the grammar ends well within the token budget."""
    kinds = ["string", "integer", "boolean", "enum", "null", "number"]
    if depth == 0:
        kinds = ["object"]
    elif depth < 3:
        kinds += ["object", "array", "anyOf"]
    k = kinds[rng.integers(len(kinds))]
    if k == "string":
        return {"type": "string", "maxLength": int(rng.integers(1, 10))}
    if k == "integer":
        lo = int(rng.integers(-50, 50))
        return {"type": "integer", "minimum": lo, "maximum": lo + int(rng.integers(0, 100))}
    if k == "number":
        return {"type": "number", "multipleOf": 0.25, "minimum": -5, "maximum": 5}
    if k == "enum":
        return {"enum": [["a", 1, None, True, "b c"][i] for i in rng.permutation(5)[:3]]}
    if k == "object":
        names = [f"k{i}" for i in range(int(rng.integers(1, 4)))]
        return {"type": "object", "additionalProperties": False,
                "properties": {n: _random_schema(rng, depth + 1) for n in names},
                "required": [n for n in names if rng.random() < 0.7]}
    if k == "array":
        return {"type": "array", "items": _random_schema(rng, depth + 1),
                "maxItems": int(rng.integers(0, 4))}
    if k == "anyOf":
        return {"anyOf": [_random_schema(rng, depth + 1) for _ in range(2)]}
    return {"type": k}


def test_random_schemas_validate(model):
    """30 random schemas, each at a random seed and temperature: the text ends by the
    grammar (not the budget) and validates."""
    rng = np.random.default_rng(20261206)
    for i in range(30):
        schema = _random_schema(rng)
        ids = list(model.pairs(PROMPT, isaforge.GenerationConfig(
            max_new_tokens=400, temperature=float(rng.choice([0, 0.7, 1.2])),
            seed=int(rng.integers(1, 1 << 30)), constraint=model.constraint("json_schema",
                                                                            schema))))
        assert len(ids) < 400, (i, schema)
        text = model.tokenizer.decode_tokens([t for _, t in ids])
        jsonschema.validate(json.loads(text), schema)


def test_chat_smollm2(smollm2_gguf):
    """Model.chat under a schema on SmolLM2 (byte-level BPE, 49,152 tokens): the reply is
    the JSON the schema allows, and GBNF holds to its alternatives."""
    m = isaforge.load(smollm2_gguf)
    schema = {"type": "object", "additionalProperties": False, "required": ["answer"],
              "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 100}}}
    msgs = [{"role": "user", "content": "What is 2 + 3? Reply in JSON."}]
    out = m.chat(msgs, max_new_tokens=40, temperature=0,
                 constraint=m.constraint("json_schema", schema))
    assert out == '{"answer": 5}'  # T=0: the same on every tier
    yes_no = m.constraint("gbnf", 'root ::= ("yes" | "no") "."')
    assert m.chat([{"role": "user", "content": "Is the sky blue?"}], max_new_tokens=20,
                  temperature=0, constraint=yes_no) in ("yes.", "no.")
