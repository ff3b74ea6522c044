"""A query string read strictly: only the parameters a route takes, each at most once."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from headway.errors import ValidationFailed


def one_each(params: Mapping[str, Sequence[str]], allowed: Collection[str]) -> dict[str, str]:
    """Each parameter's one value; ``ValidationFailed`` naming an unknown or repeated one."""
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValidationFailed(
            f"unknown parameter {unknown[0][:40]!r}; use {', '.join(sorted(allowed))}"
        )
    for name, values in params.items():
        if len(values) != 1:
            raise ValidationFailed(f"{name} is given {len(values)} times; give it once")
    return {name: values[0] for name, values in params.items()}


def query_limit(value: str | None, *, default: int, most: int) -> int:
    """A ``limit`` parameter: absent, ``default``; else a whole number from 1 to ``most``."""
    if value is None:
        return default
    if not value.isdigit() or not 1 <= int(value) <= most:
        raise ValidationFailed(f"limit must be a whole number from 1 to {most}")
    return int(value)
