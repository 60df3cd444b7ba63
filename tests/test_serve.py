"""`isaforge serve` through the real `openai` client, against a server each test module starts
on 127.0.0.1: completions and chat, streaming and not, stop strings, seeds, usage, logprobs,
n, OpenAI's error shapes, the API key, body limit, /health, /metrics."""

from __future__ import annotations

import socket

import pytest

import isaforge
from serve_helper import serve

openai = pytest.importorskip("openai")

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def stories_model(stories):
    return isaforge.load(stories / "stories260K.bin")


@pytest.fixture(scope="module")
def srv(stories):
    with serve(stories / "stories260K.bin", "--parallel", "4") as s:
        yield s


def _alone(model, prompt, n, stop=()):
    """What the Python API generates for the same request (temperature 0)."""
    return model.generate(prompt, max_new_tokens=n, temperature=0, stop=list(stop))


def test_models_and_health(srv):
    c = srv.client()
    ids = [m.id for m in c.models.list().data]
    assert ids == ["stories260K"]
    code, body = srv.get("/health")
    assert code == 200 and '"status":"ok"' in body


def test_completion_equals_the_api(srv, stories_model):
    c = srv.client()
    r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=40, temperature=0)
    assert r.choices[0].text == _alone(stories_model, PROMPT, 40)
    assert r.choices[0].finish_reason == "length"
    n_prompt = len(stories_model.encode(PROMPT))
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (
        n_prompt, 40, n_prompt + 40)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")


def test_streaming_completion(srv):
    c = srv.client()
    whole = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=30,
                                 temperature=0).choices[0].text
    chunks = list(c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=30,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == whole
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 30


def test_stop_strings(srv, stories_model):
    c = srv.client()
    full = _alone(stories_model, PROMPT, 60)
    stop = full[20:24]  # a string the reply reaches
    assert stop and full.find(stop) >= 0
    want = full[:full.find(stop)]
    for stream in (False, True):
        r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=60,
                                 temperature=0, stop=[stop, "zzzz"], stream=stream)
        if stream:
            chunks = list(r)
            text = "".join(ch.choices[0].text for ch in chunks)
            reason = chunks[-1].choices[0].finish_reason
        else:
            text, reason = r.choices[0].text, r.choices[0].finish_reason
            # the tokens up to the one that completed the stop string, not the budget
            assert len(stories_model.encode(want, bos=False)) <= r.usage.completion_tokens < 30
        assert text == want and reason == "stop"
        assert stop not in text
    assert want == _alone(stories_model, PROMPT, 60, [stop])


def test_seed_reproducible(srv):
    c = srv.client()

    def run(seed):
        return c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=30,
                                    temperature=1.0, top_p=0.95, seed=seed).choices[0].text
    a, b, other = run(123), run(123), run(456)
    assert a == b
    assert a != other


def test_n_choices(srv):
    c = srv.client()
    r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=12, temperature=0,
                             n=3)
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    assert len({ch.text for ch in r.choices}) == 1
    assert r.usage.completion_tokens == 36


def test_logprobs(srv):
    c = srv.client()
    r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=8, temperature=0,
                             logprobs=3)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.tokens) == 8
    for tok, val, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert len(top) == 3 and val <= 0
        best = max(top.values())
        assert top[tok] == val == best  # greedy: the chosen token is the most likely


def test_error_shapes(srv):
    c = srv.client()
    with pytest.raises(openai.NotFoundError) as e:
        c.completions.create(model="gpt-4", prompt=PROMPT)
    assert e.value.body["code"] == "model_not_found" and e.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="stories260K", prompt=PROMPT, temperature=5)
    assert e.value.body["param"] == "temperature"
    assert e.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=100000)
    assert e.value.body["param"] == "max_tokens" and "context holds 512" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="stories260K", prompt=PROMPT, top_p=1.5)
    assert e.value.body["param"] == "top_p"
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model="stories260K", prompt=PROMPT, logit_bias={"512": 5})
    assert e.value.body["param"] == "logit_bias" and "[0, 512)" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:  # no chat template in a llama2.c file
        c.chat.completions.create(model="stories260K", messages=[{"role": "user",
                                                                  "content": "hi"}])
    assert e.value.body["param"] == "messages"


