"""Tests for the llama2.c tokenizer: run.c's encode/decode reproduced byte for byte."""

from __future__ import annotations

import ctypes
import ctypes.util
import random
import struct
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from isaforge.text.llama2c import (
    Llama2cTokenizer,
    _scan_byte,
    safe_piece,
    split_codepoints,
)
from isaforge.text.stream import StreamDecoder
from isaforge.types import ModelFormatError

TOK512 = Path(__file__).resolve().parents[2] / "shared" / "models" / "stories260K" / "tok512.bin"
BASE: list[tuple[bytes, float]] = [(b"<unk>", 0.0), (b"\n<s>\n", 0.0), (b"\n</s>\n", 0.0)]
BASE += [(b"<0x%02X>" % b, 0.0) for b in range(256)]  # ids 3..258, as llama2.c exports them


def write_tok(path: Path, entries: Sequence[tuple[bytes, float]], mtl: int | None = None) -> Path:
    mtl = max(len(p) for p, _ in entries) if mtl is None else mtl
    blob = struct.pack("<i", mtl)
    for p, s in entries:
        blob += struct.pack("<fi", s, len(p)) + p
    path.write_bytes(blob)
    return path


class Vocab:
    """A synthetic tokenizer: BASE + `extra`, with ``v[b"ab"]`` giving the (lowest) id."""

    def __init__(self, tmp_path: Path, extra: Sequence[tuple[bytes, float]]) -> None:
        entries = BASE + list(extra)
        self.tok = Llama2cTokenizer.load(write_tok(tmp_path / "tok.bin", entries), len(entries))
        self.ids: dict[bytes, int] = {}
        for i, (p, _) in enumerate(entries):
            self.ids.setdefault(p, i)

    def __getitem__(self, piece: bytes) -> int:
        return self.ids[piece]


def ref_encode(tok: Llama2cTokenizer, text: bytes, bos: bool = True, eos: bool = False):
    """Slow, literal transcription of run.c's encode (C strings, str_len loop, rescan)."""
    cp = [tok.piece(i).split(b"\0")[0] for i in range(tok.vocab_size)]
    sc = [np.float32(tok.score(i)) for i in range(tok.vocab_size)]
    table = {c: i for i, c in reversed(list(enumerate(cp)))}  # lowest id on duplicates
    text = text.split(b"\0")[0]
    out = [1] if bos else []
    if text:
        out.append(table[b" "])
    buf = b""
    for k, c in enumerate(text):
        if c & 0xC0 != 0x80:
            buf = b""
        buf += bytes([c])
        nxt = text[k + 1] if k + 1 < len(text) else 0
        if nxt & 0xC0 == 0x80 and len(buf) < 4:
            continue
        out += [table[buf]] if buf in table else [b + 3 for b in buf]
        buf = b""
    while True:
        best, best_id, best_idx = np.float32(-1e10), -1, -1
        for i in range(len(out) - 1):
            j = table.get(cp[out[i]] + cp[out[i + 1]], -1)
            if j != -1 and sc[j] > best:
                best, best_id, best_idx = sc[j], j, i
        if best_idx == -1:
            break
        out[best_idx : best_idx + 2] = [best_id]
    return [*out, 2] if eos else out


def runc_print(tok: Llama2cTokenizer, tokens: Sequence[int]) -> bytes:
    """What run.c prints for a token sequence: safe_printf(decode(prev, next)) per step."""
    return b"".join(safe_piece(tok.decode(a, b)) for a, b in pairwise(tokens))


@pytest.fixture(scope="module")
def tok512() -> Llama2cTokenizer:
    if not TOK512.exists():
        pytest.skip(f"stories260K tokenizer not found at {TOK512}")
    return Llama2cTokenizer.load(TOK512, 512)


# -- stories260K tok512.bin -------------------------------------------------------------------


def test_tok512_properties(tok512: Llama2cTokenizer) -> None:
    assert (tok512.vocab_size, tok512.bos_id, tok512.eos_id, tok512.max_token_length) == (
        512,
        1,
        2,
        7,
    )
    assert tok512.piece(1) == b"\n<s>\n" and tok512.piece(3) == b"<0x00>"
    assert tok512.piece(403) == b" Once" and tok512.score(403) == -144.0


