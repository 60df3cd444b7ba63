"""The one generation loop (runtime/generate.py) and the model profiles (runtime/profile.py):
the API's views of it give what the CLI prints, profiles carry each family's defaults, a
GenerationConfig refuses nonsense with a clear error."""

from __future__ import annotations

from dataclasses import replace

import pytest

import isaforge
from isaforge import GenerationConfig
from isaforge.runtime.generate import ContextFullError
from isaforge.runtime.profile import profile_for
from isaforge.text.llama2c import safe_piece
from test_isaf import TINY, write_tiny_gguf

PROMPT = "Once upon a time"


@pytest.fixture(scope="module")
def stories_model(stories):
    return isaforge.load(stories / "stories260K.bin", stories / "tok512.bin")


def test_pairs_are_what_run_prints_byte_for_byte(stories, stories_model):
    """run.c's golden (what `isaforge run -t 0 --steps 200` prints) from the API's pairs."""
    m = stories_model
    golden = (stories / "golden_t0_n200.txt").read_bytes()
    config = GenerationConfig(steps=200, temperature=0, echo=True, stop_ids=(1,))
    out = b"".join(safe_piece(m.tokenizer.decode(p, n)) for p, n in m.pairs(PROMPT, config))
    assert out + b"\n" == golden
    text = "".join(m.stream(PROMPT, config))  # the same loop as UTF-8 text
    assert (text + "\n").encode() == golden
    assert text == PROMPT + m.generate(PROMPT, max_new_tokens=196, temperature=0)


def test_llama2c_profile_is_run_c(stories_model):
    p = stories_model.profile
    assert (p.name, p.temperature, p.top_p, p.repeat_penalty, p.steps) == (
        "llama2c", 1.0, 0.9, 1.0, 256)
    assert p.runc_output and p.echo_prompt and p.add_bos
    assert p.stop_ids == (1, 2) and p.run_stop_ids == (1,)
    full = p.complete(GenerationConfig())
    assert (full.temperature, full.top_p, full.repeat_penalty, full.stop_ids) == (
        1.0, 0.9, 1.0, (1, 2))
    assert p.complete(GenerationConfig(temperature=0)).temperature == 0  # given wins


def test_chat_and_plain_profiles(tmp_path):
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    chat = isaforge.load(write_tiny_gguf(tmp_path / "c.gguf", replace(TINY, seq_len=64),
                                         template=template, seed=1))
    p = chat.profile
    assert (p.name, p.temperature, p.top_p, p.repeat_penalty, p.steps) == (
        "chat", 0.2, 0.9, 1.1, None)
    assert not p.runc_output and not p.echo_prompt
    assert p.stop_ids == tuple(chat.tokenizer.stop_ids) == chat.stop_ids
    plain = profile_for(chat.tokenizer, None)  # the same tokenizer without a template
    assert (plain.name, plain.temperature, plain.repeat_penalty, plain.echo_prompt) == (
        "plain", 1.0, 1.1, True)


def test_generate_reuses_the_cached_prefix_with_the_same_text(stories):
    m = isaforge.load(stories / "stories260K.bin", stories / "tok512.bin")
    first = m.generate(PROMPT, max_new_tokens=30, temperature=0)
    assert m.last_stats.prompt_tokens == 5  # BOS + 4 tokens, a fresh cache
    again = m.generate(PROMPT, max_new_tokens=30, temperature=0)
    assert again == first and m.last_stats.prompt_tokens == 1  # only the prompt's last token


def test_steps_inside_the_prompt_echo_part_of_it(stories_model):
    config = GenerationConfig(steps=2, temperature=0, echo=True)
    assert "".join(stories_model.stream(PROMPT, config)) == "Once upon"
    assert list(stories_model.stream(PROMPT, config.replace(echo=False))) == []


@pytest.mark.parametrize("fields, needle", [
    (dict(max_new_tokens=-1), "max_new_tokens must be >= 0"),
    (dict(max_new_tokens="5"), "max_new_tokens must be an integer"),
    (dict(steps=-3), "--steps must be >= 0"),
    (dict(seed=1.5), "seed must be an integer"),
    (dict(temperature=-1), "temperature"),
    (dict(top_p=2), "top-p"),
    (dict(repeat_penalty=0), "repeat penalty"),
    (dict(repeat_last_n=0), "repeat_last_n"),
    (dict(stop="x"), "stop must be a list of strings"),
    (dict(stop=["a", 3]), "stop must be a list of strings"),
    (dict(stop_ids="ab"), "stop_ids must be a sequence of token ids"),
])
def test_config_refuses_nonsense(fields, needle):
    with pytest.raises(ValueError, match=needle):
        GenerationConfig(**fields)


def test_prompt_errors_are_clear(stories_model):
    with pytest.raises(ValueError, match="no tokens"):
        stories_model.pairs([], GenerationConfig())
    with pytest.raises(ContextFullError, match="context"):
        stories_model.stream([1] * 600, GenerationConfig())
