"""Tokenizers from model metadata: SmolLM2's byte-level BPE against llama.cpp's ids, the
SentencePiece path against hand-worked examples and llama2.c's run.c, tokenizer.json, errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from isaforge.text.chat import render_chat
from isaforge.text.hf import _B2U, load_tokenizer
from isaforge.text.llama2c import Llama2cTokenizer
from isaforge.text.stream import StreamDecoder
from isaforge.types import ModelFormatError

DATA = json.loads((Path(__file__).parent / "data" / "smollm2_tokenizer_ids.json")
                  .read_text(encoding="utf-8"))
CASES = DATA["cases"]
NO_TOKEN_BYTES = "\x04\x06\x13\x14\x16\x1d"  # bytes SmolLM2's vocab has no token for (dropped)


def gguf_tokenizer_metadata(path) -> dict:
    """The tokenizer.* keys of a GGUF file as a plain dict (isaforge's reader when it is
    there: ten times faster than gguf.GGUFReader)."""
    try:
        import mmap

        from isaforge.formats.gguf import parse_gguf

        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            md = parse_gguf(path, mm).metadata
    except (ImportError, AttributeError, TypeError):
        import gguf

        md = {k: f.contents() for k, f in gguf.GGUFReader(path).fields.items()}
    return {k: v for k, v in md.items() if k.startswith("tokenizer.")}


@pytest.fixture(scope="session")
def smollm2_md(smollm2_gguf) -> dict:
    return gguf_tokenizer_metadata(smollm2_gguf)


@pytest.fixture(scope="session")
def tok(smollm2_md, smollm2_gguf):
    return load_tokenizer(smollm2_md, str(smollm2_gguf))


# -- SmolLM2 (gpt2 / smollm) against llama.cpp ----------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_encode_matches_recorded_llama_cpp(tok, case):
    assert tok.encode(case["text"], bos=False, special=case["special"]) == case["ids"]


def _fuzz_texts(n: int, seed: int) -> list[str]:
    pool = [" ", "  ", "\n", "\t", "\r", "\u00a0", "\u3000", "\x0b", "\x85", "a", "Z", "é",
            "e\u0301", "ß", "İ", "0", "7", "½", "²", "٣", "१", "'s", "'ll", "'D", "'", "\"",
            ".", ",", "!", "-", "_", "#", "$", "<", ">", "|", "~", "+", "😀", "👍🏽", "\u200d",
            "\ufe0f", "中", "ア", "한", "م", "न", "्", "Ж", "\x00", "\x04", "\x1b", "\x7f",
            "\u0300", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>", "<|im",
            "hello", "World", "123", "3.14", "don't", "\ufffd"]
    rng = random.Random(seed)
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 20))) for _ in range(n)]


def test_encode_matches_live_llama_cpp(tok, smollm2_gguf):
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(smollm2_gguf), vocab_only=True, verbose=False)
    texts = [(c["text"], c["special"]) for c in CASES]
    texts += [(t, i % 2 == 0) for i, t in enumerate(_fuzz_texts(300, seed=11))]
    for text, special in texts:
        want = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
        assert tok.encode(text, bos=False, special=special) == want, (text, special)
        assert tok.decode_tokens(want).encode("utf-8") == llm.detokenize(want), text


ROUNDTRIP = [c["text"] for c in CASES
             if not c["special"] and not any(b in c["text"] for b in NO_TOKEN_BYTES)]


@pytest.mark.parametrize("text", ROUNDTRIP, ids=[f"{i}" for i in range(len(ROUNDTRIP))])
def test_decode_round_trip(tok, text):
    ids = tok.encode(text, special=False)
    assert b"".join(tok.piece(t) for t in ids) == text.encode("utf-8")
    assert tok.decode_tokens(ids) == text
    dec = StreamDecoder(tok)
    assert "".join(dec.feed(t) for t in ids) + dec.flush() == text


def test_bytes_without_token_are_dropped(tok):
    # llama.cpp drops them and nothing merges across them ("a\x04b" is not "ab")
    assert tok.decode_tokens(tok.encode("a\x04b \x04 c")) == "ab  c"
    assert tok.encode("a\x04b") == tok.encode("a") + tok.encode("b")


def test_smollm2_special_tokens(tok, smollm2_md):
    assert (tok.vocab_size, tok.bos_id, tok.eos_id, tok.add_bos) == (49152, 1, 2, False)
    assert tok.stop_ids == (2, 0)  # <|im_end|> (EOS), <|endoftext|>
    assert tok.chat_template == smollm2_md["tokenizer.chat_template"]
    assert tok.encode("<|im_start|>") == [1]
    assert len(tok.encode("<|im_start|>", special=False)) > 1
    assert tok.encode("Hi", bos=True, eos=True) == [1, *tok.encode("Hi"), 2]
    assert tok.encode("Hi") == tok.encode("Hi", bos=None) == tok.encode("Hi", bos=False)
    assert tok.piece(1) == b"<|im_start|>" and tok.decode(5, 1) == b""  # control: not printed
    assert tok.decode_tokens([1, *tok.encode("user"), 2]) == "user"
    with pytest.raises(ValueError, match="out of range"):
        tok.piece(49152)


def test_chat_prompt_encodes_as_llama_cpp(tok):
    prompt = render_chat(tok.chat_template, [{"role": "user", "content": "What is 2+2?"}])
    want = next(c["ids"] for c in CASES if c["text"] == prompt and c["special"])
    assert tok.encode(prompt) == want


def test_tokenizer_json_path(smollm2_md):
    """A tokenizer.json equivalent to SmolLM2's (HF's own Digits+ByteLevel pre-tokenizer)
    runs through the `tokenizers` library and gives llama.cpp's ids too."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    texts, types = smollm2_md["tokenizer.ggml.tokens"], smollm2_md["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ", 1)) for m in smollm2_md["tokenizer.ggml.merges"]]
    hf = Tokenizer(models.BPE({t: i for i, t in enumerate(texts)}, merges))
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(texts, types, strict=True) if ty == 3])
    md = {"tokenizer.huggingface.json": hf.to_str(), "tokenizer.ggml.bos_token_id": 1,
          "tokenizer.ggml.eos_token_id": 2, "tokenizer.chat_template": "{{ x }}"}
    t = load_tokenizer(md, "folder/tokenizer.json")
    assert (t.vocab_size, t.bos_id, t.eos_id, t.stop_ids, t.add_bos) == (49152, 1, 2, (2, 0),
                                                                         False)
    assert t.chat_template == "{{ x }}"
    for c in CASES:
        if not any(b in c["text"] for b in NO_TOKEN_BYTES):
            assert t.encode(c["text"], special=c["special"]) == c["ids"], c["text"]
    ids = t.encode("<|im_start|>héllo 😀", bos=True)
    assert ids[:2] == [1, 1] and t.decode_tokens(ids) == "héllo 😀"
    with pytest.raises(ModelFormatError, match="^x.json: bad tokenizer.json"):
        load_tokenizer({"tokenizer.huggingface.json": "{not json"}, "x.json")


