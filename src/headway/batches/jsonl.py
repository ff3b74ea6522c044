"""A batch's input file: checked whole at upload, read line by line at validation.

The format is OpenAI's batch input, one JSON object per physical line::

    {"custom_id": "req-1", "method": "POST", "url": "/v1/embeddings", "body": {...}}

``UploadCheck`` (fed the upload a chunk at a time; ``check_upload`` over a whole buffer)
refuses, with a 4xx naming the line, a file no batch could use: a line not UTF-8, not a
JSON object, too long, nested deeper than ``MAX_DEPTH``, or that ``check_line`` (the
executor's own reading) fails on with anything but a per-line error; or too many lines.
A line merely wrong (no custom_id, a body its endpoint refuses) passes, to become an
error-file line, as OpenAI's does. ``read_lines`` (validation, against one endpoint)
makes every non-blank line a ``Line`` or a ``LineError``, never raising for a bad line.

Nesting is bounded by counting brackets, not by the parser's stack: msgspec's
``RecursionError`` comes at a depth that depends on the calling thread's stack, so a line
the upload read might stop the executor. Both passes walk the file once over memoryview
slices; only a good line's ``body`` is copied out, as the client's bytes (``msgspec.Raw``),
and only a bad line is read again, loosely, to say what is wrong. A raw newline always
ends a line; blank lines are skipped but counted (line numbers are the editor's); a
leading UTF-8 BOM is skipped. No message quotes a line's content: only its own fields
(custom_id, method, url, unknown key names), clipped to 100 characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import msgspec

from headway.batches.model import LineError
from headway.errors import HeadwayError, InvalidRequest, PayloadTooLarge

MAX_CUSTOM_ID_CHARS = 512
KEYS = ("custom_id", "method", "url", "body")
"""The fields of a request line, in the order they are checked."""

MAX_DEPTH = 64
"""Most levels of JSON nesting in a request line (the line's own object is the first)."""

_NEWLINE = re.compile(b"\n")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")
_BLANK = b" \t\r"
_BOM = b"\xef\xbb\xbf"
_CLIP = 100
_NOT_OBJECT = "is not a JSON object: upload JSONL, one request object per line"


class _AnyObject(msgspec.Struct):
    """Decodes any JSON object and keeps none of it: the cheapest "is this an object"."""


class _UrlOnly(msgspec.Struct):
    """A line's url alone (every other field skipped): which parser its body meets."""

    url: str = ""


class _Request(msgspec.Struct, forbid_unknown_fields=True):
    """A well-formed line: decoding into it is the fast path of every good line."""

    custom_id: str
    method: str
    url: str
    body: msgspec.Raw


@dataclass(frozen=True, slots=True)
class _Not:
    """A field that is missing or not a JSON string: what it is instead."""

    what: str


_Field = str | _Not

_any_object = msgspec.json.Decoder(_AnyObject)
_url_only = msgspec.json.Decoder(_UrlOnly)
_request = msgspec.json.Decoder(_Request)
_loose_request = msgspec.json.Decoder(dict[str, msgspec.Raw])
_string = msgspec.json.Decoder(str)
_MISSING = _Not("missing")
_JSON_TYPES = {
    ord('"'): "a string",
    ord("{"): "an object",
    ord("["): "an array",
    ord("t"): "a boolean",
    ord("f"): "a boolean",
    ord("n"): "null",
}


@dataclass(frozen=True, slots=True)
class Line:
    """A request line that passed validation and will run."""

    number: int
    """1-based physical line number."""
    custom_id: str
    body: bytes
    """The request body, JSON, exactly as the line had it."""
    texts: int
    """Inputs (embeddings) or documents (rerank) it asks for."""
    start: int = field(default=0, compare=False)
    """Where the physical line starts in the file (bytes), its newline excluded..."""
    end: int = field(default=0, compare=False)
    """... and ends: ``reread`` takes those bytes back to this line."""


BodyParsers = Callable[[str], Callable[[bytes], int] | None]
"""The strict body parser of a url (``inputs.body_parser``), or None for a url no batch
runs (such a line fails validation by its url, its body unread)."""


def _no_parsers(url: str) -> None:
    return None


def check_upload(
    data: bytes | memoryview,
    *,
    max_bytes: int,
    max_lines: int,
    max_line_bytes: int | None = None,
    parsers: BodyParsers = _no_parsers,
) -> int:
    """The number of non-blank lines, or the first reason the file is unusable as a
    batch's input (``PayloadTooLarge``, ``InvalidRequest``), in file order: ``UploadCheck``
    over a whole buffer."""
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"the file has {len(data)} bytes; the limit is {max_bytes}")
    check = UploadCheck(
        max_lines=max_lines, max_line_bytes=max_line_bytes or max_bytes, parsers=parsers
    )
    check.feed(bytes(data))
    return check.finish()


