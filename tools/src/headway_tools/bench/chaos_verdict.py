"""What the chaos run counts as wrong: pure functions of what the clients saw and what the
ledger, the output file and the quota's settings say (``bench/chaos.py`` gathers them).

    billing      every request answered 200 has exactly one billable ledger row with the
                 texts it sent (``lost``, ``refunded_200``, ``wrong_texts``); no request is
                 counted twice (``double_billed``: ids with more than one row, plus requests
                 the hourly aggregates count beyond the billable rows); nothing answered
                 with an error is billed. A billable row for a request with no answer (the
                 client timed out, the gateway died after the event was durable) is allowed
                 and counted (``billed_without_200``).
    batch lines  every input line's ``custom_id`` is in the output (or error) file exactly
                 once, and each answered line is billed once under its own request id.
    quota        a tenant is granted at most the documented bound (docs/tenants.md "Quotas",
                 ``gateway/quota/fallback.py``): ``burst + rate × window`` (the contract)
                 plus two bursts per Redis outage (the gateways' local shares start full,
                 and a Redis that restarts empty holds full buckets), plus ``burst / N``
                 for each gateway that starts while Redis is away (its local share starts
                 full too), plus ``rate / N`` for each second a gateway limited locally
                 while Redis answered (after it came back, until the gateway's next probe;
                 read from the gateways' logs: ``local_periods``).
    deadline     the share of each interactive tenant's requests answered 200 within
                 its deadline, its own quota's 429s left out (they are the contract).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal


@dataclass(frozen=True, slots=True)
class LedgerRow:
    request_id: str
    tenant: str
    billable: bool
    texts: int


@dataclass(frozen=True, slots=True)
class BillingVerdict:
    answered_200: int
    billable_rows: int
    lost: tuple[str, ...]
    refunded_200: tuple[str, ...]
    wrong_texts: tuple[str, ...]
    double_billed: int
    billed_after_error: tuple[str, ...]
    billed_without_200: int

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.refunded_200
            or self.wrong_texts
            or self.double_billed
            or self.billed_after_error
        )


def billing_verdict(
    answered_200: Mapping[str, int],
    answered_error: Iterable[str],
    rows: Sequence[LedgerRow],
    aggregated_requests: int,
) -> BillingVerdict:
    """``answered_200``: request id → texts sent; ``aggregated_requests``: what the hourly
    aggregates count over the same tenants (an event aggregated twice shows there)."""
    by_id: dict[str, LedgerRow] = {}
    repeats = 0
    for row in rows:
        if row.request_id in by_id:
            repeats += 1
        by_id[row.request_id] = row
    billable = sum(1 for row in rows if row.billable)
    lost = tuple(sorted(i for i in answered_200 if i not in by_id))
    refunded = tuple(sorted(i for i in answered_200 if i in by_id and not by_id[i].billable))
    wrong = tuple(
        sorted(i for i, texts in answered_200.items() if i in by_id and by_id[i].texts != texts)
    )
    errors = set(answered_error)
    after_error = tuple(sorted(i for i in errors if i in by_id and by_id[i].billable))
    without = sum(
        1 for i, row in by_id.items() if row.billable and i not in answered_200 and i not in errors
    )
    return BillingVerdict(
        answered_200=len(answered_200),
        billable_rows=billable,
        lost=lost,
        refunded_200=refunded,
        wrong_texts=wrong,
        double_billed=repeats + max(0, aggregated_requests - billable),
        billed_after_error=after_error,
        billed_without_200=without,
    )


@dataclass(frozen=True, slots=True)
class LineVerdict:
    lines: int
    in_output: int
    in_errors: int
    missing: tuple[str, ...]
    """Input lines in neither file."""
    duplicated: tuple[str, ...]
    """``custom_id`` s found more than once over both files."""
    unknown: tuple[str, ...]
    """``custom_id`` s in a file that no input line has."""
    unbilled: tuple[str, ...]
    """Lines in the output file with no billable ledger row."""
    billed_errors: tuple[str, ...]
    """Lines in the error file that were billed."""

    @property
    def ok(self) -> bool:
        return not (
            self.missing or self.duplicated or self.unknown or self.unbilled or self.billed_errors
        )


def line_verdict(
    request_ids: Mapping[str, str],
    output_ids: Sequence[str],
    error_ids: Sequence[str],
    billed: Iterable[str],
) -> LineVerdict:
    """``request_ids``: each input line's ``custom_id`` → the request id it is billed under
    (``batches.model.line_request_id``); ``output_ids`` / ``error_ids``: the ``custom_id`` of
    every line of the two files, in order; ``billed``: request ids with a billable row."""
    seen = Counter([*output_ids, *error_ids])
    billed_ids = set(billed)
    return LineVerdict(
        lines=len(request_ids),
        in_output=len(output_ids),
        in_errors=len(error_ids),
        missing=tuple(sorted(c for c in request_ids if c not in seen)),
        duplicated=tuple(sorted(c for c, count in seen.items() if count > 1)),
        unknown=tuple(sorted(c for c in seen if c not in request_ids)),
        unbilled=tuple(
            sorted(
                c for c in set(output_ids) if c in request_ids and request_ids[c] not in billed_ids
            )
        ),
        billed_errors=tuple(
            sorted(c for c in set(error_ids) if c in request_ids and request_ids[c] in billed_ids)
        ),
    )


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    tenant: str
    granted_texts: int
    contract_texts: float
    """``burst + rate × window``."""
    allowance_texts: float
    """The contract plus the documented extra for the outages (the module docstring)."""
    refused: int
    """Requests answered 429 (the bucket was really binding)."""

    @property
    def ok(self) -> bool:
        return self.granted_texts <= self.allowance_texts

    @property
    def granted_over_contract(self) -> float:
        return self.granted_texts / self.contract_texts if self.contract_texts else 0.0


def quota_allowance(
    rate_texts_per_s: float,
    burst_texts: float,
    window_s: float,
    redis_outages: int,
    gateway_starts_in_outage: int,
    gateways: int,
    local_while_up_s: float = 0.0,
) -> tuple[float, float]:
    """(contract, allowance) in texts over ``window_s`` (the module docstring)."""
    contract = burst_texts + rate_texts_per_s * window_s
    extra = 2 * burst_texts * redis_outages + burst_texts / gateways * gateway_starts_in_outage
    extra += rate_texts_per_s / gateways * local_while_up_s
    return contract, contract + extra


LOCAL_ENTERED = "quota store unavailable"
LOCAL_LEFT = "quota store is back"
_QUOTA_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ [\w.]+\[(\d+)\]: (.*)$", re.MULTILINE
)


def local_periods(log: str, end: float) -> list[tuple[float, float]]:
    """The (start, end) wall-clock times a gateway limited locally, from its log (text
    format, every life of the gateway appended): from a line saying it entered local mode
    to the next saying it left, or to the first line of its next life (a kill), or to
    ``end`` (still local when the run ended)."""
    periods: list[tuple[float, float]] = []
    entered: tuple[str, float] | None = None  # (pid, since)
    for match in _QUOTA_LINE.finditer(log):
        stamp, pid, message = match.groups()
        at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if entered is not None and (pid != entered[0] or message.startswith(LOCAL_LEFT)):
            periods.append((entered[1], at))
            entered = None
        if entered is None and message.startswith(LOCAL_ENTERED):
            entered = (pid, at)
    if entered is not None:
        periods.append((entered[1], max(end, entered[1])))
    return periods


def seconds_outside(
    periods: Sequence[tuple[float, float]], away: Sequence[tuple[float, float]]
) -> float:
    """How long ``periods`` last outside every one of ``away`` (disjoint): the seconds a
    gateway limited locally while Redis answered."""
    total = 0.0
    for start, end in periods:
        overlap = sum(max(0.0, min(end, a_end) - max(start, a_start)) for a_start, a_end in away)
        total += end - start - overlap
    return total


def quota_verdict(
    tenant: str,
    granted_texts: int,
    refused: int,
    rate_texts_per_s: float,
    burst_texts: float,
    window_s: float,
    redis_outages: int,
    gateway_starts_in_outage: int,
    gateways: int,
    local_while_up_s: float = 0.0,
) -> QuotaVerdict:
    contract, allowance = quota_allowance(
        rate_texts_per_s,
        burst_texts,
        window_s,
        redis_outages,
        gateway_starts_in_outage,
        gateways,
        local_while_up_s,
    )
    return QuotaVerdict(tenant, granted_texts, contract, allowance, refused)


@dataclass(frozen=True, slots=True)
class DeadlineShare:
    tenant: str
    sent: int
    in_deadline: int
    """Answered 200 within the deadline."""
    over_quota: int
    """Answered 429: the tenant's own quota, left out of the share."""

    @property
    def share(self) -> float:
        counted = self.sent - self.over_quota
        return self.in_deadline / counted if counted else 0.0


