"""A load trace: the requests of a run as JSON lines, read strictly, with no text and no key.

    {"headway_trace": 1, "duration_s": 10.0}
    {"offset_s": 0.0123, "tenant": "search-app", "texts": 3, "lengths": [12, 40, 7]}
    {"offset_s": 0.045, "tenant": "nightly", "lengths": [8, 9], "timeout_ms": 10000}
    {"offset_s": 0.05, "tenant": "shop", "lengths": [30], "endpoint": "rerank", "query_words": 6}

The first line may be a header (``headway_trace``: the format's version, 1;
``duration_s``: how long the run lasted, which the report's rates divide by; without
one, the run lasts to the whole second after the last offset). Every other line is
one request:

- ``offset_s`` (required): seconds from the start of the run, >= 0, non-decreasing
  from line to line and before ``duration_s``;
- ``tenant`` (required): who sent it. A trace names tenants, never API keys (a trace
  may be shared): a replay maps each tenant to a key (``--key TENANT=KEY``);
- ``lengths`` (required): the length of each text in words, each >= 1. The load
  generator's words are one model token each (``corpus.WORDS``), so a text of n words
  is n + 2 tokens with ``[CLS]`` and ``[SEP]``;
- ``texts``: the number of texts; when given, it must equal ``len(lengths)``;
- ``timeout_ms``: the request's ``X-Timeout-Ms`` and its goodput deadline (default 1000);
- ``endpoint``: ``embeddings`` (the default) or ``rerank``; for ``rerank`` the texts are
  the documents, and ``query_words`` (default 8, rerank only) the query's length;
- ``model``: the model name sent (default all-MiniLM-L6-v2);
- ``class``: the class the report counts it in (default: its tenant).

No text is ever in a trace: a replay writes new ones of the recorded lengths from the
load generator's corpus, seeded, none repeating within a run. A line that breaks any
of this is refused with an ``InvalidSpec`` naming it: ``trace line 17: unknown key
'tenat'``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.workload import DEFAULT_MODEL

Endpoint = Literal["embeddings", "rerank"]
ENDPOINTS: Mapping[Endpoint, str] = {"embeddings": "/v1/embeddings", "rerank": "/v1/rerank"}
FORMAT_VERSION = 1
DEFAULT_TIMEOUT_MS = 1000
DEFAULT_QUERY_WORDS = 8

_HEADER_KEYS = {"headway_trace", "duration_s"}
_REQUEST_KEYS = {
    "offset_s",
    "tenant",
    "texts",
    "lengths",
    "timeout_ms",
    "endpoint",
    "model",
    "class",
    "query_words",
}


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One line of a trace; ``class_name`` is the report's class, ``query_words`` rerank's."""

    offset_s: float
    tenant: str
    lengths: tuple[int, ...]
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    endpoint: Endpoint = "embeddings"
    model: str = DEFAULT_MODEL
    class_name: str = ""
    query_words: int = DEFAULT_QUERY_WORDS

    @property
    def texts(self) -> int:
        return len(self.lengths)

    @property
    def label(self) -> str:
        """The class the report counts this request in."""
        return self.class_name or self.tenant


@dataclass(frozen=True, slots=True)
class Trace:
    requests: tuple[TraceRequest, ...]
    duration_s: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise InvalidSpec(f"a trace lasts a positive number of seconds, not {self.duration_s}")
        offsets = [r.offset_s for r in self.requests]
        if any(later < earlier for earlier, later in itertools.pairwise(offsets)):
            raise InvalidSpec("a trace's requests are in send order (offsets non-decreasing)")
        if offsets and offsets[-1] >= self.duration_s:
            raise InvalidSpec(
                f"the last offset {offsets[-1]} is not before the trace's"
                f" duration_s {self.duration_s}"
            )


def default_duration(last_offset_s: float) -> float:
    """A header-less trace lasts to the whole second after its last request."""
    return float(math.floor(last_offset_s) + 1)


def load_trace(path: Path) -> Trace:
    """The trace in ``path``; errors name the file and the line."""
    try:
        with path.open(encoding="utf-8") as lines:
            return parse_trace(lines, source=f"{path}: trace")
    except OSError as exc:
        raise InvalidSpec(f"{path}: cannot read: {exc}") from exc


def parse_trace(lines: Iterable[str], source: str = "trace") -> Trace:
    """A trace from its lines (blank lines are skipped); errors say ``{source} line N``."""
    duration_s: float | None = None
    requests: list[TraceRequest] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise InvalidSpec(f"{where}: not valid JSON: {exc}") from exc
        if isinstance(value, dict) and "headway_trace" in value:
            if requests or duration_s is not None:
                raise InvalidSpec(f"{where}: the header must be the first line")
            duration_s = _header(value, where)
            continue
        request = _request(value, where)
        if requests and request.offset_s < requests[-1].offset_s:
            raise InvalidSpec(
                f"{where}: offset_s {request.offset_s} is before the previous line's"
                f" {requests[-1].offset_s} (a trace is in send order)"
            )
        if duration_s is not None and request.offset_s >= duration_s:
            raise InvalidSpec(f"{where}: offset_s {request.offset_s} is not before duration_s")
        requests.append(request)
    if duration_s is None:
        if not requests:
            raise InvalidSpec(f"{source}: no requests and no header to say how long it lasts")
        duration_s = default_duration(requests[-1].offset_s)
    return Trace(tuple(requests), duration_s)


