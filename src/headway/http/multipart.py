"""A strict multipart/form-data parser that reads a body as it arrives (``POST /v1/files``).

A part's data (RFC 7578 over RFC 2046) ends at the first CRLF ``--BOUNDARY`` that a real
boundary line follows (``--`` or optional blanks, then CRLF), so data may hold CRLF, ``--`` and
even the boundary text mid-line. Data is handed on as it comes: only the few bytes that might
begin a boundary wait for the next chunk, so an upload is never held. Lines must end in CRLF,
as RFC 7578 and every encoder write them; a bare-LF body is refused by name rather than guessed
at, since an LF-only reading would move every part's last byte.

Parameters may be tokens, quoted strings (escapes undone) or RFC 5987 (``filename*``, which
wins over ``filename``; aiohttp sends ``name*`` for a non-ASCII name). Header bytes are read as
UTF-8 (browsers send raw UTF-8 filenames), else Latin-1. Filenames are kept as sent: httpx
writes ``"`` as ``%22`` and aiohttp percent-encodes the whole filename, and nothing in the body
says which, so none of it is undone. A NUL in a name or filename is refused (a filename is
kept, and Postgres cannot store one).
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
class PartStart:
    """A part begins: its field name, filename (None: a plain field) and content type."""

    name: str
    filename: str | None
    content_type: str | None


@dataclass(frozen=True, slots=True)
class PartData:
    """More bytes of the part begun last (a part's data may come in any number of these)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class PartEnd:
    """The part begun last is complete."""


FormEvent = PartStart | PartData | PartEnd

_PREAMBLE, _BOUNDARY_LINE, _HEADERS, _DATA, _DONE = range(5)


class FormReader:
    """A ``multipart/form-data`` body read as it arrives: ``feed`` each chunk and get back
    what it completed (``PartStart``, ``PartData``, ``PartEnd``, in order); ``close`` at its end.
    Memory is the bytes that might still begin a boundary, or an unfinished header block
    (``MAX_HEADER_BYTES``), never a part's data. A problem raises ``InvalidRequest`` as soon
    as the bytes show it, and the reader is then of no further use. The content type is
    checked when the reader is made, before any byte of the body is read.
    """

    def __init__(self, content_type: str, *, max_parts: int = 16) -> None:
        self._delimiter = b"--" + _boundary(content_type)
        self._marker = b"\r\n" + self._delimiter
        self._max_parts = max_parts
        self._buffer = b""
        self._state = _PREAMBLE
        self._names: set[str] = set()
        self._at_start = True
        """No byte of the body has been looked at yet (the first delimiter may open it)."""

    def feed(self, chunk: bytes) -> list[FormEvent]:
        self._buffer += chunk
        events: list[FormEvent] = []
        while self._step(events):
            pass
        return events

    def close(self) -> None:
        """The body ended: ``InvalidRequest`` unless it ended after its final boundary."""
        if self._state == _DONE:
            return
        if self._state == _PREAMBLE:
            raise InvalidRequest(
                "the multipart body does not contain the boundary its content type names"
            )
        if self._state == _BOUNDARY_LINE:
            raise InvalidRequest("the multipart body ends inside a boundary line")
        if self._state == _HEADERS:
            raise InvalidRequest(
                f"part {len(self._names) + 1} of the form has no blank line after its headers"
                f" (within {MAX_HEADER_BYTES} bytes)"
            )
        raise InvalidRequest(
            "the multipart body ends before its final boundary (--boundary--): the upload is"
            " incomplete"
        )

    def _step(self, events: list[FormEvent]) -> bool:
        """Take what the buffer completes in the current state; False: more bytes needed."""
        if self._state == _PREAMBLE:
            return self._preamble()
        if self._state == _BOUNDARY_LINE:
            return self._boundary_line()
        if self._state == _HEADERS:
            return self._headers(events)
        if self._state == _DATA:
            return self._data(events)
        self._buffer = b""  # the epilogue, which RFC 2046 says to ignore
        return False

    def _preamble(self) -> bool:
        buffer = self._buffer
        if self._at_start:
            if len(buffer) < len(self._delimiter) and self._delimiter.startswith(buffer):
                return False
            self._at_start = False
            if buffer.startswith(self._delimiter):
                self._buffer = buffer[len(self._delimiter) :]
                self._state = _BOUNDARY_LINE
                return True
        found = buffer.find(self._marker)
        if found < 0:  # keep what may be the start of the first delimiter
            self._buffer = buffer[-(len(self._marker) - 1) :]
            return False
        self._buffer = buffer[found + len(self._marker) :]
        self._state = _BOUNDARY_LINE
        return True

    def _boundary_line(self) -> bool:
        buffer = self._buffer
        if buffer.startswith(b"--"):  # "--BOUNDARY--" closes the body
            if not self._names:
                raise InvalidRequest("the multipart body has no parts")
            self._state = _DONE
            return True
        end = buffer.find(b"\n", 0, MAX_HEADER_BYTES)
        if end < 0:
            if len(buffer) >= MAX_HEADER_BYTES:
                raise InvalidRequest("the multipart body ends inside a boundary line")
            return False
        if end == 0 or buffer[end - 1] != ord("\r"):
            raise InvalidRequest(
                "the multipart body's lines end in a bare LF; multipart/form-data needs CRLF"
                " (\\r\\n) line ends, as curl, browsers and HTTP libraries send"
            )
        if buffer[: end - 1].strip(b" \t"):
            raise InvalidRequest("a multipart boundary line has characters after the boundary")
        if len(self._names) >= self._max_parts:
            raise InvalidRequest(f"the form has more than {self._max_parts} parts")
        self._buffer = buffer[end + 1 :]
        self._state = _HEADERS
        return True

    def _headers(self, events: list[FormEvent]) -> bool:
        buffer = self._buffer
        number = len(self._names) + 1
        if buffer.startswith(b"\r\n"):  # a part without headers
            block, rest = b"", buffer[2:]
        else:
            end = buffer.find(b"\r\n\r\n", 0, MAX_HEADER_BYTES)
            if end < 0:
                if len(buffer) >= MAX_HEADER_BYTES:
                    raise InvalidRequest(
                        f"part {number} of the form has no blank line after its headers"
                        f" (within {MAX_HEADER_BYTES} bytes)"
                    )
                return False
            block, rest = buffer[:end], buffer[end + 4 :]
        part = _part(_headers(block, number), number)
        if part.name in self._names:
            raise InvalidRequest(
                f"the form field '{_clip(part.name)}' is given twice; send it once"
            )
        self._names.add(part.name)
        events.append(part)
        self._buffer = rest
        self._state = _DATA
        return True

    def _data(self, events: list[FormEvent]) -> bool:
        buffer, marker = self._buffer, self._marker
        search_from = 0
        while True:
            found = buffer.find(marker, search_from)
            if found < 0:
                keep = len(marker) - 1  # what may be the start of the next delimiter
                if len(buffer) > keep:
                    events.append(PartData(buffer[: len(buffer) - keep]))
                    self._buffer = buffer[len(buffer) - keep :]
                return False
            after = found + len(marker)
            verdict = _closes_part(buffer, after)
            if verdict is None:  # too few bytes after the delimiter to tell
                if found:
                    events.append(PartData(buffer[:found]))
                    self._buffer = buffer[found:]
                return False
            if verdict:
                if found:
                    events.append(PartData(buffer[:found]))
                events.append(PartEnd())
                self._buffer = buffer[after:]
                self._state = _BOUNDARY_LINE
                return True
            search_from = found + 1


def _closes_part(buffer: bytes, after: int) -> bool | None:
    """Whether the delimiter ending at ``after`` is a real boundary line (``--``, or blanks
    then CRLF, within the boundary's length), a mere mention of the boundary inside the data
    (False), or None: the bytes that would tell have not arrived."""
    window = buffer[after : after + MAX_BOUNDARY_CHARS]
    if window.startswith(b"--"):
        return True
    stripped = window.lstrip(b" \t")
    if stripped.startswith(b"\r\n"):
        return True
    if len(window) < MAX_BOUNDARY_CHARS and (window == b"-" or stripped in (b"", b"\r")):
        return None
    return False


@dataclass(frozen=True, slots=True)
class FormPart:
    name: str
    filename: str | None
    """None: a plain field, not a file."""
    content_type: str | None
    data: bytes

    def text(self) -> str:
        """A plain field's value as text (``purpose=batch``)."""
        try:
            return str(self.data, "utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"the form field '{_clip(self.name)}' is not UTF-8") from None


def parse_form(content_type: str, body: bytes, *, max_parts: int = 16) -> dict[str, FormPart]:
    """A whole body's parts by field name, in the order sent (``FormReader`` over it)."""
    reader = FormReader(content_type, max_parts=max_parts)
    parts: dict[str, FormPart] = {}
    current: PartStart | None = None
    data: list[bytes] = []
    for event in reader.feed(body):
        if isinstance(event, PartStart):
            current, data = event, []
        elif isinstance(event, PartData):
            data.append(event.data)
        elif current is not None:
            parts[current.name] = FormPart(
                current.name, current.filename, current.content_type, b"".join(data)
            )
    reader.close()
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


def _part(headers: dict[str, str], number: int) -> PartStart:
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
    if "\x00" in name or (filename is not None and "\x00" in filename):
        raise InvalidRequest(f"part {number} of the form has a NUL in its name or filename")
    return PartStart(name, filename, headers.get("content-type") or None)


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