def test_tok512_once_upon_a_time(tok512: Llama2cTokenizer) -> None:
    # Hand trace: [BOS, " ", O, n, c, e, " ", u, p, o, n, " ", a, " ", t, i, m, e] merges
    # " t"(-0) " a"(-2) im(-29) on(-30) " u"(-59) " O"(-60) " On"(-62) ce(-72) " up"(-91)
    # ime(-110) " time"(-119) " Once"(-144) " upon"(-148).
    ids = tok512.encode("Once upon a time")
    assert ids == [1, 403, 407, 261, 378]
    assert [tok512.piece(i) for i in ids[1:]] == [b" Once", b" upon", b" a", b" time"]
    assert ids == ref_encode(tok512, b"Once upon a time")
    assert runc_print(tok512, ids) == b"Once upon a time"
    assert tok512.decode_tokens(ids) == "Once upon a time"
    assert tok512.encode("Once upon a time", bos=False, eos=True) == [403, 407, 261, 378, 2]


def test_tok512_matches_reference_and_roundtrips(tok512: Llama2cTokenizer) -> None:
    rng = random.Random(0)
    alphabet = [*"abcdefghijklmnopqrstuvwxyz  ..,!'\"TLOS\n\t", "é", "中", "😀", "\u2019", "ñ"]
    for _ in range(150):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        ids = tok512.encode(text)
        assert ids == ref_encode(tok512, text.encode())
        assert tok512.decode_tokens(ids) == text
    for _ in range(50):  # arbitrary bytes, including invalid UTF-8 and NULs
        raw = bytes(
            rng.choice([0, 0x41, 0x20, 0x80, 0xBF, 0xC3, 0xE4, 0xF0, 0xFF]) for _ in range(20)
        )
        assert tok512.encode(raw, eos=True) == ref_encode(tok512, raw, eos=True)


def test_tok512_long_text_is_fast(tok512: Llama2cTokenizer) -> None:
    text = "Once upon a time, there was a little girl named Lily. " * 200
    ids = tok512.encode(text)
    assert ids[:5] == [1, 403, 407, 261, 378] and tok512.decode_tokens(ids) == text


def test_tok512_truncated(tok512: Llama2cTokenizer, tmp_path: Path) -> None:
    data = TOK512.read_bytes()
    cuts = {0, 1, 3, 4, 5, 11, 12, 13, 22, len(data) - 1}
    cuts |= set(np.linspace(0, len(data) - 1, 50).astype(int).tolist())
    assert len(cuts) >= 50
    for cut in sorted(cuts):
        path = write_bytes(tmp_path / f"cut{cut}.bin", data[:cut])
        with pytest.raises(ModelFormatError, match=f"cut{cut}.bin"):
            Llama2cTokenizer.load(path, 512)


def test_tok512_trailing_bytes_ignored(tok512: Llama2cTokenizer) -> None:
    small = Llama2cTokenizer.load(TOK512, 300)  # run.c reads only vocab_size records
    assert small.vocab_size == 300 and small.piece(299) == tok512.piece(299)


# -- load validation -------------------------------------------------------------------------


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def rec(piece: bytes, score: float = 0.0, n: int | None = None) -> bytes:
    return struct.pack("<fi", score, len(piece) if n is None else n) + piece


GOOD3 = rec(b"<unk>") + rec(b"<s>") + rec(b"</s>")