def test_raw_http_errors(srv):
    code, _, body = srv.post("/v1/completions", b"{not json")
    assert code == 400 and "not valid JSON" in body["error"]["message"]
    code, _, body = srv.post("/v1/completions", {"prompt": PROMPT, "stop": 3})
    assert code == 400 and body["error"]["param"] == "stop"
    code, _, body = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": "ten"})
    assert code == 400 and body["error"]["param"] == "max_tokens"
    # a body over the limit (4 MiB) is refused from its Content-Length, before it is read
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 5000000\r\n\r\n{")
        head = b""
        while b"}}" not in head:
            got = sock.recv(65536)
            if not got:
                break
            head += got
        head = head.decode()
    assert head.startswith("HTTP/1.1 413") and "request_too_large" in head
    code, _, body = srv.post("/v1/nothing", {})
    assert code == 404 and body["error"]["code"] == "not_found"
    code, _, body = srv.post("/v1/completions", {"prompt": [1] * 600, "max_tokens": 2})
    assert code == 400 and body["error"]["param"] == "prompt"
    assert "600 tokens; the context holds 512" in body["error"]["message"]
    code, _, body = srv.post("/v1/completions", {"prompt": [1, 99999]})
    assert code == 400 and "token ids must be in [0, 512)" in body["error"]["message"]
    code, _, body = srv.post("/v1/completions", {"prompt": PROMPT, "stream_options": {}})
    assert code == 400 and body["error"]["param"] == "stream_options"
    # after all that the server still answers
    code, _, body = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    assert code == 200 and body["usage"]["completion_tokens"] == 2


def test_metrics(srv):
    srv.client().completions.create(model="stories260K", prompt=PROMPT, max_tokens=4)
    code, text = srv.get("/metrics")
    assert code == 200
    for series in ('isaforge_requests_total{endpoint="completions",status="200"}',
                   "isaforge_queue_depth 0", "isaforge_generated_tokens_total",
                   "isaforge_prefill_tokens_per_second", "isaforge_decode_tokens_per_second",
                   'isaforge_time_to_first_token_seconds_bucket{le="+Inf"}',
                   "isaforge_time_to_first_token_seconds_count"):
        assert series in text, series


def test_api_key(stories):
    with serve(stories / "stories260K.bin", "--parallel", "1", api_key="sk-test-123") as s:
        with pytest.raises(openai.AuthenticationError) as e:
            s.client(api_key="wrong").completions.create(model="stories260K", prompt="x",
                                                         max_tokens=1)
        assert e.value.body["code"] == "invalid_api_key"
        code, headers, _ = s.post("/v1/completions", {"prompt": "x"})
        assert code == 401 and headers.get("www-authenticate", headers.get(
            "WWW-Authenticate")) == "Bearer"
        r = s.client().completions.create(model="stories260K", prompt="x", max_tokens=2)
        assert r.usage.completion_tokens == 2


# -- chat: SmolLM2 (it has a chat template) ----------------------------------------------------

@pytest.fixture(scope="module")
def smol_srv(smollm2_gguf):
    with serve(smollm2_gguf, "--parallel", "2", "--ctx", "512") as s:
        yield s


def test_chat(smol_srv, smollm2_gguf):
    c = smol_srv.client()
    msgs = [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": "What is the capital of France?"}]
    r = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=msgs,
                                  max_tokens=24, temperature=0)
    m = isaforge.load(smollm2_gguf, ctx=512)
    # SmolLM2's template concatenates content as a string: the server joins the text parts
    plain = [{"role": "system", "content": "Be brief."}, msgs[1]]
    want = m.chat(plain, max_new_tokens=24, temperature=0)
    assert r.choices[0].message.content == want and r.choices[0].message.role == "assistant"
    assert r.usage.prompt_tokens == len(m.chat_tokens(plain))
    chunks = list(c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=msgs,
                                            max_tokens=24, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == want
    assert chunks[-1].usage.total_tokens == r.usage.total_tokens
    assert r.choices[0].finish_reason in ("stop", "length")


def test_chat_tools_and_logprobs(smol_srv):
    c = smol_srv.client()
    msgs = [{"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny, 20 C"}]
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    r = c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=msgs,
                                  tools=tools, max_tokens=6, temperature=0, logprobs=True,
                                  top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens <= 6
    assert "".join(t.token for t in content).startswith(r.choices[0].message.content)
    for t in content:
        assert len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob == t.logprob


def test_chat_bad_message(smol_srv):
    c = smol_srv.client()
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=[
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    assert e.value.body["param"] == "messages" and "image_url" in e.value.message


def test_echo_and_ignore_eos(srv):
    c = srv.client()
    r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=5, temperature=0,
                             echo=True)
    plain = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=5,
                                 temperature=0)
    assert r.choices[0].text == PROMPT + plain.choices[0].text
    chunks = list(c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=5,
                                       temperature=0, echo=True, stream=True))
    assert "".join(ch.choices[0].text for ch in chunks) == r.choices[0].text
    # through the end of the text: exactly max_tokens tokens
    r = c.completions.create(model="stories260K", prompt=PROMPT, max_tokens=400, temperature=0,
                             extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 400 and r.choices[0].finish_reason == "length"


def test_cli_errors():
    from conftest import cli

    r = cli("serve", "/nonexistent/model.gguf", "--port", "1")
    assert r.returncode == 2 and b"no such model file" in r.stderr
    r = cli("serve", "--parallel", "0")
    assert r.returncode == 2 and b"--parallel: must be >= 1" in r.stderr
