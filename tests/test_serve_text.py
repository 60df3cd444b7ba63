"""POST /tokenize and /detokenize in llama.cpp's shapes: the ids the model's tokenizer gives,
pieces as text or (not UTF-8) byte lists, round trips, and 400s naming the field."""

from __future__ import annotations

import pytest

import isaforge
from serve_helper import serve

TEXTS = ["Once upon a time", "naïve café, 3 €, 🙂 and 日本", "line\nbreak\ttab  two spaces", ""]


@pytest.fixture(scope="module")
def srv(stories):
    with serve(stories / "stories260K.bin", "--parallel", "1") as s:
        yield s


@pytest.fixture(scope="module")
def smol(smollm2_gguf):
    with serve(smollm2_gguf, "--parallel", "1", "--ctx", "512") as s:
        yield s


def _tok(s, **body):
    code, _, out = s.post("/tokenize", body)
    assert code == 200, out
    return out["tokens"]


def _detok(s, ids):
    code, _, out = s.post("/detokenize", {"tokens": ids})
    assert code == 200, out
    return out["content"]


def test_tokenize_is_the_models_tokenizer(srv, stories):
    m = isaforge.load(stories / "stories260K.bin")
    for text in TEXTS:
        assert _tok(srv, content=text) == m.encode(text, bos=False)
        assert _tok(srv, content=text, add_special=True) == m.encode(text)
    assert _tok(srv, content="hi", add_special=True)[0] == 1  # BOS


def test_pieces_and_round_trip_llama2c(srv):
    """The stories vocabulary (SentencePiece-style, 512 tokens) spells rare characters byte by
    byte: those pieces are byte lists; joined, the pieces are the text after the dummy-prefix
    space, as llama.cpp's /detokenize gives for such a vocabulary."""
    for text in TEXTS[:3]:
        toks = _tok(srv, content=text, with_pieces=True)
        ids = [t["id"] for t in toks]
        assert ids == _tok(srv, content=text)
        raw = b"".join(t["piece"].encode() if isinstance(t["piece"], str) else bytes(t["piece"])
                       for t in toks)
        assert raw == (" " + text).encode()
        assert _detok(srv, ids) == " " + text
    pieces = [t["piece"] for t in _tok(srv, content="🙂 日本", with_pieces=True)]
    assert any(isinstance(p, list) and all(0x80 <= b <= 0xFF for b in p) for p in pieces)


def test_round_trip_smollm2(smol, smollm2_gguf):
    m = isaforge.load(smollm2_gguf, ctx=512)
    for text in TEXTS + ["<|im_start|>user\nhi<|im_end|>"]:
        ids = _tok(smol, content=text)
        assert ids == m.tokenizer.encode(text, bos=False, special=True)
        assert _detok(smol, ids) == text
    # parse_special false: the control text is spelled out as ordinary tokens
    special = _tok(smol, content="<|im_start|>")
    plain = _tok(smol, content="<|im_start|>", parse_special=False)
    assert len(special) == 1 and len(plain) > 1 and _detok(smol, plain) == "<|im_start|>"
    toks = _tok(smol, content="<|im_start|>hi 🙂", with_pieces=True)
    assert toks[0]["piece"] == "<|im_start|>"
    assert "".join(t["piece"] if isinstance(t["piece"], str) else bytes(t["piece"]).decode(
        "latin-1") for t in toks[:2]) == "<|im_start|>hi"


@pytest.mark.parametrize("path, body, param", [
    ("/tokenize", {}, "content"),
    ("/tokenize", {"content": 5}, "content"),
    ("/tokenize", {"content": "x", "add_special": "yes"}, "add_special"),
    ("/tokenize", {"content": "x", "with_pieces": 1}, "with_pieces"),
    ("/tokenize", {"content": "x", "parse_special": None}, "parse_special"),
    ("/tokenize", {"content": "x", "n_probs": 2}, "n_probs"),
    ("/detokenize", {}, "tokens"),
    ("/detokenize", {"tokens": "1 2"}, "tokens"),
    ("/detokenize", {"tokens": [1, True]}, "tokens"),
    ("/detokenize", {"tokens": [1, 2.0]}, "tokens"),
    ("/detokenize", {"tokens": [1, 512]}, "tokens"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
    ("/detokenize", {"tokens": [1], "content": "x"}, "content"),
])
def test_bad_input_names_the_field(srv, path, body, param):
    code, _, out = srv.post(path, body)
    assert code == 400 and out["error"]["param"] == param, out


def test_body_errors_and_api_key(srv, stories):
    code, _, out = srv.post("/tokenize", b"[1, 2]")
    assert code == 400 and "JSON object" in out["error"]["message"]
    code, _, out = srv.post("/detokenize", b"{nope")
    assert code == 400 and "not valid JSON" in out["error"]["message"]
    with serve(stories / "stories260K.bin", "--parallel", "1", api_key="sk-t") as s:
        code, _, _ = s.post("/tokenize", {"content": "x"})
        assert code == 401
        code, _, out = s.post("/tokenize", {"content": "x"},
                              headers={"Authorization": "Bearer sk-t"})
        assert code == 200 and out["tokens"]
