"""The one way unix seconds are written for people: RFC 3339 in UTC, ``Z`` suffixed."""

from __future__ import annotations

import datetime as dt


def rfc3339(unix: float) -> str:
    """``2026-11-01T10:00:00Z``; fractions of a second only when there are some."""
    return dt.datetime.fromtimestamp(unix, dt.UTC).isoformat().replace("+00:00", "Z")