class UploadCheck:
    """An upload's lines checked as its bytes arrive (``feed``, then ``finish``): memory
    is one line at most (``max_line_bytes``) whatever the file's size. Each method raises
    ``InvalidRequest`` at the first problem; the check is then over."""

    def __init__(
        self, *, max_lines: int, max_line_bytes: int, parsers: BodyParsers = _no_parsers
    ) -> None:
        self._max_lines, self._max_line_bytes, self._parsers = max_lines, max_line_bytes, parsers
        self._pending = bytearray()
        """The line being read: its bytes so far (no newline yet)."""
        self._number = 0
        """Lines read whole so far."""
        self.lines = 0
        """Request (non-blank) lines among them."""

    def feed(self, data: bytes) -> None:
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            if self._pending:
                self._too_long(len(self._pending) + end - start)
                self._pending += data[start:end]
                line = bytes(self._pending)
                self._pending.clear()
            else:
                self._too_long(end - start)
                line = data[start:end]
            self._line(line)
            start = end + 1
        self._too_long(len(self._pending) + len(data) - start)
        self._pending += data[start:]

    def finish(self) -> int:
        """The request lines' count, once the last line (with no newline after it) is read."""
        if self._pending:
            line = bytes(self._pending)
            self._pending.clear()
            self._line(line)
        if not self.lines:
            raise InvalidRequest(
                "the file has no request lines; upload JSONL, one request per line"
            )
        return self.lines

    def _too_long(self, size: int) -> None:
        if size > self._max_line_bytes:
            raise InvalidRequest(
                f"line {self._number + 1} is longer than {self._max_line_bytes} bytes, the"
                " most a request line may have (a request body and its custom_id)"
            )

    def _line(self, line: bytes) -> None:
        self._number += 1
        if self._number == 1 and line.startswith(_BOM):
            line = line[len(_BOM) :]
        if check_line(self._number, line, self._parsers):
            self.lines += 1
            if self.lines > self._max_lines:
                raise InvalidRequest(
                    f"the file has more than {self._max_lines} request lines; the limit is"
                    f" {self._max_lines}: split it into several batches"
                )


def check_line(number: int, line: bytes, parsers: BodyParsers = _no_parsers) -> bool:
    """Whether line ``number`` is a request line (False: blank), or ``InvalidRequest``
    saying why no batch can read it. Read as the executor will read it: the request-line
    decoding of ``read_lines`` and the strict parser of the line's own url, every exception
    caught; a line they make a ``LineError`` of passes (validation reports it)."""
    if not line or (line[0] in _BLANK and not line.strip(_BLANK)):
        return False
    if not line.isascii() and not _is_utf8(memoryview(line)):
        raise InvalidRequest(f"line {number} is not UTF-8; save the file as UTF-8")
    if _nests_deeper(line, MAX_DEPTH):
        raise InvalidRequest(
            f"line {number} nests JSON more than {MAX_DEPTH} levels deep; a request needs a few"
        )
    try:
        url = _url_only.decode(line).url
    except (msgspec.DecodeError, msgspec.ValidationError):
        url = ""  # not an object, or a url that is not a string: the reading below says
    except Exception as exc:
        raise _unreadable(number, exc) from None
    parse_body = _parser_of(parsers, url)
    try:
        outcome = _read_line(number, memoryview(line), url, parse_body, {})
    except Exception as exc:
        raise _unreadable(number, exc) from None
    if isinstance(outcome, LineError) and outcome.code == "invalid_json_line":
        raise InvalidRequest(f"line {number} {_NOT_OBJECT}")
    return True


def _parser_of(parsers: BodyParsers, url: str) -> Callable[[bytes], int]:
    try:
        parser = parsers(url) if url else None
    except Exception:  # a url the table cannot even look up: no batch runs it
        parser = None
    return parser if parser is not None else _unchecked


def _unchecked(body: bytes) -> int:
    return 0


