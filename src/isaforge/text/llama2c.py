"""The llama2.c tokenizer (``tokenizer.bin``), reproducing run.c's encode/decode byte for byte.

run.c keeps its vocab as C strings, so an entry with a NUL byte acts as if cut at the NUL in
every lookup, concatenation and print; this module mirrors that. Where run.c is undefined we
choose, and say so: duplicate strings resolve to the lowest id (run.c's qsort+bsearch may
return any of them); a missing " " dummy-prefix token or a byte-fallback id past the vocab
raises ModelFormatError instead of reading out of bounds.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..types import ModelFormatError, check_regular
from .merge import merge_by_score
from .stream import decode_tokens

BOS_ID = 1
EOS_ID = 2
_START_SCORE = -1e10  # run.c's initial best_score (exact in float32)
_C_SPACE = b" \t\n\v\f\r"  # isspace() in the C locale
_HEX = b"0123456789abcdefABCDEF"
_RECORD = struct.Struct("<fi")  # float32 score, int32 len


def _cstr(b: bytes) -> bytes:
    """The C-string view of `b`: everything before its first NUL."""
    i = b.find(0)
    return b if i < 0 else b[:i]


def _scan_byte(piece: bytes) -> int | None:
    """glibc ``sscanf(piece, "<0x%02hhX>", &v) == 1`` -> v, else None (piece is a C string).

    After the literal "<0x": optional whitespace, then a width-2 hex field that may hold a
    sign or a "0x" prefix, e.g. "<0x41>" -> 0x41, "<0x4>" -> 4, "<0x-1>" -> 0xFF.
    """
    if not piece.startswith(b"<0x"):
        return None
    i, n, width, neg, digits = 3, len(piece), 2, False, bytearray()
    while i < n and piece[i] in _C_SPACE:
        i += 1
    if i < n and piece[i] in b"+-":
        neg, i, width = piece[i] == 0x2D, i + 1, width - 1
    if width and i < n and piece[i] == 0x30:  # leading "0", maybe a "0x" prefix
        digits.append(0x30)
        i, width = i + 1, width - 1
        if width and i < n and piece[i] in b"xX":
            i, width = i + 1, width - 1
    while width and i < n and piece[i] in _HEX:
        digits.append(piece[i])
        i, width = i + 1, width - 1
    if not digits:
        return None
    v = int(digits, 16)
    return (-v if neg else v) & 0xFF


def safe_piece(piece: bytes) -> bytes:
    """What run.c's safe_printf prints: the piece up to its first NUL, or nothing if that is
    empty or a single byte that is neither isprint nor isspace in the C locale."""
    p = _cstr(piece)
    if len(p) == 1 and not (0x20 <= p[0] <= 0x7E or p[0] in _C_SPACE):
        return b""
    return p


def split_codepoints(raw: bytes) -> list[bytes]:
    """run.c's grouping: a byte plus the continuation bytes after it, at most 4 bytes."""
    out: list[bytes] = []
    i, n = 0, len(raw)
    while i < n:
        j = i + 1
        while j < n and raw[j] & 0xC0 == 0x80 and j - i < 4:
            j += 1
        out.append(raw[i:j])
        i = j
    return out


