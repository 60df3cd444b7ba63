"""Streamed text: token ids to UTF-8 text pieces, cut at stop strings.

`StreamDecoder` is the one incremental decoder (every tokenizer's ``decode_tokens`` and the
generation loop use it): `tokenizer.text_bytes(prev, token)` per token, never splitting a
UTF-8 character. `StopMatcher` cuts streamed text at the first stop string without ever
printing any part of it.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Iterator


class StreamDecoder:
    """Feed ids one at a time and get text that never splits a UTF-8 character (incomplete
    sequences wait in a buffer); `flush` at the end. The tokenizer gives each token's bytes
    after the previous one (``text_bytes(prev, token)``); the concatenation of all pieces is
    the bytes decoded at once with errors="replace" (``decode_tokens``)."""

    def __init__(self, tokenizer, prev_token: int | None = None) -> None:
        self._tok = tokenizer
        self._prev = -1 if prev_token is None else prev_token
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, token: int) -> str:
        raw = self._tok.text_bytes(self._prev, token)
        self._prev = token
        return self._utf8.decode(raw)

    def flush(self) -> str:
        """Emit what is buffered (an incomplete sequence becomes U+FFFD) and reset."""
        return self._utf8.decode(b"", final=True)

    def stream(self, tokens: Iterable[int]) -> Iterator[str]:
        """Yield the non-empty pieces for `tokens`, then the flushed tail."""
        for t in tokens:
            if s := self.feed(t):
                yield s
        if s := self.flush():
            yield s


def decode_tokens(tokenizer, tokens: Iterable[int], prev_token: int | None = None) -> str:
    """Decode ids to text (UTF-8, errors="replace"); `prev_token` precedes `tokens`."""
    return "".join(StreamDecoder(tokenizer, prev_token).stream(tokens))


class StopMatcher:

    """Cut a text stream at the first stop string.

    ``feed(text) -> (emit, stopped)``: `emit` is text that is safe to print (it never contains
    any part of a stop string); text that could still become the start of a stop string is held
    back. Once a stop string is complete, everything before it is emitted, ``stopped`` is True,
    the stop string and whatever follows are dropped, and later feeds return ("", True).
    ``flush()`` releases the held-back text at the end of the stream.
    """

    def __init__(self, stop_strings=()):
        stops = [stop_strings] if isinstance(stop_strings, str) else list(stop_strings)
        for s in stops:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty strings, got {s!r}")
        self.stop_strings: tuple[str, ...] = tuple(dict.fromkeys(stops))
        self._buf = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the stream

    def _hold(self) -> int:
        """Length of the longest tail of the buffer that is a proper prefix of a stop."""
        buf, best = self._buf, 0
        for s in self.stop_strings:
            for k in range(min(len(s) - 1, len(buf)), best, -1):
                if buf.endswith(s[:k]):
                    best = k
                    break
        return best

    def feed(self, text: str) -> tuple[str, bool]:
        if not isinstance(text, str):
            raise ValueError(f"StopMatcher.feed() needs a str, got {type(text).__name__}")
        if self.stopped:
            return "", True
        self._buf += text
        if not self.stop_strings:
            out, self._buf = self._buf, ""
            return out, False
        hits = [(i, -len(s), s) for s in self.stop_strings if (i := self._buf.find(s)) >= 0]
        if hits:
            i, _, s = min(hits)
            out, self._buf = self._buf[:i], ""
            self.stopped, self.matched = True, s
            return out, True
        keep = self._hold()
        cut = len(self._buf) - keep
        out, self._buf = self._buf[:cut], self._buf[cut:]
        return out, False

    def flush(self) -> str:
        """The held-back text (none after a stop); the matcher is then empty."""
        out, self._buf = ("" if self.stopped else self._buf), ""
        return out
