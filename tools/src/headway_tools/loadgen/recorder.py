"""What a run found: per-request records, and their summaries (overall, per class, per second).

Every request has an intended send time; its *latency* runs from that time to
its answer, so time it spent waiting behind a stalled server or a late client
counts (no coordinated omission), and its *lag* is how late the generator
actually sent it. Outcomes: ``ok`` (200), ``shed`` (503), ``quota`` (429),
``timeout`` (504, or no answer by the client's timeout) and ``error``
(anything else, with its reason). *Goodput* counts the served requests that
answered within their own deadline (``X-Timeout-Ms``, from the intended send
time): a 200 after the caller gave up is not worth having.

Percentiles are nearest-rank (``headway.quantile``): the ``q`` quantile of n
samples is the ``ceil(q × n)``-th smallest, so it is always one of the samples.
The timeline buckets requests by the second of their intended send time; rates
divide by the bucket's length (the last one may be partial). A run is *behind
schedule* when the p99 lag exceeds ``LAG_P99_LIMIT_S`` or any request left more
than ``LAG_MAX_LIMIT_S`` late: its offered load was then not the one asked for.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import msgspec
import numpy as np
from numpy.typing import NDArray

from headway.quantile import quantile
from headway.transport.connection import Response

LAG_P99_LIMIT_S = 0.005
LAG_MAX_LIMIT_S = 0.050


class Outcome(IntEnum):
    OK = 0
    SHED = 1
    QUOTA = 2
    TIMEOUT = 3
    ERROR = 4

    @property
    def label(self) -> str:
        return self.name.lower()


_BY_STATUS = {200: Outcome.OK, 503: Outcome.SHED, 429: Outcome.QUOTA, 504: Outcome.TIMEOUT}


def outcome_of(status: int, failure: str = "") -> Outcome:
    """``status`` 0 means no response; ``failure`` then says why (``timeout`` or ``error``)."""
    if status == 0:
        return Outcome.TIMEOUT if failure == "timeout" else Outcome.ERROR
    return _BY_STATUS.get(status, Outcome.ERROR)


def outcomes(status: NDArray[np.int32], timed_out: NDArray[np.bool_]) -> NDArray[np.int8]:
    """``outcome_of`` over arrays: ``timed_out`` marks the requests the client gave up on."""
    result = np.full(status.shape, Outcome.ERROR, dtype=np.int8)
    for code, outcome in _BY_STATUS.items():
        result[status == code] = outcome
    result[timed_out] = Outcome.TIMEOUT
    return result


class _ErrorBody(msgspec.Struct):
    type: str


class _ErrorDocument(msgspec.Struct):
    error: _ErrorBody


def error_reason(response: Response) -> str:
    """``status 404 not_found``: the status and the type of a headway JSON error body."""
    try:
        kind = msgspec.json.decode(response.body, type=_ErrorDocument).error.type
    except msgspec.DecodeError:
        return f"status {response.status}"
    return f"status {response.status} {kind}"


@dataclass(frozen=True, slots=True)
class Record:
    """One request. ``status`` 0: no response; ``error``: why, for ``error`` outcomes."""

    class_name: str
    intended_s: float
    lag_s: float
    latency_s: float
    status: int
    outcome: Outcome
    texts: int
    deadline_s: float
    error: str = ""


@dataclass(frozen=True, eq=False)
class Records:
    """Many records as columns (request i is row i), cheap to fill and to aggregate."""

    class_names: tuple[str, ...]
    class_index: NDArray[np.int32]
    intended_s: NDArray[np.float64]
    lag_s: NDArray[np.float64]
    latency_s: NDArray[np.float64]
    status: NDArray[np.int32]
    outcome: NDArray[np.int8]
    texts: NDArray[np.int32]
    deadline_s: NDArray[np.float64]
    errors: Mapping[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.intended_s)

    def __getitem__(self, i: int) -> Record:
        return Record(
            class_name=self.class_names[int(self.class_index[i])],
            intended_s=float(self.intended_s[i]),
            lag_s=float(self.lag_s[i]),
            latency_s=float(self.latency_s[i]),
            status=int(self.status[i]),
            outcome=Outcome(int(self.outcome[i])),
            texts=int(self.texts[i]),
            deadline_s=float(self.deadline_s[i]),
            error=self.errors.get(i, ""),
        )

    @classmethod
    def from_records(cls, records: Sequence[Record], class_names: Sequence[str] = ()) -> Records:
        """Columns from rows; classes keep ``class_names``' order, then first appearance."""
        names = list(class_names)
        for record in records:
            if record.class_name not in names:
                names.append(record.class_name)
        index = {name: i for i, name in enumerate(names)}
        return cls(
            class_names=tuple(names),
            class_index=np.array([index[r.class_name] for r in records], dtype=np.int32),
            intended_s=np.array([r.intended_s for r in records], dtype=np.float64),
            lag_s=np.array([r.lag_s for r in records], dtype=np.float64),
            latency_s=np.array([r.latency_s for r in records], dtype=np.float64),
            status=np.array([r.status for r in records], dtype=np.int32),
            outcome=np.array([int(r.outcome) for r in records], dtype=np.int8),
            texts=np.array([r.texts for r in records], dtype=np.int32),
            deadline_s=np.array([r.deadline_s for r in records], dtype=np.float64),
            errors={i: r.error for i, r in enumerate(records) if r.error},
        )