def deadline_share(
    tenant: str, outcomes: Iterable[tuple[int | None, float]], deadline_s: float
) -> DeadlineShare:
    """``outcomes``: (status, or None for no answer; seconds from send to answer)."""
    sent = in_deadline = over_quota = 0
    for status, seconds in outcomes:
        sent += 1
        if status == 200 and seconds <= deadline_s:
            in_deadline += 1
        elif status == 429:
            over_quota += 1
    return DeadlineShare(tenant, sent, in_deadline, over_quota)


@dataclass(frozen=True, slots=True)
class Window:
    """One slice of the run: the interactive requests sent in it and the steps begun."""

    start_s: float
    sent: int
    in_deadline: int
    over_quota: int
    no_answer: int
    steps: tuple[str, ...]

    @property
    def share(self) -> float:
        counted = self.sent - self.over_quota
        return self.in_deadline / counted if counted else 0.0


def timeline(
    sends: Iterable[tuple[float, int | None, float]],
    steps: Sequence[ChaosStep],
    deadline_s: float,
    window_s: float = 10.0,
) -> list[Window]:
    """``sends``: (seconds after the chaos began, status or None, seconds to the answer)
    of every interactive request, all tenants; one ``Window`` per ``window_s`` from 0 to the
    last send, each with the steps that began in it (``"kill redis"``)."""
    if window_s <= 0:
        raise ValueError("window_s must be positive")
    counts: dict[int, list[int]] = {}
    for at_s, status, seconds in sends:
        row = counts.setdefault(int(max(0.0, at_s) // window_s), [0, 0, 0, 0])
        row[0] += 1
        row[1] += status == 200 and seconds <= deadline_s
        row[2] += status == 429
        row[3] += status is None
    if not counts:
        return []
    named: dict[int, list[str]] = {}
    for step in steps:
        named.setdefault(int(step.at_s // window_s), []).append(f"{step.action} {step.target}")
    windows = []
    for index in range(max(counts) + 1):
        sent, in_deadline, over_quota, no_answer = counts.get(index, [0, 0, 0, 0])
        steps_begun = tuple(named.get(index, ()))
        windows.append(
            Window(index * window_s, sent, in_deadline, over_quota, no_answer, steps_begun)
        )
    return windows


Action = Literal["kill", "restart"]


@dataclass(frozen=True, slots=True, order=True)
class ChaosStep:
    at_s: float
    """Seconds after the chaos starts; a step begins no earlier than the last one ended."""
    target: str
    action: Action
    """``kill``: SIGKILL; ``restart``: SIGTERM, wait for the exit, start again."""
    down_s: float
    """How long it stays down before it is started again."""

    def describe(self) -> str:
        return f"{self.at_s:6.1f} s  {self.action:<7} {self.target} (down {self.down_s:.1f} s)"


def chaos_plan(
    seed: int,
    window_s: float,
    targets: Sequence[str],
    every_s: tuple[float, float] = (2.0, 5.0),
    down_s: tuple[float, float] = (0.2, 2.0),
) -> list[ChaosStep]:
    """A seeded plan: one step every ``every_s`` (uniform) while inside ``window_s``, each
    killed or restarted (even odds), down ``down_s`` (uniform). Targets come in rounds,
    each a random order of all of them, so a plan of ``len(targets)`` steps has hit every
    one. The same seed and targets give the same plan: a failing run is replayed by its
    seed."""
    if not targets:
        raise ValueError("a chaos plan needs targets")
    if window_s <= 0 or min(*every_s, *down_s) < 0 or every_s[1] <= 0:
        raise ValueError("the chaos window and intervals must be positive")
    rng = random.Random(seed)
    steps: list[ChaosStep] = []
    turn: list[str] = []
    at_s = rng.uniform(*every_s)
    while at_s < window_s:
        if not turn:
            turn = rng.sample(list(targets), len(targets))
        action: Action = "kill" if rng.random() < 0.5 else "restart"
        steps.append(ChaosStep(at_s, turn.pop(), action, rng.uniform(*down_s)))
        at_s += rng.uniform(*every_s)
    return steps


__all__ = [
    "BillingVerdict",
    "ChaosStep",
    "DeadlineShare",
    "LedgerRow",
    "LineVerdict",
    "QuotaVerdict",
    "Window",
    "billing_verdict",
    "chaos_plan",
    "deadline_share",
    "line_verdict",
    "local_periods",
    "quota_allowance",
    "quota_verdict",
    "seconds_outside",
    "timeline",
]