class Llama2cTokenizer:
    """llama2.c's sentencepiece-style BPE: byte-exact ``encode``/``decode`` of run.c."""

    bos_id = BOS_ID
    eos_id = EOS_ID
    stop_ids = (BOS_ID, EOS_ID)  # what ends a reply through the API (run.c's loop: BOS)
    add_bos = True
    chat_template = None

    def __init__(
        self,
        pieces: Sequence[bytes],
        scores: Sequence[float],
        max_token_length: int,
        name: str = "<tokenizer>",
    ) -> None:
        if len(pieces) != len(scores) or len(pieces) < 3:
            raise ModelFormatError(
                f"{name}: need matching pieces/scores with >= 3 entries (unk, bos, eos), "
                f"got {len(pieces)} pieces and {len(scores)} scores"
            )
        self.name = name
        self.max_token_length = max_token_length
        self._pieces = [bytes(p) for p in pieces]
        self._cpieces = [_cstr(p) for p in self._pieces]
        self._scores = list(array("f", scores))  # float32 values, compared as C does
        self._lookup: dict[bytes, int] = {}
        for i, c in enumerate(self._cpieces):
            self._lookup.setdefault(c, i)  # duplicates: lowest id wins

    @classmethod
    def load(cls, path: str | Path, vocab_size: int) -> Llama2cTokenizer:
        """Read a llama2.c tokenizer.bin: int32 max_token_length, then `vocab_size` records
        of (float32 score, int32 len, len bytes). Trailing bytes are ignored, as in run.c."""
        p = Path(path)
        check_regular(p)
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 3:
            raise ModelFormatError(f"{p}: vocab_size must be an int >= 3, got {vocab_size!r}")
        data = p.read_bytes()
        size = len(data)
        if size < 4:
            raise ModelFormatError(f"{p}: file too short for max_token_length ({size} bytes)")
        (mtl,) = struct.unpack_from("<i", data, 0)
        if mtl < 0 or mtl > size:
            raise ModelFormatError(f"{p}: absurd max_token_length {mtl} (file is {size} bytes)")
        pieces: list[bytes] = []
        scores: list[float] = []
        off = 4
        for i in range(vocab_size):
            if off + _RECORD.size > size:
                raise ModelFormatError(
                    f"{p}: token {i}: truncated record header at offset {off} "
                    f"(file is {size} bytes, vocab_size {vocab_size})"
                )
            score, n = _RECORD.unpack_from(data, off)
            off += _RECORD.size
            if n < 0:
                raise ModelFormatError(f"{p}: token {i}: negative length {n}")
            if n > mtl:
                raise ModelFormatError(f"{p}: token {i}: length {n} exceeds max_token_length {mtl}")
            if off + n > size:
                raise ModelFormatError(
                    f"{p}: token {i}: length {n} at offset {off} runs past end of file "
                    f"({size} bytes)"
                )
            pieces.append(data[off : off + n])
            scores.append(score)
            off += n
        return cls(pieces, scores, mtl, str(p))

    @property
    def vocab_size(self) -> int:
        return len(self._pieces)

    def piece(self, token: int) -> bytes:
        """The token's bytes exactly as stored in the file."""
        return self._pieces[self._check(token)]

    def score(self, token: int) -> float:
        """The token's merge score (a float32 value)."""
        return self._scores[self._check(token)]

    def _check(self, token: int) -> int:
        if not 0 <= token < len(self._pieces):
            raise ValueError(f"token id {token} out of range [0, {len(self._pieces)})")
        return token

    # -- encode ---------------------------------------------------------------------------

    def encode(self, text: str | bytes, bos: bool = True, eos: bool = False, *,
               special: bool = True) -> list[int]:
        """run.c's encode. `text` is a C string: it ends at its first NUL (str -> UTF-8).
        `special` is the tokenizers' common flag; a llama2.c vocab has no control texts."""
        raw = _cstr(text.encode("utf-8") if isinstance(text, str) else bytes(text))
        tokens = [BOS_ID] if bos else []
        if raw:
            prefix = self._lookup.get(b" ")
            if prefix is None:
                raise ModelFormatError(f"{self.name}: vocab has no ' ' token (dummy prefix)")
            tokens.append(prefix)
        for group in split_codepoints(raw):
            tid = self._lookup.get(group)
            if tid is not None:
                tokens.append(tid)
                continue
            for b in group:  # byte fallback: <0xXX> tokens start at id 3
                if b + 3 >= len(self._pieces):
                    raise ModelFormatError(
                        f"{self.name}: no byte-fallback token {b + 3} for byte 0x{b:02X}"
                    )
                tokens.append(b + 3)
        tokens = self._merge(tokens)
        if eos:
            tokens.append(EOS_ID)
        return tokens

    def _merge(self, tokens: list[int]) -> list[int]:
        """run.c's merge loop: best score, leftmost on ties, until none (a NaN or -1e10
        score never merges, as run.c's `score > best_score` test)."""
        cp, lookup, scores = self._cpieces, self._lookup, self._scores

        def pair(a: int, b: int) -> tuple[float, int] | None:
            mid = lookup.get(cp[a] + cp[b])
            return (scores[mid], mid) if mid is not None and scores[mid] > _START_SCORE else None

        return merge_by_score(tokens, pair)

    # -- decode ---------------------------------------------------------------------------

    def decode(self, prev_token: int, token: int) -> bytes:
        """run.c's decode: drop a leading space after BOS; "<0xXX>" pieces become that byte.

        Pieces are C strings (cut at a NUL); raw byte tokens keep their byte, even 0x00.
        Pass the result through `safe_piece` to get exactly what run.c prints.
        """
        piece = self._cpieces[self._check(token)]
        if prev_token == BOS_ID and piece[:1] == b" ":
            piece = piece[1:]
        b = _scan_byte(piece)
        return piece if b is None else bytes((b,))

    def text_bytes(self, prev_token: int, token: int) -> bytes:
        """What `token` adds to decoded text: `decode`'s bytes, nothing for BOS/EOS."""
        return b"" if token in (BOS_ID, EOS_ID) else self.decode(prev_token, token)

    def decode_tokens(self, tokens: Iterable[int], prev_token: int | None = None) -> str:
        """Decode ids to text (UTF-8, errors="replace"). BOS/EOS print nothing but still
        count as the previous token; `prev_token` is the id before ``tokens`` (None: none)."""
        return decode_tokens(self, tokens, prev_token)
