"""A strict multipart/form-data parser for whole, already-read bodies (``POST /v1/files``).

The body (RFC 7578 over RFC 2046) is a run of parts between boundary lines::

    --BOUNDARY\\r\\n
    Content-Disposition: form-data; name="file"; filename="in.jsonl"\\r\\n
    Content-Type: application/jsonl\\r\\n
    \\r\\n
    <bytes>\\r\\n
    --BOUNDARY--\\r\\n

A part's data ends at the first CRLF ``--BOUNDARY`` that a real boundary line follows
(``--`` or optional blanks then CRLF), so data may hold CRLF, ``--`` and even the
boundary text mid-line. Data is a memoryview into the body: a 200 MB upload is not
copied again. Lines must end in CRLF, as RFC 7578 and every encoder (browsers, curl,
httpx, aiohttp, requests) write them; a bare-LF body is refused by name rather than
guessed at, since a LF-only reading would move every part's last byte.

Parameters may be tokens or quoted strings (backslash escapes undone) and may come in
RFC 5987 form (``filename*=UTF-8''%e2%82%ac.jsonl``, which wins over ``filename``;
aiohttp sends ``name*`` for a non-ASCII name). Header names are case-insensitive; header
bytes are read as UTF-8 (browsers send raw UTF-8 filenames), else Latin-1. Filenames
are kept as sent: httpx writes ``"`` as ``%22`` and aiohttp percent-encodes the whole
filename, and nothing in the body says which, so none of it is undone.

Refusals say what is wrong: ``UnsupportedMediaType`` for another content type, and
``InvalidRequest`` for a missing boundary, a malformed or truncated body, a part
without ``Content-Disposition`` or name, a field given twice, or too many parts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from headway.errors import InvalidRequest, UnsupportedMediaType

MEDIA_TYPE = "multipart/form-data"
MAX_BOUNDARY_CHARS = 70
"""RFC 2046's limit."""
MAX_HEADER_BYTES = 8192
"""A part's header block: more is not a form an encoder wrote."""

# ; key=value, the value a token or a quoted string; nothing but blanks up to the next ";".
_PARAM = re.compile(
    r'[ \t]*;[ \t]*(?P<key>[^\s=;"]+)[ \t]*=[ \t]*'
    r'(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<token>[^\s;"]+))[ \t]*(?=;|$)',
    re.DOTALL,
)
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)
_EXT_CHARSETS = ("utf-8", "iso-8859-1")
_CLIP = 100


