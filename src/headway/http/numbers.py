"""The one reading of a decimal integer a client wrote (a query or form field, a path id, a
header such as Content-Length or X-Timeout-Ms).

``str.isdigit`` is no test for a number a client sent: it takes ``²`` and ``٣``, which
``int`` then refuses or reads as another number, and ``int`` refuses more than 4,300 digits
outright (a ``ValueError``, which the edge answers 500). ``decimal`` never calls ``int`` on
more digits than its cap has.
"""

from __future__ import annotations

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
