"""Numbers and parameters as clients send them, read strictly: only the parameters a route
takes, each at most once, and whole numbers read as ASCII digits only.

``str.isdigit`` is no test for a number a client sent: it takes ``²`` and ``٣``, which
``int`` then refuses or reads as another number, and ``int`` refuses more than 4,300
digits outright (a ``ValueError``, which the edge answers 500). ``decimal`` is the one
reading of a decimal integer a client wrote (a query or form field, a path id, a header):
it never calls ``int`` on more digits than its cap has. ``whole_number`` is that reading
for a query or form field, anything else a 422 naming the range.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from headway.errors import ValidationFailed

_ASCII_DIGITS = frozenset("0123456789")


def decimal(text: str, *, cap: int) -> int | None:
    """``text`` as a decimal integer of ASCII digits alone (leading zeros allowed; no sign,
    blank, ``_`` or digit of another script): its value, or ``cap`` for any value above
    ``cap`` however many digits it has; None for anything that is not such a number."""
    if not text or not _ASCII_DIGITS.issuperset(text):
        return None
    significant = text.lstrip("0")
    if len(significant) > len(str(cap)):
        return cap
    return min(int(significant or "0"), cap)


def one_each(params: Mapping[str, Sequence[str]], allowed: Collection[str]) -> dict[str, str]:
    """Each parameter's one value; ``ValidationFailed`` naming an unknown or repeated one,
    or one holding a NUL (no cursor, id or name does, and Postgres cannot store one)."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValidationFailed(
            f"unknown parameter {unknown[0][:40]!r}; use {', '.join(sorted(allowed))}"
        )
    for name, values in params.items():
        if len(values) != 1:
            raise ValidationFailed(f"{name} is given {len(values)} times; give it once")
        if "\x00" in values[0]:
            raise ValidationFailed(f"{name} holds a NUL character; no value here may")
    return {name: values[0] for name, values in params.items()}


def whole_number(value: str, name: str, *, least: int, most: int) -> int:
    """``value`` as an int from ``least`` to ``most``: ASCII digits only (leading zeros
    allowed, no sign, no blanks); else ``ValidationFailed`` naming ``name`` and the range."""
    number = decimal(value, cap=most + 1)
    if number is None or not least <= number <= most:
        raise ValidationFailed(f"{name} must be a whole number from {least} to {most}")
    return number


def query_limit(value: str | None, *, default: int, most: int) -> int:
    """A ``limit`` parameter: absent, ``default``; else a whole number from 1 to ``most``."""
    if value is None:
        return default
    return whole_number(value, "limit", least=1, most=most)
