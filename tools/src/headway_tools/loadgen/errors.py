"""What the load generator can refuse or report.

    LoadgenError
    ├── InvalidSpec        a load spec, schedule, workload or target URL is malformed
    ├── MalformedReport    a JSON report lacks a field or has one of the wrong shape
    └── RequestFailed      one request got no HTTP response (``reason``: timeout | error)

Only ``InvalidSpec`` escapes a run: a failed request is a recorded outcome, and
``RequestFailed`` is raised only by the client's one-off ``request`` helper.
"""

from __future__ import annotations


class LoadgenError(Exception):
    """Base of every error the load generator raises."""


class InvalidSpec(LoadgenError):
    """A load spec, schedule, workload or target URL is malformed; the message says where."""


class MalformedReport(LoadgenError):
    """A JSON report could not be read back into a ``Report``."""


class RequestFailed(LoadgenError):
    """A request got no HTTP response: it timed out, or its connection failed."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