def dump_trace(trace: Trace) -> Iterable[str]:
    """The lines of ``trace``, header first; a field at its default is left out."""
    yield _line({"headway_trace": FORMAT_VERSION, "duration_s": trace.duration_s})
    for request in trace.requests:
        fields: dict[str, Any] = {
            "offset_s": request.offset_s,
            "tenant": request.tenant,
            "texts": request.texts,
            "lengths": list(request.lengths),
            "timeout_ms": request.timeout_ms,
        }
        if request.endpoint != "embeddings":
            fields["endpoint"] = request.endpoint
            fields["query_words"] = request.query_words
        if request.model != DEFAULT_MODEL:
            fields["model"] = request.model
        if request.class_name and request.class_name != request.tenant:
            fields["class"] = request.class_name
        yield _line(fields)


def write_trace(path: Path, trace: Trace) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.writelines(dump_trace(trace))


def _line(fields: Mapping[str, Any]) -> str:
    # json writes a float's repr: a trace read back holds the very offsets written.
    return json.dumps(fields) + "\n"


# -- strict readers ----------------------------------------------------------------


def _object(value: Any, where: str, known: set[str], required: Sequence[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidSpec(f"{where}: expected a JSON object, not {type(value).__name__}")
    unknown = sorted(set(value) - known)
    if unknown:
        names = ", ".join(map(repr, unknown))
        raise InvalidSpec(f"{where}: unknown key {names} (known: {', '.join(sorted(known))})")
    missing = [key for key in required if key not in value]
    if missing:
        raise InvalidSpec(f"{where}: missing {', '.join(map(repr, missing))}")
    return value


def _header(value: dict[str, Any], where: str) -> float:
    table = _object(value, where, _HEADER_KEYS, required=("headway_trace", "duration_s"))
    version = _count(table["headway_trace"], f"{where}: headway_trace", low=1)
    if version != FORMAT_VERSION:
        raise InvalidSpec(f"{where}: headway_trace {version} is not {FORMAT_VERSION}")
    duration_s = _seconds(table["duration_s"], f"{where}: duration_s")
    if duration_s <= 0:
        raise InvalidSpec(f"{where}: duration_s must be positive, not {duration_s}")
    return duration_s


def _request(value: Any, where: str) -> TraceRequest:
    table = _object(value, where, _REQUEST_KEYS, required=("offset_s", "tenant", "lengths"))
    lengths = table["lengths"]
    if not isinstance(lengths, list) or not lengths:
        raise InvalidSpec(f"{where}: lengths must be a list of one or more word counts")
    lengths = tuple(_count(n, f"{where}: lengths", low=1) for n in lengths)
    if "texts" in table:
        texts = _count(table["texts"], f"{where}: texts", low=1)
        if texts != len(lengths):
            raise InvalidSpec(f"{where}: texts is {texts} but lengths has {len(lengths)}")
    endpoint = table.get("endpoint", "embeddings")
    if endpoint not in ENDPOINTS:
        known = ", ".join(ENDPOINTS)
        raise InvalidSpec(f"{where}: endpoint must be one of {known}, not {endpoint!r}")
    if "query_words" in table and endpoint != "rerank":
        raise InvalidSpec(f"{where}: query_words is for endpoint 'rerank' only")
    return TraceRequest(
        offset_s=_seconds(table["offset_s"], f"{where}: offset_s"),
        tenant=_name(table["tenant"], f"{where}: tenant"),
        lengths=lengths,
        timeout_ms=_count(table.get("timeout_ms", DEFAULT_TIMEOUT_MS), f"{where}: timeout_ms", 1),
        endpoint=endpoint,
        model=_name(table.get("model", DEFAULT_MODEL), f"{where}: model"),
        class_name=_name(table["class"], f"{where}: class") if "class" in table else "",
        query_words=_count(
            table.get("query_words", DEFAULT_QUERY_WORDS), f"{where}: query_words", low=1
        ),
    )


def _count(value: Any, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSpec(f"{where}: expected an integer, not {value!r}")
    if value < low:
        raise InvalidSpec(f"{where}: must be at least {low}, not {value}")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSpec(f"{where}: expected a number of seconds, not {value!r}")
    if not (math.isfinite(value) and value >= 0):
        raise InvalidSpec(f"{where}: must be a finite number >= 0, not {value!r}")
    return float(value)


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidSpec(f"{where}: expected a non-empty string, not {value!r}")
    return value
