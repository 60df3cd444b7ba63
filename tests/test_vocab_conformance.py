"""llama.cpp's own tokenizer test vocabularies (../shared/conformance/llama.cpp/vocab: its
models/ggml-vocab-*.gguf with .inp inputs and .out expected ids, no BOS, special tokens not
parsed): every one whose tokenizer type isaforge supports must give llama.cpp's ids exactly;
the others must be refused with a clear error. Also the pre-tokenizers without a vocabulary
there (tekken, dbrx, smaug-bpe), on a tiny vocabulary."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from isaforge.formats.gguf import parse_gguf
from isaforge.text.hf import _B2U, _U2B, load_tokenizer
from isaforge.types import ModelFormatError

VOCAB = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "llama.cpp" / "vocab"
SEP = "\n__ggml_vocab_test__\n"
FILES = sorted(p.name for p in VOCAB.glob("ggml-vocab-*.gguf")
               if Path(f"{p}.inp").is_file() and Path(f"{p}.out").is_file())
SUPPORTED = {"deepseek-coder", "deepseek-llm", "falcon", "gpt-2", "llama-spm", "mpt", "phi-3",
             "refact", "starcoder"}
REFUSED = {"bert-bge": "unsupported tokenizer.ggml.model 'bert'"}  # WordPiece: not a model here


def _vocab_dir() -> Path:
    if not FILES:
        if os.environ.get("CI"):
            pytest.fail(f"no ggml-vocab-*.gguf with .inp/.out under {VOCAB}")
        pytest.skip(f"llama.cpp's vocabularies not found at {VOCAB}")
    return VOCAB


def _metadata(path: Path) -> dict:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        md = parse_gguf(path, mm).metadata
    return {k: v for k, v in md.items() if k.startswith("tokenizer.")}


def _cases(path: Path) -> list[tuple[str, list[int]]]:
    inputs = Path(f"{path}.inp").read_text(encoding="utf-8").split(SEP)
    outputs = Path(f"{path}.out").read_text(encoding="utf-8").split("\n")
    if inputs[-1] == "" and outputs[-1] == "":  # both files end with a separator/newline
        inputs, outputs = inputs[:-1], outputs[:-1]
    assert len(inputs) == len(outputs), f"{path.name}: {len(inputs)} inputs, {len(outputs)} outputs"
    return [(t, [int(x) for x in o.split()]) for t, o in zip(inputs, outputs, strict=True)]


def _name(file: str) -> str:
    return file.removeprefix("ggml-vocab-").removesuffix(".gguf")


def test_every_vocabulary_is_accounted_for():
    _vocab_dir()
    assert {_name(f) for f in FILES} == SUPPORTED | set(REFUSED)


@pytest.mark.parametrize("file", FILES)
def test_vocabulary_matches_llama_cpp(file):
    path = _vocab_dir() / file
    md, name = _metadata(path), _name(file)
    if name in REFUSED:
        with pytest.raises(ModelFormatError, match=REFUSED[name]):
            load_tokenizer(md, file)
        return
    tok = load_tokenizer(md, file)
    cases = _cases(path)
    assert len(cases) >= 40
    bad = [(t, tok.encode(t, bos=False, special=False), want) for t, want in cases
           if tok.encode(t, bos=False, special=False) != want]
    assert not bad, f"{file}: {len(bad)}/{len(cases)} differ, first: {bad[0]!r}"


# -- pre-tokenizers llama.cpp has no test vocabulary for here ------------------------------

def _tiny(pre: str, **extra):
    texts = [*_B2U.values(), "12", "123", "ab", "abc", "He", "Hel", "Hell", "Hello", "Wo",
             "Wor", "Worl", "World", "HelloWorld"]
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": texts,
          "tokenizer.ggml.token_type": [1] * len(texts),
          "tokenizer.ggml.merges": ["1 2", "12 3", "a b", "H e", "He l", "Hel l", "Hell o",
                                    "W o", "Wo r", "Wor l", "Worl d", "Hello World"],
          "tokenizer.ggml.pre": pre, "tokenizer.ggml.bos_token_id": 0, **extra}
    return load_tokenizer(md, "tiny.gguf"), {t: i for i, t in enumerate(texts)}


@pytest.mark.parametrize("pre, digits, abc, camel, bos", [
    ("tekken", ["1", "2", "3"], ["abc"], ["Hello", "World"], True),  # splits at case changes
    ("dbrx", ["123"], ["ab", "c"], ["HelloWorld"], False),  # llama3's regex, merges applied
    ("smaug-bpe", ["123"], ["ab", "c"], ["HelloWorld"], False),
    ("mpt", ["123"], ["ab", "c"], ["HelloWorld"], False),  # GPT-2's
])
def test_more_pre_tokenizers(pre, digits, abc, camel, bos):
    tok, ids = _tiny(pre)
    assert tok.encode("123", bos=False) == [ids[d] for d in digits]
    # tekken ignores merges for a word that is a token (the merges only give "ab" "c")
    assert tok.encode("abc", bos=False) == [ids[w] for w in abc]
    assert tok.encode("HelloWorld", bos=False) == [ids[w] for w in camel]
    assert tok.add_bos is bos
    assert _tiny(pre, **{"tokenizer.ggml.add_bos_token": not bos})[0].add_bos is (not bos)


def test_unknown_pre_tokenizer_is_refused_by_name():
    with pytest.raises(ModelFormatError, match=r"tiny.gguf: unsupported tokenizer.ggml.pre "
                       r"'no-such-pre' \(supported: .*deepseek-coder.*tekken"):
        _tiny("no-such-pre")


def test_deepseek_llm_letters_are_deepseeks_list():
    """DeepSeek's letter class is its own code point list, not \\p{L}: Armenian capitals are
    in it, Armenian small letters are not (they split off), Greek and the Kelvin sign are;
    the next regex (ASCII and full-width punctuation, ":-~" taking in ASCII letters) then cuts
    ASCII letters off a non-ASCII run, as DeepSeek's own sequence does."""
    tok, _ = _tiny("deepseek-llm")
    words = [w for w, _ in tok._hf.pre_tokenizer.pre_tokenize_str("Բարև Ωmega K")]
    as_text = ["".join(chr(_U2B[c]) for c in w).encode("latin-1").decode() for w in words]
    assert as_text == ["Բ", "արև", " Ω", "mega", " K"]