# -- byte-level BPE pre-tokenizers on a tiny vocab -------------------------------------------

def _tiny_gpt2(pre: str):
    texts = [*_B2U.values(), "34", "12", "123", "ab", "abc", "<|end|>"]
    types = [1] * (len(texts) - 1) + [3]
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": texts,
          "tokenizer.ggml.token_type": types,
          "tokenizer.ggml.merges": ["3 4", "1 2", "12 3", "a b"],
          "tokenizer.ggml.pre": pre, "tokenizer.ggml.eos_token_id": len(texts) - 1}
    tok = load_tokenizer(md, "tiny.gguf")
    ids = {t: i for i, t in enumerate(texts)}
    return tok, ids


@pytest.mark.parametrize("pre, want", [
    ("gpt-2", ["12", "34"]),     # one word: merge "3 4" (rank 0) first
    ("smollm", ["1", "2", "3", "4"]),  # digits split one by one
    ("llama-bpe", ["123", "4"]),  # \p{N}{1,3}
    ("default", ["123", "4"]),    # llama.cpp's default: [0-9][0-9][0-9] isolated last
])
def test_pre_tokenizers(pre, want):
    tok, ids = _tiny_gpt2(pre)
    assert tok.encode("1234") == [ids[w] for w in want]
    assert tok.decode_tokens(tok.encode("1234 x<|end|>")) == "1234 x"
    assert tok.stop_ids == (ids["<|end|>"],)
    # llama.cpp's llama3 pre-tokenizer ignores merges when the whole word is a token
    abc = [ids["abc"]] if pre == "llama-bpe" else [ids["ab"], ids["c"]]
    assert tok.encode("abc") == abc


def test_spm_unknown_fallback():
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<unk>", "▁", "a"],
          "tokenizer.ggml.scores": [0.0, -1.0, -1.0], "tokenizer.ggml.token_type": [2, 1, 1]}
    assert load_tokenizer(md, "u.gguf").encode("a zé", bos=False) == [1, 2, 1, 0, 0, 0]
    md["tokenizer.ggml.token_type"] = [1, 1, 1]
    with pytest.raises(ModelFormatError, match=r"^v.gguf: no byte token <0x7A> and no unknown"):
        load_tokenizer(md, "v.gguf").encode("z")


