"""Log lines that say which request they belong to, as text or as JSON lines.

``configure_logging`` installs one handler on the root logger (uvicorn's loggers
propagate to it too). Its filter stamps every record with the request being served in
the task that logged it (``serving``, set by the edge: request id, route, tenant) and
the trace id (``tracing.spans``), so a line of a failure deep in a background task of a
request still names the request. Outside a request those fields are empty.

``json`` writes one object a line: time (RFC 3339, UTC), level, logger, message,
process, request_id, trace_id, tenant, route, the access fields of an access line
(method, status, outcome, seconds), and the traceback of an exception. What a line may
hold is fixed here: a message is ours, never an input text or a vector; the access
line is built from the route's name, never the path a client sent.
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from typing import Any, Literal, Protocol

import msgspec

from headway.tracing.spans import current_trace_id

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s%(context)s"
ACCESS_FIELDS = ("method", "status", "outcome", "seconds")
ACCESS_LOGGER = "headway.access"


class Served(Protocol):
    """What a log line reads of the request being served (the edge's ``Request``)."""

    id: str
    tenant: str
    route: str


serving: ContextVar[Served | None] = ContextVar("headway_request", default=None)


class RequestFields(logging.Filter):
    """Stamps each record with the request and trace it belongs to."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = serving.get()
        request_id = request.id if request is not None else ""
        trace_id = current_trace_id()
        record.request_id = request_id
        record.tenant = request.tenant if request is not None else ""
        record.route = request.route if request is not None else ""
        record.trace_id = trace_id
        context = f" request_id={request_id}" if request_id else ""
        record.context = f"{context} trace_id={trace_id}" if trace_id else context
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line (see the module docstring for its fields)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for name in ("request_id", "trace_id", "tenant", "route"):
            value = getattr(record, name, "")
            if value:
                line[name] = value
        for name in ACCESS_FIELDS:
            if hasattr(record, name):
                line[name] = getattr(record, name)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return msgspec.json.encode(line).decode()


def configure_logging(level: str, format: Literal["text", "json"] = "text") -> None:
    handler = logging.StreamHandler()
    handler.addFilter(RequestFields())
    handler.setFormatter(JsonFormatter() if format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def _rfc3339(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"
