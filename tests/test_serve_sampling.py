"""`isaforge serve` through the real `openai` client: llama.cpp's top_k / min_p / typical_p
and OpenAI's logit_bias (top_k = 1 gives the temperature-0 bytes, a bias moves the argmax,
seeded truncated sampling repeats), their 400s naming the field, and the request fields:
an unknown one is a 400 naming it, the accepted-and-ignored ones change nothing, and
--lenient ignores unknown ones."""

from __future__ import annotations

import pytest

from serve_helper import serve

openai = pytest.importorskip("openai")

PROMPT = "Once upon a time"
M = "stories260K"


@pytest.fixture(scope="module")
def srv(stories):
    with serve(stories / "stories260K.bin", "--parallel", "4") as s:
        yield s


def _text(c, **kw):
    kw = {"model": M, "prompt": PROMPT, "max_tokens": 40, **kw}
    extra = {k: kw.pop(k) for k in ("top_k", "min_p", "typical_p", "ignore_eos") if k in kw}
    return c.completions.create(**kw, extra_body=extra or None).choices[0].text


def test_top_k_one_is_greedy(srv):
    c = srv.client()
    greedy = _text(c, temperature=0)
    for seed in (1, 2, 3):
        assert _text(c, temperature=1.5, top_p=1.0, seed=seed, top_k=1) == greedy
    # min_p = 1 keeps only the most likely token too (no ties in these logits)
    assert _text(c, temperature=1.5, seed=4, min_p=1.0) == greedy
    assert _text(c, temperature=1.5, top_p=1.0, seed=1) != greedy  # sampling really samples


def test_truncated_sampling_is_seeded_and_differs(srv):
    c = srv.client()
    for kw in (dict(top_k=5), dict(min_p=0.05), dict(typical_p=0.7),
               dict(top_k=20, min_p=0.02, typical_p=0.9)):
        a = _text(c, temperature=1.0, top_p=1.0, seed=11, **kw)
        assert a == _text(c, temperature=1.0, top_p=1.0, seed=11, **kw), kw
        assert a != _text(c, temperature=1.0, top_p=1.0, seed=12, **kw), kw


def test_logit_bias(srv):
    c = srv.client()
    r = c.completions.create(model=M, prompt=PROMPT, max_tokens=1, temperature=0, logprobs=2)
    first = r.choices[0].text
    tok = srv.post("/tokenize", {"content": first})[2]["tokens"]
    ids = [t for t in tok if srv.post("/detokenize", {"tokens": [t]})[2]["content"] == first]
    assert ids, (first, tok)
    banned = c.completions.create(model=M, prompt=PROMPT, max_tokens=1, temperature=0,
                                  logit_bias={str(ids[0]): -100})
    assert banned.choices[0].text != first
    # +100 on one token: it is every greedy token, and the logprobs report the biased logits
    forced = c.completions.create(model=M, prompt=PROMPT, max_tokens=5, temperature=0,
                                  logit_bias={"403": 100}, logprobs=1)
    piece = srv.post("/detokenize", {"tokens": [403]})[2]["content"]
    assert forced.choices[0].text == piece * 5
    assert all(v > -1e-3 for v in forced.choices[0].logprobs.token_logprobs)


@pytest.mark.parametrize("field, value, says", [
    ("top_k", "3", "must be an integer"),
    ("top_k", -1, "must be >= 0"),
    ("top_k", 2.5, "must be an integer"),
    ("min_p", 1.5, "between 0 and 1"),
    ("min_p", True, "must be a number"),
    ("typical_p", "x", "must be a number"),
    ("typical_p", -0.5, "between 0 and 1"),
    ("logit_bias", [1, 2], "must be an object"),
    ("logit_bias", {"abc": 1}, "is not a token id"),
    ("logit_bias", {"-3": 1}, "is not a token id"),
    ("logit_bias", {"512": 1}, "is not a token id in [0, 512)"),
    ("logit_bias", {"5": 101}, "between -100 and 100"),
    ("logit_bias", {"5": "1"}, "between -100 and 100"),
])
def test_sampler_fields_refused_naming_them(srv, field, value, says):
    for path, body in (("/v1/completions", {"prompt": PROMPT}),
                       ("/v1/chat/completions", {"messages": [{"role": "user",
                                                               "content": "hi"}]})):
        code, _, out = srv.post(path, {**body, field: value})
        assert code == 400 and out["error"]["param"] == field, (path, out)
        assert says in out["error"]["message"]


