"""The W3C Trace Context ``traceparent`` header: ``00-<trace id>-<parent id>-<flags>``.

Pure functions. A header that does not parse is ignored (the request starts a new
trace), as the recommendation says: a malformed header must not fail the request. Only
version ``00`` is written; a later version is read by its first four fields, and
version ``ff`` is invalid.
"""

from __future__ import annotations

from typing import NamedTuple

SAMPLED = 0x01
_HEX = frozenset("0123456789abcdef")


class TraceParent(NamedTuple):
    trace_id: int
    """128 bits, never 0."""
    span_id: int
    """64 bits, never 0: the caller's span, the parent of ours."""
    sampled: bool


def parse(header: str | None) -> TraceParent | None:
    """The header's fields, or None for an absent or malformed header."""
    if not header or len(header) < 55:
        return None
    version, trace_hex, span_hex, flags_hex = header[:2], header[3:35], header[36:52], header[53:55]
    if header[2] != "-" or header[35] != "-" or header[52] != "-":
        return None
    if version == "ff" or not _is_hex(version):
        return None
    if version == "00" and len(header) != 55:
        return None
    if len(header) > 55 and header[55] != "-":
        return None
    if not (_is_hex(trace_hex) and _is_hex(span_hex) and _is_hex(flags_hex)):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id, span_id, bool(int(flags_hex, 16) & SAMPLED))


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{SAMPLED if sampled else 0:02x}"


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in _HEX for c in text)