# -- SentencePiece ("llama") vocabularies -----------------------------------------------------

def _tiny_spm(add_space_prefix=True):
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    pieces += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
    pieces += [("▁", -1.0, 1), ("a", -2.0, 1), ("b", -2.0, 1), ("c", -2.0, 1), ("ab", -1.5, 1),
               ("bc", -0.5, 1), ("▁a", -3.0, 1), ("abc", -0.1, 1), ("é", -2.0, 1),
               ("<sep>", 0.0, 4)]
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": [p[0] for p in pieces],
          "tokenizer.ggml.scores": [p[1] for p in pieces],
          "tokenizer.ggml.token_type": [p[2] for p in pieces],
          "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
          "tokenizer.ggml.unknown_token_id": 0,
          "tokenizer.ggml.add_space_prefix": add_space_prefix}
    return load_tokenizer(md, "spm.gguf"), {p[0]: i for i, p in enumerate(pieces)}


def test_spm_merges_by_score():
    tok, v = _tiny_spm()
    assert tok.add_bos and tok.stop_ids == (2,)
    # "▁abc": pairs ▁a(-3) ab(-1.5) bc(-0.5): bc first, then a+bc = abc (-0.1), then ▁+abc no
    assert tok.encode("abc", bos=False) == [v["▁"], v["abc"]]
    # "▁ab": ab (-1.5) beats ▁a (-3.0)
    assert tok.encode("ab") == [1, v["▁"], v["ab"]]
    # ties go to the leftmost pair: "aa" has no merge; "ca" none; byte fallback for "z" and "ü"
    assert tok.encode("ca zü", bos=False) == [v["▁"], v["c"], v["a"], v["▁"], 3 + ord("z"),
                                              3 + 0xC3, 3 + 0xBC]
    assert tok.encode("é", bos=False) == [v["▁"], v["é"]]


def test_spm_special_fragments_and_decode():
    tok, v = _tiny_spm()
    # the dummy prefix goes on the first fragment and on fragments after a special token
    ids = tok.encode("ab<sep>ab</s>c", bos=True)
    assert ids == [1, v["▁"], v["ab"], v["<sep>"], v["▁"], v["ab"], 2, v["▁"], v["c"]]
    # special=False: control tokens are text, user-defined ones are still parsed (llama.cpp)
    plain = tok.encode("</s><sep>", bos=False, special=False)
    assert 2 not in plain and v["<sep>"] in plain
    assert tok.decode_tokens(tok.encode("ab c zü é")) == "ab c zü é"
    assert tok.decode(1, v["▁a"]) == b"a" and tok.decode(v["a"], v["▁a"]) == b" a"
    no_prefix, w = _tiny_spm(add_space_prefix=False)
    assert no_prefix.encode("ab", bos=False) == [w["ab"]]
    assert no_prefix.decode_tokens(no_prefix.encode("ab c")) == "ab c"


def _tok512_as_gguf_llama(stories):
    """llama2.c's tok512 and the same vocabulary as GGUF "llama" tokenizer metadata."""
    ref = Llama2cTokenizer.load(stories / "tok512.bin", 512)
    texts, types = [], []
    for i in range(512):
        p = ref.piece(i).decode("utf-8")
        texts.append(p.replace(" ", "▁"))
        types.append(2 if i == 0 else 3 if i in (1, 2) else 6 if p.startswith("<0x") else 1)
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": texts,
          "tokenizer.ggml.scores": [ref.score(i) for i in range(512)],
          "tokenizer.ggml.token_type": types, "tokenizer.ggml.bos_token_id": 1,
          "tokenizer.ggml.eos_token_id": 2}
    return ref, md


def test_spm_equals_run_c_on_tok512(stories):
    """stories260K's tok512 as a GGUF "llama" vocabulary encodes as llama2.c's run.c."""
    ref, md = _tok512_as_gguf_llama(stories)
    tok = load_tokenizer(md, "tok512.gguf")
    for text in ["Once upon a time", "Lily and Tom went to the park. They saw a big dog!",
                 "  two spaces\nand a newline\ttab", "émoji 😀 and 中文", "a", "x" * 40,
                 "\"Hi,\" she said; 'bye'."]:
        ids = ref.encode(text, bos=True)
        assert tok.encode(text) == ids, text
        assert tok.decode_tokens(ids) == ref.decode_tokens(ids) == text