@dataclass(frozen=True, slots=True)
class FormPart:
    name: str
    filename: str | None
    """None: a plain field, not a file."""
    content_type: str | None
    data: memoryview
    """The part's bytes: a view into the request body, not a copy of it."""

    def text(self) -> str:
        """A plain field's value as text (``purpose=batch``)."""
        try:
            return str(self.data, "utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"the form field '{_clip(self.name)}' is not UTF-8") from None


def parse_form(content_type: str, body: bytes, *, max_parts: int = 16) -> dict[str, FormPart]:
    """The body's parts by field name, in the order sent."""
    boundary = _boundary(content_type)
    delimiter = b"--" + boundary
    view = memoryview(body)
    if body.startswith(delimiter):
        position = len(delimiter)
    else:  # a preamble, which RFC 2046 allows and says to ignore
        found = body.find(b"\r\n" + delimiter)
        if found < 0:
            raise InvalidRequest(
                "the multipart body does not contain the boundary its content type names"
            )
        position = found + 2 + len(delimiter)

    parts: dict[str, FormPart] = {}
    while not body.startswith(b"--", position):  # "--BOUNDARY--" closes the body
        number = len(parts) + 1
        if number > max_parts:
            raise InvalidRequest(f"the form has more than {max_parts} parts")
        headers_from = _after_boundary_line(body, position)
        headers_end = body.find(b"\r\n\r\n", headers_from - 2, headers_from + MAX_HEADER_BYTES)
        if headers_end < 0:
            raise InvalidRequest(
                f"part {number} of the form has no blank line after its headers"
                f" (within {MAX_HEADER_BYTES} bytes)"
            )
        part_headers = _headers(body[headers_from : max(headers_from, headers_end)], number)
        data_from = headers_end + 4
        data_end = _data_end(body, delimiter, data_from)
        part = _part(part_headers, view[data_from:data_end], number)
        if part.name in parts:
            raise InvalidRequest(
                f"the form field '{_clip(part.name)}' is given twice; send it once"
            )
        parts[part.name] = part
        position = data_end + 2 + len(delimiter)
    if not parts:
        raise InvalidRequest("the multipart body has no parts")
    return parts


def _boundary(content_type: str) -> bytes:
    media = content_type.partition(";")[0].strip().lower()
    if media != MEDIA_TYPE:
        got = f"got {_clip(media)}" if media else "no content type was given"
        raise UnsupportedMediaType(
            f"expected {MEDIA_TYPE} ({got}): send {MEDIA_TYPE} with fields purpose and file"
        )
    boundary = _split_header(content_type, "Content-Type")[1].get("boundary", "")
    if not boundary:
        raise InvalidRequest(f"the Content-Type {MEDIA_TYPE} has no boundary parameter")
    if len(boundary) > MAX_BOUNDARY_CHARS or not boundary.isascii():
        raise InvalidRequest(
            f"the multipart boundary must be 1 to {MAX_BOUNDARY_CHARS} ASCII characters"
        )
    return boundary.encode("ascii")


def _after_boundary_line(body: bytes, position: int) -> int:
    """Where the line after a boundary starts: only blanks may follow the boundary."""
    end = body.find(b"\n", position, position + MAX_HEADER_BYTES)
    if end < 0:
        raise InvalidRequest("the multipart body ends inside a boundary line")
    if end == position or body[end - 1] != ord("\r"):
        raise InvalidRequest(
            "the multipart body's lines end in a bare LF; multipart/form-data needs CRLF"
            " (\\r\\n) line ends, as curl, browsers and HTTP libraries send"
        )
    if body[position : end - 1].strip(b" \t"):
        raise InvalidRequest("a multipart boundary line has characters after the boundary")
    return end + 1


def _data_end(body: bytes, delimiter: bytes, start: int) -> int:
    """Where a part's data ends: the next CRLF and delimiter that a boundary line follows."""
    marker = b"\r\n" + delimiter
    found = body.find(marker, start)
    while found >= 0:
        after = found + len(marker)
        rest = body[after : after + MAX_BOUNDARY_CHARS].lstrip(b" \t")
        if body.startswith(b"--", after) or rest.startswith(b"\r\n"):
            return found
        found = body.find(marker, found + 1)
    raise InvalidRequest(
        "the multipart body ends before its final boundary (--boundary--): the upload is incomplete"
    )


def _headers(block: bytes, number: int) -> dict[str, str]:
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        text = block.decode("latin-1")
    headers: dict[str, str] = {}
    last = ""
    for line in text.split("\r\n") if text else ():
        if line[:1] in (" ", "\t") and last:  # an obsolete folded continuation
            headers[last] += " " + line.strip()
            continue
        name, colon, value = line.partition(":")
        name = name.strip().lower()
        if not colon or not name or "\n" in line or "\r" in line:
            raise InvalidRequest(f"part {number} of the form has a malformed header line")
        if name in headers:
            raise InvalidRequest(f"part {number} of the form has two {name} headers")
        headers[name], last = value.strip(), name
    return headers


def _part(headers: dict[str, str], data: memoryview, number: int) -> FormPart:
    disposition = headers.get("content-disposition")
    if disposition is None:
        raise InvalidRequest(
            f'part {number} of the form has no Content-Disposition header (form-data; name="…")'
        )
    kind, params = _split_header(disposition, f"Content-Disposition of part {number}")
    if kind != "form-data":
        raise InvalidRequest(
            f"part {number} of the form is '{_clip(kind)}', not form-data (Content-Disposition)"
        )
    name = params.get("name*", params.get("name"))
    if not name:
        raise InvalidRequest(f"part {number} of the form has no name (Content-Disposition)")
    filename = params.get("filename*", params.get("filename"))
    return FormPart(name, filename, headers.get("content-type") or None, data)


def _split_header(value: str, what: str) -> tuple[str, dict[str, str]]:
    """A header's lowercased first word and its parameters (keys lowercased)."""
    head, _, _ = value.partition(";")
    params: dict[str, str] = {}
    position = len(head)
    while value[position:].strip(" \t;"):
        matched = _PARAM.match(value, position)
        if matched is None:
            raise InvalidRequest(f"the {what} header's parameters are malformed")
        key = matched["key"].lower()
        if key in params:
            raise InvalidRequest(f"the {what} header gives {_clip(key)} twice")
        quoted = matched["quoted"]
        text = _ESCAPED.sub(r"\1", quoted) if quoted is not None else matched["token"]
        params[key] = _ext_value(text, key, what) if key.endswith("*") else text
        position = matched.end()
    return head.strip().lower(), params


def _ext_value(text: str, key: str, what: str) -> str:
    """RFC 5987's ``charset'language'percent-encoded`` value, decoded."""
    charset, quote, rest = text.partition("'")
    _language, quote2, encoded = rest.partition("'")
    charset = charset.lower()
    if not (quote and quote2) or charset not in _EXT_CHARSETS:
        raise InvalidRequest(
            f"the {what} header's {_clip(key)} is not UTF-8''… or ISO-8859-1''… (RFC 5987)"
        )
    try:
        return unquote(encoded, encoding=charset, errors="strict")
    except UnicodeDecodeError:
        raise InvalidRequest(f"the {what} header's {_clip(key)} is not {charset}") from None


def _clip(text: str) -> str:
    return text if len(text) <= _CLIP else text[: _CLIP - 1] + "…"
