"""Numbers and parameters as clients send them, read strictly: only the parameters a route
takes, each at most once, and whole numbers read as ASCII digits only (``http/numbers.py``'s
``decimal``, the one reading of a number a client wrote). ``whole_number`` is that reading
for a query or form field, anything else a 422 naming the range.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from headway.errors import ValidationFailed
from headway.http.numbers import decimal as decimal


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
