"""Chat templates (rendered as transformers does) and the stop-string matcher."""

from __future__ import annotations

import itertools
import re
from datetime import datetime

import pytest

from isaforge.text.chat import render_chat
from isaforge.text.stream import StopMatcher

# SmolLM2-135M-Instruct's tokenizer.chat_template, as stored in its GGUF (checked below)
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
DEFAULT_SYSTEM = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                  "Hugging Face<|im_end|>\n")
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi!"},
    {"role": "assistant", "content": "Hello.\nHow can I help?"},
    {"role": "user", "content": "What is 2+2?"},
]


def test_smollm2_template_matches_gguf(smollm2_gguf):
    import mmap

    from isaforge.formats.gguf import parse_gguf

    with open(smollm2_gguf, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert parse_gguf(smollm2_gguf, mm).metadata["tokenizer.chat_template"] == SMOLLM2_TEMPLATE


def test_smollm2_conversation():
    expected = ("<|im_start|>system\nYou are terse.<|im_end|>\n"
                "<|im_start|>user\nHi!<|im_end|>\n"
                "<|im_start|>assistant\nHello.\nHow can I help?<|im_end|>\n"
                "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                "<|im_start|>assistant\n")
    assert render_chat(SMOLLM2_TEMPLATE, CONVERSATION) == expected
    no_prompt = render_chat(SMOLLM2_TEMPLATE, CONVERSATION, add_generation_prompt=False)
    assert no_prompt == expected[: -len("<|im_start|>assistant\n")]


def test_smollm2_default_system_prompt():
    got = render_chat(SMOLLM2_TEMPLATE, [{"role": "user", "content": "Hey"}])
    assert got == DEFAULT_SYSTEM + "<|im_start|>user\nHey<|im_end|>\n<|im_start|>assistant\n"
    # the default system prompt is inserted once, before the first message only
    two = render_chat(SMOLLM2_TEMPLATE, [{"role": "user", "content": "a"},
                                         {"role": "assistant", "content": "b"}], False)
    assert two == DEFAULT_SYSTEM + ("<|im_start|>user\na<|im_end|>\n"
                                    "<|im_start|>assistant\nb<|im_end|>\n")


def test_trim_and_lstrip_blocks_and_tokens():
    tpl = ("{{ bos_token }}\n  {% for m in messages %}\n    [{{ m.role }}] {{ m.content }}\n"
           "  {% endfor %}\n{% if add_generation_prompt %}>{% endif %}{{ eos_token }}")
    got = render_chat(tpl, [{"role": "user", "content": "x"}, {"role": "bot", "content": "y"}],
                      bos_token="<s>", eos_token="</s>")
    assert got == "<s>\n    [user] x\n    [bot] y\n></s>"


def test_helpers_and_extensions():
    msgs = [{"role": "user", "content": "é \"q\""}, {"role": "user", "content": "skip"},
            {"role": "user", "content": "end"}]
    tpl = ("{% for m in messages %}{% if m.content == 'skip' %}{% continue %}{% endif %}"
           "{{ m | tojson }};{% if loop.index == 3 %}{% break %}{% endif %}{% endfor %}"
           "{{ tools | tojson(indent=1) }}|{% generation %}G{% endgeneration %}|"
           "{{ strftime_now('%Y') }}")
    got = render_chat(tpl, msgs, tools={"b": 1, "a": [1, 2]})
    year = datetime.now().strftime("%Y")
    assert got == ('{"role": "user", "content": "é \\"q\\""};'
                   '{"role": "user", "content": "end"};'
                   '{\n "b": 1,\n "a": [\n  1,\n  2\n ]\n}|G|' + year)


def test_template_errors_are_value_errors():
    msgs = [{"role": "user", "content": "x"}]
    with pytest.raises(ValueError, match="Only user and assistant roles are supported"):
        render_chat("{{ raise_exception('Only user and assistant roles are supported') }}",
                    msgs)
    with pytest.raises(ValueError, match="syntax error"):
        render_chat("{% for m in messages %}", msgs)
    with pytest.raises(ValueError, match="chat template error"):
        render_chat("{{ messages.append(1) }}", msgs)  # immutable sandbox
    with pytest.raises(ValueError, match="chat template error"):
        render_chat("{{ messages[0].__class__.__mro__ }}{{ ''.__class__.mro() }}", msgs)
    with pytest.raises(ValueError, match="chat template error"):
        render_chat("{{ messages[5]['content'] + 1 }}", msgs)
    with pytest.raises(ValueError, match="non-empty string"):
        render_chat("", msgs)


@pytest.mark.parametrize("messages, reason", [
    ([], "non-empty list"),
    ("hello", "non-empty list"),
    (["hello"], r"messages\[0\] must be a dict"),
    ([{"content": "x"}], r"messages\[0\]: 'role' must be a non-empty string"),
    ([{"role": "", "content": "x"}], "'role' must be a non-empty string"),
    ([{"role": "user", "content": "a"}, {"role": "user"}],
     r"messages\[1\] \(user\): 'content' must be a string, got NoneType"),
    ([{"role": "user", "content": 3}], "'content' must be a string, got int"),
])
def test_message_validation(messages, reason):
    with pytest.raises(ValueError, match=reason):
        render_chat(SMOLLM2_TEMPLATE, messages)


# -- StopMatcher ------------------------------------------------------------------------------

def _expected_total(text: str, stops) -> tuple[str, bool]:
    idx = [i for s in stops if (i := text.find(s)) >= 0]
    return (text[: min(idx)], True) if idx else (text, False)


def _safe_prefix(seen: str, stops) -> str:
    """What may be printed after seeing `seen` (no stop yet): everything before the first
    position whose tail could still grow into a stop string."""
    for j in range(len(seen) + 1):
        if any(s.startswith(seen[j:]) for s in stops) and j < len(seen):
            return seen[:j]
    return seen


def _splits(text: str):
    """Every way to cut `text` into consecutive non-empty chunks."""
    n = len(text)
    for mask in range(1 << max(n - 1, 0)):
        cuts = [0] + [i + 1 for i in range(n - 1) if mask >> i & 1] + [n]
        yield [text[a:b] for a, b in itertools.pairwise(cuts)]


STOP_CASES = [
    ("hello world", ["wor"]),
    ("aab", ["ab"]),                      # overlapping prefix: "a" then "ab"
    ("aaab", ["aab"]),
    ("abababc", ["ababc"]),               # the stop starts inside a failed partial match
    ("xab", ["ab", "b"]),                 # two stops, the earlier one wins
    ("xbab", ["ab", "b"]),
    ("abc", ["abc"]),                     # stop is the whole text
    ("<|im_end|>rest", ["<|im_end|>"]),   # stop at the very start
    ("ok<|im", ["<|im_end|>"]),           # partial stop at the end: flush releases it
    ("no stop here", ["zz", "q"]),
    ("héllo 世界😀!", ["世界😀"]),        # unicode
    ("é😀é😀x", ["😀x"]),
    ("User: hi\nUser:", ["\nUser:", "User: hello"]),
    ("aaaa", ["aaaaa"]),                  # never completes
]


@pytest.mark.parametrize("text, stops", STOP_CASES)
def test_stop_matcher_all_splits(text, stops):
    want, want_stop = _expected_total(text, stops)
    for chunks in _splits(text):
        m, out, seen, stopped = StopMatcher(stops), "", "", False
        for c in chunks:
            emit, stopped = m.feed(c)
            out += emit
            seen += c
            if stopped:
                break
            assert out == _safe_prefix(seen, stops), (chunks, seen)
        tail = m.flush()
        assert (out + tail, stopped) == (want, want_stop), chunks
        if stopped:
            assert tail == "" and m.matched in stops and m.feed("more") == ("", True)


def test_stop_matcher_character_by_character_and_flush():
    m = StopMatcher(["</s>", "STOP"])
    emitted = [m.feed(ch) for ch in "ab</x S"]
    assert [e for e, _ in emitted] == ["a", "b", "", "", "</x", " ", ""]
    assert m.flush() == "S" and m.flush() == ""
    m = StopMatcher("</s>")
    assert m.feed("x</") == ("x", False)
    assert m.feed("s>y") == ("", True)
    assert m.matched == "</s>" and m.flush() == ""


def test_stop_matcher_no_stops_and_bad_args():
    m = StopMatcher([])
    assert m.feed("abc") == ("abc", False) and m.flush() == ""
    for bad in ([""], [None], ["ok", 3]):
        with pytest.raises(ValueError, match="non-empty strings"):
            StopMatcher(bad)


def test_stop_matcher_random_against_oracle():
    import random

    rng = random.Random(5)
    for _ in range(400):
        alpha = "ab😀"
        stops = ["".join(rng.choice(alpha) for _ in range(rng.randint(1, 4)))
                 for _ in range(rng.randint(1, 3))]
        text = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 12)))
        pieces = re.findall(".{1,3}", text, re.S)
        m, out, stopped = StopMatcher(stops), "", False
        for p in pieces:
            e, stopped = m.feed(p)
            out += e
            if stopped:
                break
        out += m.flush()
        assert (out, stopped) == _expected_total(text, stops), (text, stops, pieces)


def test_transformers_default_variables():
    # transformers passes tools=None and documents=None: "is none" tests must see None
    msgs = [{"role": "user", "content": "x"}]
    tpl = "{{ tools is none }} {{ documents is none }} {{ date_string is defined }}"
    assert render_chat(tpl, msgs) == "True True False"
    assert render_chat(tpl, msgs, tools=[], date_string="d") == "False True True"
