"""The HTTP connection limits uvicorn does not have, applied to the bytes before its parser
sees them: a request's head (request line and headers) of at most `max_header_bytes` and
`max_headers` lines (else 431), complete within `read_timeout` seconds of the connection
opening or the previous response ending (else 408, so a client sending a byte a second holds
its connection that long at most), and at most `max_connections` connections at once (the
next gets a 503 and is closed at once, so descriptors stay bounded).

`guarded_protocol(limits)` wraps whichever HTTP protocol uvicorn would use (httptools when
installed, else h11); the body's own limits (size, read time) are the app's."""

from __future__ import annotations

import json
from dataclasses import dataclass

REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large",
           503: "Service Unavailable"}


@dataclass(frozen=True)
class Limits:
    max_header_bytes: int = 16384
    max_headers: int = 100
    read_timeout: float = 10.0
    keep_alive: float = 5.0
    max_connections: int = 256


def raw_error(status: int, message: str, code: str, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 response in OpenAI's error shape that closes the connection."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"
                                 if status < 500 else "server_error",
                                 "param": None, "code": code}}).encode()
    head = (f"HTTP/1.1 {status} {REASONS[status]}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n")
    if retry_after is not None:
        head += f"retry-after: {retry_after}\r\n"
    return head.encode() + b"\r\n" + body


def _base():
    try:
        import httptools  # noqa: F401
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        return HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol
        return H11Protocol


def guarded_protocol(limits: Limits, base=None):
    """A uvicorn HTTP protocol class (Config(http=...)) enforcing `limits`."""
    base = base or _base()

    class Guarded(base):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            self._refused = False
            self._in_head = True  # reading a request's head (or waiting for one)
            self._head_bytes = 0
            self._lines = 0
            self._tail = b""  # the head's last 3 bytes: its end may span two reads
            self._timer = None

        def connection_made(self, transport):
            if len(self.server_state.connections) >= limits.max_connections:
                self._refused = True  # never one of uvicorn's connections
                transport.write(raw_error(503, f"the server holds {limits.max_connections} "
                                               "connections; retry later",
                                          "too_many_connections", retry_after=1))
                transport.close()
                return
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc):
            if self._refused:
                return
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._in_head, self._head_bytes, self._lines, self._tail = True, 0, 0, b""
            self._timer = self.loop.call_later(limits.read_timeout, self._timed_out)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _timed_out(self) -> None:
            self._timer = None
            if not self._in_head or self.transport.is_closing():
                return
            if self._head_bytes:
                self._refuse(408, f"the request's head did not arrive within "
                                  f"{limits.read_timeout:g} s", "request_timeout")
            else:  # idle: nothing to answer
                self.transport.close()

        def _refuse(self, status: int, message: str, code: str) -> None:
            self._in_head = False
            self._disarm()
            self.transport.write(raw_error(status, message, code))
            self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._refused or self.transport.is_closing():
                return
            if self._in_head:
                buf = self._tail + data
                ends = [i for i in (buf.find(b"\r\n\r\n"), buf.find(b"\n\n")) if i >= 0]
                if ends:
                    cut = min(ends) + (4 if buf.startswith(b"\r\n\r\n", min(ends)) else 2)
                    part = data[:max(0, cut - len(self._tail))]
                else:
                    part = data
                self._head_bytes += len(part)
                self._lines += part.count(b"\n")
                if self._head_bytes > limits.max_header_bytes:
                    return self._refuse(431, f"the request's head exceeds "
                                             f"{limits.max_header_bytes} bytes",
                                        "headers_too_large")
                # the request line, each header, and the empty line that ends them
                if self._lines - (2 if ends else 1) > limits.max_headers:
                    return self._refuse(431, f"the request has more than {limits.max_headers} "
                                             "headers", "too_many_headers")
                if ends:
                    self._in_head = False
                    self._disarm()
                else:
                    self._tail = buf[-3:]
            super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is None or cycle.response_complete:  # no pipelined request under way
                self._arm()

    Guarded.__name__ = Guarded.__qualname__ = f"Guarded{base.__name__}"
    return Guarded