# -- bad metadata ---------------------------------------------------------------------------

def _gpt2_md(**over):
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"],
          "tokenizer.ggml.merges": ["a b"], "tokenizer.ggml.pre": "gpt-2"}
    md.update(over)
    return {k: v for k, v in md.items() if v is not None}


@pytest.mark.parametrize("md, reason", [
    ({}, "missing tokenizer metadata 'tokenizer.ggml.model'"),
    (_gpt2_md(**{"tokenizer.ggml.tokens": None}), "missing tokenizer metadata "
                                                   "'tokenizer.ggml.tokens'"),
    (_gpt2_md(**{"tokenizer.ggml.merges": None}), "missing tokenizer metadata "
                                                   "'tokenizer.ggml.merges'"),
    (_gpt2_md(**{"tokenizer.ggml.model": "bert"}), "unsupported tokenizer.ggml.model 'bert'"),
    (_gpt2_md(**{"tokenizer.ggml.pre": "gpt2"}),
     r"unsupported tokenizer.ggml.pre 'gpt2' \(supported: codeshell, default, falcon3, gpt-2, "),
    (_gpt2_md(**{"tokenizer.ggml.token_type": [1, 1]}), "tokenizer.ggml.token_type has 2 entries"),
    (_gpt2_md(**{"tokenizer.ggml.bos_token_id": 3}),
     r"tokenizer.ggml.bos_token_id = 3 is not a token id"),
    (_gpt2_md(**{"tokenizer.ggml.merges": ["ab"]}), r"tokenizer.ggml.merges\[0\] is not 'a b'"),
    (_gpt2_md(**{"tokenizer.ggml.tokens": []}), "tokenizer.ggml.tokens is empty"),
    (_gpt2_md(**{"tokenizer.ggml.tokens": ["a", 3]}),
     "tokenizer.ggml.tokens must be a list of str"),
    (_gpt2_md(**{"tokenizer.ggml.merges": "a b"}), "tokenizer.ggml.merges must be a list of str"),
    (_gpt2_md(**{"tokenizer.ggml.token_type": [1, 1.5, 1]}),
     "tokenizer.ggml.token_type must be a list of int"),
    (_gpt2_md(**{"tokenizer.ggml.pre": ["x"]}), "tokenizer.ggml.pre is not a string"),
    (_gpt2_md(**{"tokenizer.chat_template": 5}), "tokenizer.chat_template is not a string"),
    ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"]},
     "missing tokenizer metadata 'tokenizer.ggml.scores'"),
    ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"],
      "tokenizer.ggml.scores": [0.0, 1.0]}, "tokenizer.ggml.scores has 2 entries"),
    ({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a"],
      "tokenizer.ggml.scores": ["x"]}, "tokenizer.ggml.scores must be a list of int/float"),
])
def test_bad_metadata(md, reason):
    with pytest.raises(ModelFormatError, match=r"^model\.gguf: " + reason):
        load_tokenizer(md, "model.gguf")


def test_bad_arguments():
    tok = load_tokenizer(_gpt2_md(), "m.gguf")
    assert tok.encode("ab") == [2] and tok.stop_ids == ()
    with pytest.raises(ValueError, match="no BOS token"):
        tok.encode("ab", bos=True)
    with pytest.raises(ValueError, match="needs a str"):
        tok.encode(b"ab")