@dataclass(frozen=True, slots=True)
class Summary:
    """The requests intended in one window (the run, one class's share, or one second).

    Latencies are in milliseconds from the intended send time, ``None`` when
    there is nothing to measure; ``rejection_p99_ms`` covers 503 and 429 answers.
    """

    name: str
    start_s: float
    seconds: float
    offered: int
    served: int
    goodput: int
    shed: int
    quota: int
    timeouts: int
    errors: int
    served_texts: int
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    latency_p99_ms: float | None
    rejection_p99_ms: float | None
    lag_p99_ms: float | None
    lag_max_ms: float | None

    @property
    def offered_rps(self) -> float:
        return self.offered / self.seconds

    @property
    def served_rps(self) -> float:
        return self.served / self.seconds

    @property
    def goodput_rps(self) -> float:
        return self.goodput / self.seconds

    @property
    def served_texts_per_s(self) -> float:
        return self.served_texts / self.seconds


@dataclass(frozen=True, slots=True)
class ClientStats:
    """The generator's own side of a run: where it sent, what it cost, how many connections.

    ``cpu_s`` is the process's CPU time over the run (an in-process server counts
    too); ``waited_for_connection`` counts requests that found all of
    ``max_connections`` busy and so left later than recorded: when it is not 0,
    the load offered to the server was less than the schedule's.
    """

    target: str
    arrivals: str
    wall_s: float
    cpu_s: float
    requests: int
    connections_opened: int
    peak_connections: int
    connect_failures: int
    waited_for_connection: int = 0

    @property
    def cpu_us_per_request(self) -> float | None:
        return self.cpu_s * 1e6 / self.requests if self.requests else None


@dataclass(frozen=True, slots=True)
class Report:
    duration_s: float
    overall: Summary
    classes: tuple[Summary, ...]
    timeline: tuple[Summary, ...]
    behind_schedule: bool
    error_reasons: Mapping[str, int]
    client: ClientStats | None = None


def _quantile_ms(values: NDArray[np.float64], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (seconds) in milliseconds; ``None`` when empty."""
    return quantile(values, q) * 1000 if values.size else None


def _summary(
    r: Records, rows: NDArray[np.intp], name: str, start_s: float, seconds: float
) -> Summary:
    outcome = r.outcome[rows]
    latency = r.latency_s[rows]
    lag = r.lag_s[rows]
    served = outcome == Outcome.OK
    served_latency = latency[served]
    rejected = (outcome == Outcome.SHED) | (outcome == Outcome.QUOTA)
    return Summary(
        name=name,
        start_s=start_s,
        seconds=seconds,
        offered=int(rows.size),
        served=int(served.sum()),
        goodput=int((served_latency <= r.deadline_s[rows][served]).sum()),
        shed=int((outcome == Outcome.SHED).sum()),
        quota=int((outcome == Outcome.QUOTA).sum()),
        timeouts=int((outcome == Outcome.TIMEOUT).sum()),
        errors=int((outcome == Outcome.ERROR).sum()),
        served_texts=int(r.texts[rows][served].sum()),
        latency_p50_ms=_quantile_ms(served_latency, 0.50),
        latency_p95_ms=_quantile_ms(served_latency, 0.95),
        latency_p99_ms=_quantile_ms(served_latency, 0.99),
        rejection_p99_ms=_quantile_ms(latency[rejected], 0.99),
        lag_p99_ms=_quantile_ms(lag, 0.99),
        lag_max_ms=float(lag.max()) * 1000 if lag.size else None,
    )


def summarize(records: Records, duration_s: float, client: ClientStats | None = None) -> Report:
    """Overall, per-class and per-second summaries of a run that lasted ``duration_s``."""
    if duration_s <= 0:
        raise ValueError(f"a run lasts a positive time, not {duration_s}")
    everything = np.arange(len(records))
    overall = _summary(records, everything, "overall", 0.0, duration_s)
    classes = tuple(
        _summary(records, np.flatnonzero(records.class_index == i), name, 0.0, duration_s)
        for i, name in enumerate(records.class_names)
    )
    order = np.argsort(records.intended_s, kind="stable")
    intended = records.intended_s[order]
    timeline = []
    for second in range(math.ceil(duration_s)):
        lo, hi = np.searchsorted(intended, [second, second + 1], side="left")
        seconds = min(1.0, duration_s - second)
        timeline.append(_summary(records, order[lo:hi], f"{second}s", float(second), seconds))
    behind = overall.lag_p99_ms is not None and (
        overall.lag_p99_ms > LAG_P99_LIMIT_S * 1000
        or (overall.lag_max_ms or 0.0) > LAG_MAX_LIMIT_S * 1000
    )
    reasons = Counter(
        records.errors.get(int(i)) or f"status {int(records.status[i])}"
        for i in np.flatnonzero(records.outcome == Outcome.ERROR)
    )
    return Report(
        duration_s=duration_s,
        overall=overall,
        classes=classes,
        timeline=tuple(timeline),
        behind_schedule=behind,
        error_reasons=dict(sorted(reasons.items())),
        client=client,
    )
