"""Strict admin request bodies: msgspec structs, and refusals that name the field.

msgspec says ``Expected `float | null`, got `str` - at `$.rate_texts_per_s```; an
operator reads ``rate_texts_per_s: expected a number or null, got a string``.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from headway.errors import ValidationFailed
from headway.http.asgi import Request
from headway.protocols.parse import check_media_type, decode_stored

T = TypeVar("T")

_WORDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "a boolean",
    "null": "null",
    "object": "an object",
    "array": "an array",
}
_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$")
_TYPE = re.compile(r"`([^`]+)`")


def decode_body(request: Request, decoder: msgspec.json.Decoder[T]) -> T:
    """The body as the decoder's type, read as every stored JSON body is
    (``parse.decode_stored``: empty, not JSON, nested too deeply: 400; a NUL: 422), its
    schema's refusal led by the field (422)."""
    check_media_type(request.headers)
    try:
        return decode_stored(decoder, request.body)
    except ValidationFailed as exc:
        raise ValidationFailed(field_message(exc.message)) from exc


def field_message(message: str) -> str:
    """msgspec's validation message, led by the field it is about."""
    matched = _AT.match(message)
    assert matched is not None  # the pattern matches every string
    what, path = matched["what"], (matched["path"] or "").lstrip(".")
    for prefix, rest in (
        ("Object contains unknown field ", "unknown field"),
        ("Object missing required field ", "required"),
    ):
        if what.startswith(prefix):
            name = what.removeprefix(prefix).strip("`")
            return f"`{f'{path}.{name}' if path else name}`: {rest}"
    described = _TYPE.sub(lambda m: _types(m[1]), what)
    described = described[:1].lower() + described[1:]
    return f"`{path}`: {described}" if path else described


def _types(names: str) -> str:
    return " or ".join(_WORDS.get(name.strip(), name.strip()) for name in names.split("|"))