def test_tokenizer_json_sentencepiece_style():
    """A Llama-2-style tokenizer.json (Prepend/Replace normalizer, byte fallback): BOS from the
    post-processor, pieces and decoding agree with the `tokenizers` library's own decoder."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab |= {f"<0x{b:02X}>": 3 + b for b in range(256)}
    for t in ("▁", "a", "b", "ab", "▁ab", "é"):
        vocab[t] = len(vocab)
    hf = Tokenizer(models.BPE(vocab, [("a", "b"), ("▁", "ab")], unk_token="<unk>",
                              byte_fallback=True, fuse_unk=True))
    hf.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                          normalizers.Replace(" ", "▁")])
    hf.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                    decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    hf.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    hf.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t in ("<unk>", "<s>", "</s>")])
    tok = load_tokenizer({"tokenizer.huggingface.json": hf.to_str(),
                          "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2},
                         "llama/tokenizer.json")
    assert tok.add_bos and tok.stop_ids == (2,)
    text = "ab ab zé ü"
    ids = tok.encode(text)
    assert ids[:3] == [1, vocab["▁ab"], vocab["▁ab"]] and 3 + ord("z") in ids
    assert ids == hf.encode(text).ids  # the library adds <s> through its post-processor
    assert tok.decode_tokens(ids) == hf.decode(ids) == text
    assert tok.encode("</s>", bos=False) == [2]
    assert 2 not in tok.encode("</s>", bos=False, special=False)


# -- other vocabularies against live llama.cpp (vocab-only GGUF files written here) ----------

def write_vocab_gguf(path: Path, md: dict) -> Path:
    """A GGUF with a tiny llama header, the tokenizer keys of `md` and no tensors: enough for
    llama.cpp's vocab_only loading."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    for add, v in ((w.add_context_length, 64), (w.add_embedding_length, 8),
                   (w.add_block_count, 1), (w.add_feed_forward_length, 16),
                   (w.add_head_count, 1), (w.add_head_count_kv, 1),
                   (w.add_layer_norm_rms_eps, 1e-5)):
        add(v)
    w.add_tokenizer_model(md["tokenizer.ggml.model"])
    w.add_token_list(md["tokenizer.ggml.tokens"])
    w.add_token_types(md["tokenizer.ggml.token_type"])
    optional = {"tokenizer.ggml.pre": w.add_tokenizer_pre,
                "tokenizer.ggml.merges": w.add_token_merges,
                "tokenizer.ggml.scores": w.add_token_scores,
                "tokenizer.ggml.bos_token_id": w.add_bos_token_id,
                "tokenizer.ggml.eos_token_id": w.add_eos_token_id,
                "tokenizer.ggml.add_space_prefix": w.add_add_space_prefix}
    for key, add in optional.items():
        if key in md:
            add(md[key])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _compare_live(md: dict, path: Path, texts: list[str], add_bos: bool = False) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(write_vocab_gguf(path, md)), vocab_only=True, verbose=False)
    tok = load_tokenizer(md, path.name)
    for i, text in enumerate(texts):
        special = i % 2 == 0
        want = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=special)
        assert tok.encode(text, bos=add_bos, special=special) == want, (text, special)
        assert tok.decode_tokens(want).encode("utf-8") == llm.detokenize(want), text


@pytest.mark.parametrize("pre", ["default", "gpt-2", "llama-bpe", "qwen2"])
def test_pre_tokenizers_match_live_llama_cpp(smollm2_md, tmp_path, pre):
    """SmolLM2's vocabulary under other llama.cpp pre-tokenizers."""
    pytest.importorskip("llama_cpp")
    md = {**smollm2_md, "tokenizer.ggml.pre": pre}
    texts = [c["text"] for c in CASES] + _fuzz_texts(150, seed=len(pre))
    texts += ["I'M here, YOU'RE there 'S 'Ll", "x 12345678 y1.5e10", "a\n\n  b\r\n\tc  ", "",
              "$+<=>^~|`!? ...", "abc123def 4567 89"]
    _compare_live(md, tmp_path / f"{pre}.gguf", texts)


def test_spm_matches_live_llama_cpp(stories, tmp_path):
    """stories260K's tok512 as a SentencePiece GGUF vocabulary, against llama.cpp."""
    pytest.importorskip("llama_cpp")
    ref, md = _tok512_as_gguf_llama(stories)
    corpus = [c["text"] for c in CASES] + _fuzz_texts(150, seed=7)
    corpus += ["<s>Once</s> upon<unk>a time", " <s> spaced </s> ", "x<s>"]
    _compare_live(md, tmp_path / "tok512.gguf", corpus, add_bos=True)
    _compare_live({**md, "tokenizer.ggml.add_space_prefix": False}, tmp_path / "np.gguf",
                  corpus[:40])


def test_spm_pieces_fast_path_keeps_every_kind():
    """The pieces are built in one pass over the joined texts; a NUL in a token text, byte
    tokens and control tokens still give what _spm_piece_bytes / the raw text give."""
    texts = ["<unk>", "\u2581a", "x\x00\u2581y", "<0x41>", "<s>", "<0xZZ>"]
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": texts,
          "tokenizer.ggml.scores": [0.0] * 6, "tokenizer.ggml.token_type": [2, 1, 1, 6, 3, 1]}
    tok = load_tokenizer(md, "nul.gguf")
    assert [tok.piece(i) for i in range(6)] == [b"<unk>", b" a", b"x\x00 y", b"A", b"<s>",
                                                b"<0xZZ>"]
    md["tokenizer.ggml.tokens"] = texts[:2] + ["x \u2581y"] + texts[3:]
    assert load_tokenizer(md, "nul.gguf").piece(2) == b"x  y"
