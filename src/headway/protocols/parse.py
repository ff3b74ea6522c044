"""From raw bytes to a validated request, or a precise client error.

The tools of the parse stage; each endpoint's ``parse`` (``gateway/endpoints``)
strings them together for its own body. Limits come from settings, and the
OpenAPI document states the same ones (``gateway/openapi.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

import msgspec

from headway.errors import InvalidRequest, UnsupportedMediaType, ValidationFailed
from headway.settings import LimitsSettings

T = TypeVar("T")

# curl -d sends form-urlencoded by default; its body is still our JSON, so accept it.
_ACCEPTED_MEDIA = ("", "application/json", "application/x-www-form-urlencoded")


def check_media_type(headers: Mapping[str, str]) -> None:
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media in _ACCEPTED_MEDIA or media.endswith("+json"):
        return
    raise UnsupportedMediaType(f"expected application/json, got {media}")


def decode(decoder: msgspec.json.Decoder[T], body: bytes) -> T:
    """``body`` as the decoder's type, or the client's error: ``InvalidRequest`` for what is
    not JSON, or nested deeper than the decoder can follow (msgspec gives up near Python's
    recursion limit, ~1,000 levels, sooner in a thread deep in a call), ``ValidationFailed``
    for JSON of the wrong shape."""
    if not body.strip():
        raise InvalidRequest("request body is empty; expected a JSON object")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise ValidationFailed(str(exc)) from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"body is not valid JSON: {exc}") from exc
    except RecursionError:
        raise InvalidRequest(
            "body is nested too deeply: arrays and objects within one another, hundreds of "
            "levels down; no field of this API needs more than a few"
        ) from None


_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
"""``\\u0000`` in a JSON text: an escape (an odd run of backslashes before ``u0000``), the
only way a JSON string holds a NUL."""


def decode_stored(decoder: msgspec.json.Decoder[T], body: bytes) -> T:
    """``decode``, for a body whose strings are stored (the admin API's, a batch's): one
    holding a NUL is a 422, since Postgres cannot store it (a lookup of it fails too)."""
    value = decode(decoder, body)
    if _NUL_ESCAPE.search(body):
        raise ValidationFailed(
            "a string in the body holds a NUL character (\\u0000); no name, id or value "
            "kept here may"
        )
    return value


def check_texts(texts: Sequence[str], limits: LimitsSettings, field: str) -> None:
    """Each text non-empty and within the character limit; the count within limits."""
    if not texts:
        raise ValidationFailed(f"`{field}` must not be empty")
    if len(texts) > limits.max_texts:
        raise ValidationFailed(f"`{field}` has {len(texts)} texts; the limit is {limits.max_texts}")
    for index, text in enumerate(texts):
        if not text:
            raise ValidationFailed(f"`{field}[{index}]` is an empty string")
        if len(text) > limits.max_chars:
            raise ValidationFailed(
                f"`{field}[{index}]` has {len(text)} characters; the limit is {limits.max_chars}"
            )


TextsOrTokenIds = str | list[str | int | list[int]]
"""What OpenAI's ``input`` and TEI's ``inputs`` may hold: a text, texts, or token ids (one
array of integers, or a batch of them). Decoded as such so that ids are refused by
``texts_of`` with the reason, not by the decoder with a type error."""


def texts_of(value: TextsOrTokenIds, field: str, fix: str = "") -> list[str]:
    """The texts in ``value``; token ids are refused (422): headway tokenizes text itself,
    and ids from another tokenizer's vocabulary (tiktoken's, say) mean nothing to the
    model's. ``fix``: what the usual sender of ids should change, appended."""
    if isinstance(value, str):
        return [value]
    texts: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise ValidationFailed(
                f"`{field}` holds token ids (arrays of integers), not text: headway's models "
                "tokenize text with their own vocabulary, so ids from another tokenizer mean "
                f"nothing to them. Send the texts themselves.{fix}"
            )
        texts.append(item)
    return texts


def whole_number(value: float | None, field: str) -> int | None:
    """``value`` as an int: JSON Schema counts ``3.0`` as an integer, so we do; ``3.5`` is not."""
    if value is None or isinstance(value, int):
        return value
    if not value.is_integer():
        raise ValidationFailed(f"`{field}` must be a whole number, not {value}")
    return int(value)
