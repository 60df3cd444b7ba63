"""Gemma 3's tokenizer: SentencePiece in GGUF with add_space_prefix = false,
byte fallback, 262,144 tokens, built in well under a second. Needs the pulled GGUF
(`isaforge pull gemma3-270m`); only its metadata is read (tests/test_gemma3.py runs the model).

llama.cpp's ids: compared live when llama-cpp-python is importable, and against
tests/data/gemma3_tokenizer_ids.json once recorded with it:
    python scripts/record_tokenizer_ids.py ~/.cache/isaforge/models/gemma-3-270m-q4_k_m.gguf \\
        -o tests/data/gemma3_tokenizer_ids.json
"""

from __future__ import annotations

import json
import mmap
import time
from pathlib import Path

import pytest

from isaforge import pull
from isaforge.formats.gguf import parse_gguf
from isaforge.text.hf import SPMTokenizer, load_tokenizer

DATA = Path(__file__).parent / "data"
CORPUS = [c["text"] for c in json.loads((DATA / "smollm2_tokenizer_ids.json")
                                        .read_text(encoding="utf-8"))["cases"]]
RECORDED = DATA / "gemma3_tokenizer_ids.json"


@pytest.fixture(scope="module")
def gemma_path() -> Path:
    path = pull.model_path("gemma3-270m")
    if not path.is_file():
        pytest.skip(f"Gemma 3 not in the cache ({path}); run `isaforge pull gemma3-270m`")
    return path


def _load(path: Path):
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        md = parse_gguf(path, mm).metadata
    return load_tokenizer(md, str(path)), md


@pytest.fixture(scope="module")
def gemma(gemma_path):
    return _load(gemma_path)[0]


def test_loads_fast_with_gemma_settings(gemma_path):
    t0 = time.process_time()  # CPU time: wall time on a shared machine is noisy
    tok, md = _load(gemma_path)
    assert time.process_time() - t0 < 1.5
    assert md["general.architecture"] == "gemma3" and md["tokenizer.ggml.model"] == "llama"
    assert md["tokenizer.ggml.add_space_prefix"] is False
    assert isinstance(tok, SPMTokenizer) and not tok.add_space_prefix
    assert tok.vocab_size == 262144 and (tok.bos_id, tok.eos_id) == (2, 1) and tok.add_bos
    assert tok.token_text(106) == "<end_of_turn>" and 106 in tok.stop_ids


def test_no_dummy_prefix(gemma):
    assert [gemma.token_text(i) for i in gemma.encode("Hello world", bos=False)] == [
        "Hello", "▁world"]
    assert gemma.token_text(gemma.encode(" Hello", bos=False)[0]) == "▁Hello"
    assert gemma.encode("Hello")[0] == 2  # BOS by default, no space added after it
    assert gemma.decode_tokens(gemma.encode(" Hello")) == " Hello"


def test_byte_fallback(gemma):
    ch = "\U000F0000"  # a supplementary private-use character: not a token, so its bytes
    assert ch not in gemma._lookup
    ids = gemma.encode(ch, bos=False)
    assert [gemma.token_text(i) for i in ids] == [f"<0x{b:02X}>" for b in ch.encode()]
    assert gemma.decode_tokens(ids) == ch


def test_special_and_user_defined_tokens(gemma):
    ids = gemma.encode("<start_of_turn>user\nhi<end_of_turn>", bos=False)
    assert ids[0] == 105 and ids[-1] == 106 and gemma.decode_tokens(ids) == "user\nhi"
    assert 105 not in gemma.encode("<start_of_turn>", bos=False, special=False)
    # "\n\n" is a user-defined token: split out before merging, even with special=False
    nn = gemma._lookup["\n\n"]
    assert gemma.encode("a\n\nb", bos=False, special=False) == [
        gemma._lookup["a"], nn, gemma._lookup["b"]]


def test_corpus_round_trips(gemma):
    """Byte fallback covers every byte: SmolLM2's corpus decodes back to itself."""
    for text in CORPUS:
        assert gemma.decode_tokens(gemma.encode(text, bos=False, special=False)) == text, text


def test_matches_recorded_llama_cpp(gemma):
    if not RECORDED.is_file():
        pytest.skip(f"{RECORDED.name} not recorded yet (needs llama-cpp-python; see the "
                    "module docstring)")
    for c in json.loads(RECORDED.read_text(encoding="utf-8"))["cases"]:
        assert gemma.encode(c["text"], bos=False, special=c["special"]) == c["ids"], c["text"]


def test_matches_live_llama_cpp(gemma, gemma_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(gemma_path), vocab_only=True, verbose=False)
    for text in CORPUS:
        for special in (False, True):
            want = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
            assert gemma.encode(text, bos=False, special=special) == want, (text, special)