def _unreadable(number: int, exc: Exception) -> InvalidRequest:
    """What to say of a line the executor's reading failed on (never the line itself)."""
    why = (
        "it nests too deeply to parse"
        if isinstance(exc, RecursionError)
        else f"the parser failed with {type(exc).__name__}"
    )
    return InvalidRequest(f"line {number} cannot be read as a batch request: {why}")


def _nests_deeper(line: bytes, most: int) -> bool:
    """Whether the JSON ``line`` nests more than ``most`` levels. Brackets are counted first
    (a line with few cannot be deep); else strings are cut out and empty pairs removed,
    one level a pass, ``most`` passes at most, each a scan in C."""
    if line.count(b"[") + line.count(b"{") <= most:
        return False
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b"", line))
    for _ in range(most):
        if not brackets:
            return False
        brackets = _EMPTY_PAIR.sub(b"", brackets)
    return bool(brackets)


def read_lines(
    data: bytes | memoryview,
    endpoint: str,
    parse_body: Callable[[bytes], int],
    *,
    max_inputs: int | None,
) -> tuple[list[Line], list[LineError]]:
    """Every non-blank line as a ``Line`` or a ``LineError``, in file order.

    ``parse_body`` is the endpoint's strict parser: it returns the body's text count or
    raises a ``HeadwayError``, whose message becomes the line's. Anything else raised (a
    ``RecursionError``, a parser's bug) fails that line alone as ``unreadable``. With
    ``max_inputs``, a line whose texts would take the accepted lines' total over it fails
    (``too_many_inputs``); the lines that fit still run.
    """
    view = memoryview(data)
    ascii_only = _is_ascii(view)
    lines: list[Line] = []
    errors: list[LineError] = []
    first_use: dict[str, int] = {}
    inputs = 0
    for number, start, end in _lines(view):
        raw = view[start:end]
        if _is_blank(raw):
            continue
        if not ascii_only and not _is_utf8(raw):
            errors.append(LineError(number, "invalid_json_line", "the line is not UTF-8"))
            continue
        try:
            outcome = _read_line(number, raw, endpoint, parse_body, first_use)
        except Exception as exc:  # the line's alone, whatever raised it (docstring)
            outcome = unreadable(number, exc)
        if isinstance(outcome, Line):
            outcome = Line(number, outcome.custom_id, outcome.body, outcome.texts, start, end)
        if isinstance(outcome, LineError):
            errors.append(outcome)
        elif max_inputs is not None and inputs + outcome.texts > max_inputs:
            errors.append(
                LineError(
                    number,
                    "too_many_inputs",
                    f"this line's {outcome.texts} inputs would take the batch over its limit"
                    f" of {max_inputs} inputs in all; split the file into several batches",
                    "body",
                )
            )
        else:
            inputs += outcome.texts
            lines.append(outcome)
    return lines, errors


def _read_line(
    number: int,
    raw: memoryview,
    endpoint: str,
    parse_body: Callable[[bytes], int],
    first_use: dict[str, int],
) -> Line | LineError:
    """One line's checks in order; ``first_use`` learns its custom_id if it has one."""
    try:
        request = _request.decode(raw)
        fields: tuple[_Field, _Field, _Field, msgspec.Raw | None] = (
            request.custom_id,
            request.method,
            request.url,
            request.body,
        )
    except (msgspec.DecodeError, msgspec.ValidationError):
        loose = _loose_fields(number, raw)  # a bad line: find out what is wrong, in order
        if isinstance(loose, LineError):
            return loose
        fields = loose
    custom_id, method, url, body = fields

    if isinstance(custom_id, _Not) or not 0 < len(custom_id) <= MAX_CUSTOM_ID_CHARS:
        return LineError(number, "invalid_custom_id", _custom_id_problem(custom_id), "custom_id")
    earlier = first_use.setdefault(custom_id, number)
    if earlier != number:
        return LineError(
            number,
            "duplicate_custom_id",
            f"custom_id '{_clip(custom_id)}' is already used by line {earlier}; give each"
            " line its own",
            "custom_id",
        )
    if method != "POST":
        message = f'method must be "POST" (got {_described(method)})'
        return LineError(number, "invalid_method", message, "method")
    if url != endpoint:
        if isinstance(url, str):
            message = f"url '{_clip(url)}' is not this batch's endpoint '{_clip(endpoint)}'"
        else:
            message = f"url must be this batch's endpoint '{_clip(endpoint)}' (got {url.what})"
        return LineError(number, "invalid_url", message, "url")
    body_bytes = b"" if body is None else bytes(body)
    if not body_bytes.startswith(b"{"):
        got = "missing" if body is None else _json_type(body_bytes)
        return LineError(number, "invalid_body", f"body must be a JSON object (got {got})", "body")
    try:
        texts = parse_body(body_bytes)
    except HeadwayError as exc:
        return LineError(number, "invalid_body", exc.message, "body")
    return Line(number, custom_id, body_bytes, texts)


