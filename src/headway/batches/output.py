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
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from headway.batches.model import LineResult, line_result_id

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


def assemble(results: Iterable[LineResult]) -> tuple[bytes, bytes]:
    """(output file, error file): the ok results' lines in the order given, then the
    others likewise, each ending in a newline; ``b""`` for a file with no lines."""
    output: list[bytes] = []
    errors: list[bytes] = []
    for result in results:
        if b"\n" in result.data:
            raise ValueError(f"the result of line {result.line} is not one line")
        (output if result.ok else errors).append(result.data)
    return _joined(output), _joined(errors)


def _joined(lines: list[bytes]) -> bytes:
    return b"\n".join(lines) + b"\n" if lines else b""