def test_unknown_fields_are_refused_naming_them(srv):
    c = srv.client()
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=M, prompt=PROMPT, max_tokens=2,
                             extra_body={"mirostat": 2})
    assert e.value.body["param"] == "mirostat" and e.value.body["code"] == "unknown_field"
    assert "--lenient" in e.value.message
    for body, name in (({"prompt": PROMPT, "max_completion_tokens": 3}, "max_completion_tokens"),
                       ({"prompt": PROMPT, "top_logprobs": 2}, "top_logprobs"),
                       ({"prompt": PROMPT, "messages": []}, "messages"),
                       ({"prompt": PROMPT, "stream": True,
                         "stream_options": {"include_usage": True, "per_token": 1}},
                        "stream_options.per_token")):
        code, _, out = srv.post("/v1/completions", body)
        assert code == 400 and out["error"]["param"] == name, out
    code, _, out = srv.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "echo": True, "foo": 1})
    assert code == 400 and out["error"]["param"] == "echo"
    assert '"echo", "foo"' in out["error"]["message"]
    # null asks for nothing: accepted, as clients that write every field they model send it
    code, _, out = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2,
                                                "reasoning_effort": None, "functions": None})
    assert code == 200, out


def test_ignored_and_other_known_fields(srv):
    """Accepted-and-ignored fields give the bytes of the same request without them; the
    tool and constrained-output names are known (not refused as unknown)."""
    c = srv.client()
    want = _text(c, temperature=0)
    got = c.completions.create(model=M, prompt=PROMPT, max_tokens=40, temperature=0,
                               user="u-1", extra_body={
                                   "store": False, "metadata": {"k": "v"},
                                   "service_tier": "auto", "prompt_cache_key": "k",
                                   "safety_identifier": "s", "cache_prompt": True,
                                   "prediction": {"type": "content", "content": "x"}})
    assert got.choices[0].text == want
    for name, value in (("grammar", None), ("response_format", {"type": "text"})):
        code, _, out = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2,
                                                    name: value})
        assert code == 200, out
    chat = {"messages": [{"role": "user", "content": "hi"}], "tool_choice": "none",
            "parallel_tool_calls": False, "chat_template_kwargs": None, "tools": [],
            "modalities": ["text"]}
    code, _, out = srv.post("/v1/chat/completions", chat)
    # known fields pass; the llama2.c model then has no chat template
    assert code == 400 and out["error"]["param"] == "messages", out
    code, _, out = srv.post("/v1/chat/completions", {**chat, "modalities": ["audio"]})
    assert code == 400 and out["error"]["param"] == "modalities"


def test_lenient_ignores_unknown_fields(stories):
    with serve(stories / "stories260K.bin", "--parallel", "1", "--lenient") as s:
        c = s.client()
        plain = _text(c, temperature=0, max_tokens=12)
        r = c.completions.create(model=M, prompt=PROMPT, max_tokens=12, temperature=0,
                                 extra_body={"mirostat": 2, "n_keep": 4})
        assert r.choices[0].text == plain
        code, _, out = s.post("/tokenize", {"content": "hi", "whatever": 1})
        assert code == 200 and out["tokens"]
        # a known field's bad value is still refused
        code, _, out = s.post("/v1/completions", {"prompt": PROMPT, "top_k": "many"})
        assert code == 400 and out["error"]["param"] == "top_k"
