"""One HTTP/1.1 keep-alive connection: write a request, parse its response in place.

A ``Connection`` carries at most one request at a time (no pipelining). Its
response is parsed as the bytes arrive, from the status line and just the
headers that matter here: ``content-length`` (or chunked framing, or a body
ended by close), ``retry-after`` and ``connection: close``. When the response
is complete the connection hands itself back to its ``Owner`` (unless the
server asked to close) and reports the ``Response``; bytes it cannot parse,
or a connection lost mid-response, report a ``Failure`` and drop the
connection, whose stream can no longer be trusted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, cast

MAX_HEAD_BYTES = 64 * 1024
_BODY_UNTIL_CLOSE = -2
_CHUNKED = -1


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    retry_after_s: float | None
    body: bytes
    head: bytes = field(default=b"", compare=False)
    """The status line and headers as they came (no final blank line); not compared."""


@dataclass(frozen=True, slots=True)
class Failure:
    """No response: ``timeout`` (deadline passed) or ``error`` (connect failed, connection broke,
    or the response could not be parsed)."""

    reason: Literal["timeout", "error"]
    detail: str


Result = Response | Failure
OnDone = Callable[[int, Result], None]


class Owner(Protocol):
    """Whoever hands out connections: told when one is free again, or gone."""

    def release(self, connection: Connection) -> None: ...

    def lost(self, connection: Connection) -> None: ...


class Pending:
    """A request from ``submit`` until ``finish`` reports its result, once."""

    __slots__ = ("connection", "done", "on_done", "request", "token")

    def __init__(self, request: bytes, on_done: OnDone, token: int) -> None:
        self.request = request
        self.on_done = on_done
        self.token = token
        self.connection: Connection | None = None
        self.done = False

    def finish(self, result: Result) -> None:
        if not self.done:
            self.done = True
            self.on_done(self.token, result)


class Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight, the response parsed in place."""

    __slots__ = (
        "body_start",
        "buffer",
        "close_after",
        "head",
        "length",
        "owner",
        "pending",
        "retry_after",
        "status",
        "transport",
        "usable",
    )

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.pending: Pending | None = None
        self.usable = False
        self._reset()

    def _reset(self) -> None:
        self.buffer = bytearray()
        self.status = 0  # 0 until the head is parsed
        self.head = b""
        self.body_start = 0
        self.length = 0
        self.retry_after: float | None = None
        self.close_after = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.usable = True

    def send(self, pending: Pending) -> None:
        assert self.transport is not None
        self.pending = pending
        pending.connection = self
        self.transport.write(pending.request)

    def abort(self) -> None:
        self.usable = False
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes | bytearray) -> None:
        if self.pending is None:  # unsolicited bytes: the stream is out of step
            self.abort()
            return
        if self.buffer:
            self.buffer += data
            data = self.buffer
        if self.status == 0:
            end = data.find(b"\r\n\r\n")
            if end < 0:
                self._stash(data)
                if len(self.buffer) > MAX_HEAD_BYTES:
                    self._fail(f"response head over {MAX_HEAD_BYTES} bytes")
                return
            problem = self._parse_head(data, end)
            if problem:
                self._fail(problem)
                return
        if self.length >= 0:
            end = self.body_start + self.length
            if len(data) < end:
                self._stash(data)
                return
            if len(data) > end:
                self._fail("bytes after the response")
                return
            self._complete(bytes(data[self.body_start : end]))
        elif self.length == _CHUNKED:
            body, problem = _dechunk(data, self.body_start)
            if problem:
                self._fail(problem)
            elif body is None:
                self._stash(data)
            else:
                self._complete(body)
        else:
            self._stash(data)

    def _stash(self, data: bytes | bytearray) -> None:
        if data is not self.buffer:
            self.buffer += data

    def _parse_head(self, data: bytes | bytearray, end: int) -> str:
        if data[:7] != b"HTTP/1." or data[8:9] != b" ":
            return "not an HTTP/1.x response"
        try:
            self.status = int(data[9:12])
        except ValueError:
            return "bad status line"
        self.head = bytes(data[:end])
        head = self.head.lower()
        self.body_start = end + 4
        self.close_after = data[7:8] == b"0" or _header(head, b"connection") == b"close"
        length = _header(head, b"content-length")
        if b"chunked" in (_header(head, b"transfer-encoding") or b""):
            self.length = _CHUNKED
        elif length is not None:
            try:
                self.length = int(length)
            except ValueError:
                return "bad content-length"
        elif self.status in (204, 304) or self.status < 200:
            self.length = 0
        else:
            self.length = _BODY_UNTIL_CLOSE
            self.close_after = True
        retry_after = _header(head, b"retry-after")
        if retry_after is not None:
            try:
                self.retry_after = float(retry_after)
            except ValueError:  # an HTTP date: not worth parsing here
                self.retry_after = None
        return ""

    def _complete(self, body: bytes) -> None:
        pending = self.pending
        assert pending is not None
        response = Response(self.status, self.retry_after, body, self.head)
        self.pending = None
        if self.close_after:
            self.abort()
        else:
            self._reset()
            self.owner.release(self)
        pending.finish(response)

    def _fail(self, detail: str) -> None:
        pending = self.pending
        self.pending = None
        self.abort()
        if pending is not None:
            pending.finish(Failure("error", detail))

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        pending = self.pending
        self.pending = None
        if pending is not None and not pending.done:
            if self.status and self.length == _BODY_UNTIL_CLOSE:
                body = bytes(self.buffer[self.body_start :])
                pending.finish(Response(self.status, self.retry_after, body, self.head))
            else:
                pending.finish(Failure("error", f"connection lost: {exc or 'closed by peer'}"))
        self.owner.lost(self)


def _header(head: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` in a lower-cased response head, or None."""
    at = head.find(b"\r\n" + name + b":")
    if at < 0:
        return None
    start = at + len(name) + 3
    stop = head.find(b"\r\n", start)
    return head[start : stop if stop >= 0 else len(head)].strip()


def _dechunk(data: bytes | bytearray, start: int) -> tuple[bytes | None, str]:
    """The body of a chunked response, ``None`` while incomplete, or a problem."""
    parts: list[bytes] = []
    at = start
    while True:
        line_end = data.find(b"\r\n", at)
        if line_end < 0:
            return None, ""
        try:
            size = int(bytes(data[at:line_end]).split(b";", 1)[0], 16)
        except ValueError:
            return None, "bad chunk size"
        at = line_end + 2
        if size == 0:
            if data[at : at + 2] == b"\r\n":
                end = at + 2
            else:
                trailer_end = data.find(b"\r\n\r\n", at)
                if trailer_end < 0:
                    return None, ""
                end = trailer_end + 4
            if end != len(data):
                return None, "bytes after the response"
            return b"".join(parts), ""
        if len(data) < at + size + 2:
            return None, ""
        parts.append(bytes(data[at : at + size]))
        at += size + 2
