"""The edge's two measures of a request in flight, as pure functions (``http/guard.py``
applies them): how large its line and headers are, and when its body is late.

- **Header bytes.** Every byte from a request's first to the blank line that ends its
  headers counts, however the reads split them: the bytes of earlier reads, plus those of
  this read up to that line (``header_section_size``). A read that does not hold the end
  leaves the section at least as large as all of it.
- **Body pace.** A body has ``body_timeout_s`` from its headers, plus one second for every
  ``body_min_rate_bytes_s`` bytes that have arrived (Apache mod_reqtimeout's ``body=N,
  minrate=R``): a client sending 9 bytes and stalling is dropped after about
  ``body_timeout_s``, one sending at the minimum rate or faster never is.
"""

from __future__ import annotations

END_OF_HEADERS = b"\r\n\r\n"
TAIL_BYTES = len(END_OF_HEADERS) - 1
"""How much of the earlier reads to keep: a blank line may straddle two reads."""


def header_section_size(counted: int, tail: bytes, data: bytes) -> int | None:
    """The size of a request line and headers that end in ``data``; ``counted`` of their
    bytes came in earlier reads, which ended with ``tail`` (at most ``TAIL_BYTES``). None:
    they do not end in ``data``. (httptools takes only CRLF line endings, so the blank
    line is always ``\\r\\n\\r\\n``.)"""
    end = (tail + data).find(END_OF_HEADERS)
    if end < 0:
        return None
    return counted - len(tail) + end + len(END_OF_HEADERS)


def body_deadline(started_s: float, received: int, timeout_s: float, min_rate: float) -> float:
    """When a body that began arriving at ``started_s`` and has brought ``received`` bytes
    is late: ``timeout_s`` plus a second for every ``min_rate`` bytes."""
    return started_s + timeout_s + received / min_rate
