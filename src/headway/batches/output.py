"""The lines of a batch's output and error files, in OpenAI's shape, and the files.

Each line is one JSON object with exactly ``id``, ``custom_id``, ``response`` and
``error``::

    {"id": "batch_req_…", "custom_id": "req-1",
     "response": {"status_code": 200, "request_id": "…", "body": {…}}, "error": null}
    {"id": "batch_req_…", "custom_id": "req-2", "response": null,
     "error": {"code": "batch_expired", "message": "…"}}

A response body is embedded as raw JSON, never decoded and re-encoded: the embeddings
in it stay the very bytes the endpoint wrote (no float re-rounded) and a 50,000-line
file costs a syntax check per line, not a parse into Python objects. The ``id`` is
derived from the batch and the line number, so writing a line twice writes it the same.
Files are written as their lines come (``write_lines``), never assembled whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import msgspec

from headway.batches.model import LineResult, line_result_id

WRITE_BYTES = 1 << 20
"""Lines gathered before one write to a file being made."""
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."
CANCELLED_MESSAGE = "This request was not executed because the batch was cancelled."


class _Response(msgspec.Struct):
    status_code: int
    request_id: str
    body: msgspec.Raw


class _Error(msgspec.Struct):
    code: str
    message: str


class _ResultLine(msgspec.Struct):
    id: str
    custom_id: str | None
    response: _Response | None
    error: _Error | None


_encode = msgspec.json.Encoder().encode
_check_json = msgspec.json.Decoder(msgspec.Raw).decode


def answered(
    batch_id: str, line: int, custom_id: str, status_code: int, request_id: str, body: bytes
) -> bytes:
    """The line of a request that was answered: 2xx in the output file, any other status
    (``body`` then our ``{"error": {"type", "message"}}``) in the error file.

    ``body`` must be JSON (``ValueError`` if not); newlines between its tokens (JSON
    whitespace: a string cannot hold a raw one) become spaces, so the line stays one line.
    """
    try:
        raw = _check_json(body)  # the value alone, without whitespace around it
    except msgspec.DecodeError as exc:
        raise ValueError(f"the body of line {line} is not JSON: {exc}") from None
    if b"\n" in body or b"\r" in body:
        raw = msgspec.Raw(bytes(raw).replace(b"\n", b" ").replace(b"\r", b" "))
    response = _Response(status_code, request_id, raw)
    return _encode(_ResultLine(line_result_id(batch_id, line), custom_id, response, None))


def not_run(batch_id: str, line: int, custom_id: str | None, code: str, message: str) -> bytes:
    """The line of a request that never ran: it failed validation (``custom_id`` None when
    it could not be read), or the batch expired or was cancelled first."""
    error = _Error(code, message)
    return _encode(_ResultLine(line_result_id(batch_id, line), custom_id, None, error))


class LineSink(Protocol):
    """Where a file's lines go as they are made (a ``filestore.FileWriter``)."""

    def write(self, data: bytes) -> None: ...


def write_lines(
    results: Iterable[LineResult], output: LineSink, errors: LineSink
) -> tuple[int, int]:
    """Each result's line, and a newline, to ``output`` (ok) or ``errors``, in the order
    given, gathered into writes of about ``WRITE_BYTES``: a 50,000-line file never sits in
    memory. The lines written to each."""
    written = [0, 0]
    pending: tuple[list[bytes], list[bytes]] = ([], [])
    sizes = [0, 0]
    sinks = (output, errors)
    for result in results:
        if b"\n" in result.data:
            raise ValueError(f"the result of line {result.line} is not one line")
        which = 0 if result.ok else 1
        pending[which].append(result.data)
        written[which] += 1
        sizes[which] += len(result.data) + 1
        if sizes[which] >= WRITE_BYTES:
            sinks[which].write(_joined(pending[which]))
            pending[which].clear()
            sizes[which] = 0
    for which in (0, 1):
        if pending[which]:
            sinks[which].write(_joined(pending[which]))
    return written[0], written[1]


def assemble(results: Iterable[LineResult]) -> tuple[bytes, bytes]:
    """(output file, error file) as whole buffers (``write_lines`` into memory), ``b""``
    for a file with no lines: for tests and small files."""
    output, errors = _Buffer(), _Buffer()
    write_lines(results, output, errors)
    return bytes(output.data), bytes(errors.data)


class _Buffer:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data


def _joined(lines: list[bytes]) -> bytes:
    return b"\n".join(lines) + b"\n" if lines else b""