def reread(number: int, raw: bytes, texts: int, start: int = 0) -> Line:
    """A line that ``read_lines`` found good, from its bytes again (``Line.start`` to
    ``Line.end`` of the same file): its custom_id and body, without checking it again."""
    request = _request.decode(raw)
    return Line(number, request.custom_id, bytes(request.body), texts, start, start + len(raw))


def unreadable(number: int, exc: Exception) -> LineError:
    """The error of a line whose reading raised ``exc`` (not a ``HeadwayError``): its kind
    only, never its text, which may quote the line."""
    if isinstance(exc, RecursionError):
        message = (
            "the line is nested too deeply to read (arrays or objects within one another,"
            " hundreds of levels down)"
        )
        return LineError(number, "invalid_json_line", message)
    message = f"the line could not be read ({type(exc).__name__}); it was not run"
    return LineError(number, "unreadable_line", message)


def _loose_fields(
    number: int, raw: memoryview
) -> tuple[_Field, _Field, _Field, msgspec.Raw | None] | LineError:
    """A line that is not a well-formed request, read loosely: the first two problems
    (not an object, an unknown key) as an error, else its fields, each a string or not."""
    try:
        request = _loose_request.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return LineError(number, "invalid_json_line", f"the line {_NOT_OBJECT}")
    for key in request:
        if key not in KEYS:
            return LineError(
                number,
                "invalid_request",
                f"unknown key '{_clip(key)}': a request line has only custom_id, method, url"
                " and body",
                _clip(key),
            )
    custom_id, method, url = (_field(request.get(key)) for key in KEYS[:3])
    return custom_id, method, url, request.get("body")


def _field(raw: msgspec.Raw | None) -> _Field:
    if raw is None:
        return _MISSING
    try:
        return _string.decode(raw)
    except msgspec.ValidationError:
        return _Not(_json_type(bytes(raw)))


def _custom_id_problem(custom_id: _Field) -> str:
    rule = f"a unique string of 1 to {MAX_CUSTOM_ID_CHARS} characters"
    if custom_id is _MISSING:
        return f"custom_id is missing; give each line {rule}"
    if isinstance(custom_id, _Not):
        return f"custom_id must be {rule} (got {custom_id.what})"
    if not custom_id:
        return f"custom_id is empty; give each line {rule}"
    return f"custom_id has {len(custom_id)} characters; the limit is {MAX_CUSTOM_ID_CHARS}"


def _lines(view: memoryview) -> Iterator[tuple[int, int, int]]:
    """(1-based number, start, end) of every physical line, the newline excluded."""
    start = len(_BOM) if view[: len(_BOM)] == _BOM else 0
    number = 1
    for newline in _NEWLINE.finditer(view, start):
        yield number, start, newline.start()
        number, start = number + 1, newline.end()
    if start < len(view):
        yield number, start, len(view)


def _is_blank(line: memoryview) -> bool:
    # Almost every line starts with "{": only a leading blank costs a copy.
    return not line or (line[0] in _BLANK and not bytes(line).strip(_BLANK))


def _is_ascii(view: memoryview) -> bool:
    """True when the whole buffer is ASCII, found in one C scan where it can be (so no
    line needs a UTF-8 check); False means "check each line", not "not ASCII"."""
    whole = view.obj
    return isinstance(whole, bytes) and whole.isascii()


def _is_utf8(line: memoryview) -> bool:
    try:
        str(line, "utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _json_type(value: bytes) -> str:
    """What JSON value ``value`` is, from its first byte (msgspec has checked the rest)."""
    return _JSON_TYPES.get(value[0], "a number") if value else "nothing"


def _described(value: _Field) -> str:
    return f"'{_clip(value)}'" if isinstance(value, str) else value.what


def _clip(text: str) -> str:
    return text if len(text) <= _CLIP else text[: _CLIP - 1] + "…"