@pytest.mark.parametrize(
    ("blob", "vocab_size", "reason"),
    [
        (b"", 3, "too short"),
        (b"\x07\x00", 3, "too short"),
        (struct.pack("<i", -1) + GOOD3, 3, "absurd max_token_length -1"),
        (struct.pack("<i", 1 << 30) + GOOD3, 3, "absurd max_token_length"),
        (struct.pack("<i", 8) + GOOD3 + rec(b"x", n=-5), 4, "token 3: negative length -5"),
        (struct.pack("<i", 4) + rec(b"<unk>"), 3, "token 0: length 5 exceeds max_token_length 4"),
        (struct.pack("<i", 30) + GOOD3 + rec(b"ab", n=30), 4, "token 3: length 30 .*past end"),
        (struct.pack("<i", 8) + GOOD3 + rec(b"ab")[:6], 4, "token 3: truncated record header"),
        (struct.pack("<i", 8) + GOOD3, 5, "token 3: truncated record header"),
        (struct.pack("<i", 8) + GOOD3, 2, "vocab_size must be an int >= 3"),
        (struct.pack("<i", 8) + GOOD3 + rec(b"x", n=2**31 - 1), 4, "token 3: length"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_load_rejects_malformed(tmp_path: Path, blob: bytes, vocab_size: int, reason: str) -> None:
    path = write_bytes(tmp_path / "bad_tok.bin", blob)
    with pytest.raises(ModelFormatError, match=reason) as exc:
        Llama2cTokenizer.load(path, vocab_size)
    assert str(path) in str(exc.value)


def test_load_huge_vocab_size_fails_fast(tmp_path: Path) -> None:
    path = write_bytes(tmp_path / "t.bin", struct.pack("<i", 8) + GOOD3)
    with pytest.raises(ModelFormatError, match="token 3"):
        Llama2cTokenizer.load(path, 2**31 - 1)


# -- encode on synthetic vocabularies --------------------------------------------------------

ABC = [(b" ", -100.0), (b"a", -100.0), (b"b", -100.0), (b"c", -100.0)]


def test_merge_order_follows_scores(tmp_path: Path) -> None:
    v = Vocab(tmp_path, [*ABC, (b"ab", 1.0), (b"bc", 2.0)])
    assert v.tok.encode("abc") == [1, v[b" "], v[b"a"], v[b"bc"]]
    v = Vocab(tmp_path, [*ABC, (b"ab", 2.0), (b"bc", 1.0)])
    assert v.tok.encode("abc") == [1, v[b" "], v[b"ab"], v[b"c"]]
    # chained: bc first, then a+bc -> abc, then " "+abc -> " abc"
    v = Vocab(tmp_path, [*ABC, (b"ab", 1.0), (b"bc", 2.0), (b"abc", 0.5), (b" abc", -5.0)])
    assert v.tok.encode("abc") == [1, v[b" abc"]]


def test_ties_first_pair_wins(tmp_path: Path) -> None:
    v = Vocab(tmp_path, [*ABC, (b"bc", 1.0), (b"ab", 1.0)])
    assert v.tok.encode("abc") == [1, v[b" "], v[b"ab"], v[b"c"]]
    assert v.tok.encode("cabc") == [1, v[b" "], v[b"c"], v[b"ab"], v[b"c"]]
    assert v.tok.encode("bcab") == [1, v[b" "], v[b"bc"], v[b"ab"]]


def test_scores_compare_as_float32() -> None:
    pieces = [b"<unk>", b"<s>", b"</s>", b" ", b"a", b"b", b"c", b"ab", b"bc"]
    scores = [0.0] * 7 + [1.0, 1.0 + 1e-9]  # equal once rounded to float32 -> tie
    tok = Llama2cTokenizer(pieces, scores, 2)
    assert tok.score(8) == 1.0 and tok.encode("abc", bos=False) == [3, 7, 6]


def test_start_score_and_nan(tmp_path: Path) -> None:
    nan = float("nan")
    v = Vocab(tmp_path, [*ABC, (b"ab", -1e10), (b"bc", nan), (b" a", -9.9e9)])
    assert v.tok.encode("abc") == [1, v[b" a"], v[b"b"], v[b"c"]]
    v = Vocab(tmp_path, [*ABC, (b"ab", float("-inf")), (b"bc", float("inf"))])
    assert v.tok.encode("abc") == [1, v[b" "], v[b"a"], v[b"bc"]]


def test_byte_fallback(tmp_path: Path) -> None:
    v = Vocab(tmp_path, ABC)
    assert v.tok.encode("az") == [1, v[b" "], v[b"a"], ord("z") + 3]
    assert v.tok.encode("a\n") == [1, v[b" "], v[b"a"], 10 + 3]


def test_bos_takes_part_in_merges(tmp_path: Path) -> None:
    v = Vocab(tmp_path, [*ABC, (b"\n<s>\n ", 5.0)])  # run.c concatenates vocab[1] too
    assert v.tok.encode("a") == [v[b"\n<s>\n "], v[b"a"]]
    assert v.tok.encode("a", bos=False) == [v[b" "], v[b"a"]]


def test_utf8_groups(tmp_path: Path) -> None:
    extra = [*ABC, ("é".encode(), -1.0), ("😺".encode(), -1.0)]
    extra += [(b"\xc3\x80\x80\x80", -1.0), (b"\x80\x80\x80\x80", -1.0)]
    v = Vocab(tmp_path, extra)
    sp = v[b" "]
    assert v.tok.encode("é") == [1, sp, v["é".encode()]]
    assert v.tok.encode("中") == [1, sp, 0xE4 + 3, 0xB8 + 3, 0xAD + 3]
    assert v.tok.encode("😀") == [1, sp, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3]
    assert v.tok.encode("a😺b") == [1, sp, v[b"a"], v["😺".encode()], v[b"b"]]
    # too many continuation bytes: groups of at most 4, then the stray rest regroups
    assert v.tok.encode(b"\xc3\x80\x80\x80\x80\x80") == [1, sp, v[b"\xc3\x80\x80\x80"], 0x83, 0x83]
    assert v.tok.encode(b"\x80" * 5) == [1, sp, v[b"\x80\x80\x80\x80"], 0x83]
    assert v.tok.encode(b"\xe4a") == [1, sp, 0xE4 + 3, v[b"a"]]  # lead byte, then ASCII
    assert split_codepoints(b"\xf0\x9f\x98\x80\x80x") == [b"\xf0\x9f\x98\x80", b"\x80", b"x"]


def test_empty_eos_and_nul_in_text(tmp_path: Path) -> None:
    v = Vocab(tmp_path, ABC)
    assert v.tok.encode("") == [1]  # no dummy prefix
    assert v.tok.encode("", bos=False) == []
    assert v.tok.encode("", eos=True) == [1, 2]
    assert v.tok.encode("ab", eos=True) == [1, v[b" "], v[b"a"], v[b"b"], 2]
    assert v.tok.encode("a\x00b") == v.tok.encode("a")  # C string ends at NUL
    assert v.tok.encode(b"\x00abc") == [1]


def test_vocab_nul_entry_acts_truncated(tmp_path: Path) -> None:
    v = Vocab(tmp_path, [*ABC, (b"ab\x00zz", 1.0), (b"abc", 2.0)])
    assert v.tok.encode("ab") == [1, v[b" "], v[b"ab\x00zz"]]
    assert v.tok.encode("abc") == [1, v[b" "], v[b"abc"]]  # "ab" + "c" concatenated as C
    assert v.tok.piece(v[b"ab\x00zz"]) == b"ab\x00zz"
    assert v.tok.decode(7, v[b"ab\x00zz"]) == b"ab"


def test_duplicates_resolve_to_lowest_id(tmp_path: Path) -> None:
    v = Vocab(tmp_path, [*ABC, (b"ab", 1.0), (b"ab", 5.0)])
    assert v.tok.encode("ab") == [1, v[b" "], v[b"ab"]] and v[b"ab"] == 263
    # the lowest id's score decides: -2e10 never merges even though the twin scores 5.0
    v = Vocab(tmp_path, [*ABC, (b"ab", -2e10), (b"ab", 5.0)])
    assert v.tok.encode("ab") == [1, v[b" "], v[b"a"], v[b"b"]]


def test_missing_dummy_prefix_or_byte_tokens() -> None:
    tok = Llama2cTokenizer([b"<unk>", b"<s>", b"</s>", b"a"], [0.0] * 4, 5)
    assert tok.encode("") == [1]
    with pytest.raises(ModelFormatError, match="' '"):
        tok.encode("a")
    tok = Llama2cTokenizer([b"<unk>", b"<s>", b"</s>", b" "], [0.0] * 4, 5)
    with pytest.raises(ModelFormatError, match="byte-fallback"):
        tok.encode("a")


def test_heap_merge_matches_reference_on_random_vocabs() -> None:
    rng = random.Random(1)
    special = [float("nan"), -1e10, float("-inf"), float("inf"), -9.9e9]
    for _ in range(40):
        pieces = [p for p, _ in BASE] + [b" ", b"a", b"b", b"\xc3\xa9"]
        for _ in range(rng.randint(5, 40)):
            pieces.append(bytes(rng.choice(b"ab \x00") for _ in range(rng.randint(0, 4))))
        scores = [rng.choice([*special, *range(-4, 4)]) for _ in pieces]
        tok = Llama2cTokenizer(pieces, scores, 8)
        for _ in range(10):
            text = bytes(rng.choice(b"ab \xc3\xa9") for _ in range(rng.randint(0, 24)))
            bos, eos = rng.random() < 0.8, rng.random() < 0.3
            assert tok.encode(text, bos, eos) == ref_encode(tok, text, bos, eos)


# -- decode ---------------------------------------------------------------------------------


def test_decode_rules(tmp_path: Path) -> None:
    v = Vocab(tmp_path, [*ABC, (b" a", 0.0), (b" <0x41>", 0.0)])
    tok = v.tok
    assert tok.decode(1, v[b" a"]) == b"a"  # leading space stripped after BOS
    assert tok.decode(7, v[b" a"]) == b" a"
    assert tok.decode(1, v[b" "]) == b""
    assert tok.decode(7, 0x0A + 3) == b"\n"  # <0x0A>
    assert tok.decode(1, 0x20 + 3) == b" "  # "<0x20>" has no leading space to strip
    assert tok.decode(7, 0x00 + 3) == b"\x00"
    assert tok.decode(1, v[b" <0x41>"]) == b"A" and tok.decode(7, v[b" <0x41>"]) == b" <0x41>"
    assert tok.decode(7, 1) == b"\n<s>\n"
    with pytest.raises(ValueError, match="out of range"):
        tok.decode(1, tok.vocab_size)


SCAN_CASES = {
    b"<0x41>": 0x41, b"<0x4>": 4, b"<0x4": 4, b"<0x41zz": 0x41, b"<0x 41>": 0x41,
    b"<0x\t\n4f": 0x4F, b"<0x-1>": 0xFF, b"<0x-F>": 0xF1, b"<0x+F>": 0xF, b"<0x0x>": 0,
    b"<0x0X5>": 0, b"<0x123>": 0x12, b"<0x -12": 0xFF, b"<0x+0x1": 0, b"<0xG1>": None,
    b"<0x>": None, b"<0X41>": None, b"<0x+>": None, b"<0x->": None, b"<0x": None,
    b" <0x41>": None, b"0x41": None,
}  # fmt: skip


@pytest.mark.parametrize(("piece", "expected"), SCAN_CASES.items())
def test_scan_byte_like_glibc_sscanf(piece: bytes, expected: int | None) -> None:
    assert _scan_byte(piece) == expected


def _glibc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "gnu_get_libc_version"):
        pytest.skip("glibc not available for the sscanf/isprint cross-check")
    return libc


def test_scan_byte_matches_libc_sscanf() -> None:
    libc, rng = _glibc(), random.Random(2)
    samples = list(SCAN_CASES)
    samples += [b"<0x" + bytes(rng.choice(b"0x+- \tfF9gX>") for _ in range(4)) for _ in range(800)]
    for piece in samples:
        val = ctypes.c_ubyte(0)
        ok = libc.sscanf(piece, b"<0x%02hhX>", ctypes.byref(val)) == 1
        assert _scan_byte(piece) == (val.value if ok else None), piece


def test_safe_piece() -> None:
    assert safe_piece(b"") == b""
    assert safe_piece(b"\x80") == b""  # lone non-ASCII byte dropped, as run.c does
    assert safe_piece(b"\x00") == b"" and safe_piece(b"\x7f") == b"" and safe_piece(b"\x1b") == b""
    assert safe_piece(b"\n") == b"\n" and safe_piece(b" ") == b" " and safe_piece(b"\t") == b"\t"
    assert safe_piece(b"a") == b"a" and safe_piece(b"\xc3\xa9") == b"\xc3\xa9"
    assert safe_piece(b"ab\x00cd") == b"ab" and safe_piece(b"\x80\x00xy") == b""


def test_safe_piece_matches_libc_ctype() -> None:
    libc = _glibc()
    for b in range(1, 256):
        keep = bool(libc.isprint(b)) or bool(libc.isspace(b))
        assert safe_piece(bytes([b])) == (bytes([b]) if keep else b""), b


# -- streaming ------------------------------------------------------------------------------


def test_stream_decoder_never_splits_characters(tmp_path: Path) -> None:
    v = Vocab(tmp_path, [*ABC, (b" a", 0.0)])
    text = "a中😀é b"
    ids = v.tok.encode(text, eos=True)
    assert ids[2:5] == [0xE4 + 3, 0xB8 + 3, 0xAD + 3]
    sd = StreamDecoder(v.tok)
    pieces = [sd.feed(t) for t in ids]
    assert pieces[:5] == ["", "a", "", "", "中"]
    tail = sd.flush()
    assert "".join(pieces) + tail == text == v.tok.decode_tokens(ids)
    assert all("\ufffd" not in p for p in pieces)
    assert list(StreamDecoder(v.tok).stream(ids)) == [p for p in pieces if p]


def test_stream_decoder_flushes_incomplete_and_keeps_raw_bytes(tmp_path: Path) -> None:
    v = Vocab(tmp_path, ABC)
    sd = StreamDecoder(v.tok, prev_token=v[b"a"])
    assert [sd.feed(0xE4 + 3), sd.feed(0xB8 + 3)] == ["", ""]  # safe_piece would drop these
    assert sd.flush() == "\ufffd"
    assert sd.feed(v[b"a"]) == "a" and sd.flush() == ""


def test_stream_matches_decode_tokens(tok512: Llama2cTokenizer) -> None:
    rng = random.Random(3)
    for _ in range(30):
        ids = [rng.randrange(512) for _ in range(30)]
        sd = StreamDecoder(tok512)
        pieces = [sd.feed(t) for t in ids] + [sd.flush()]
        assert "".join(pieces) == tok512.decode_tokens(ids)
