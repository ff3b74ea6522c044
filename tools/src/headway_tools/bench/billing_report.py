"""The billing benchmark's figures as a Markdown section (``headway bench billing``), with
each goal beside what was measured and, where one is missed, the figure that says why."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Protocol

from headway_tools.bench.billing import (
    CLIENT,
    CONCURRENT,
    CONSUMER,
    DRAIN_BATCH,
    DRAIN_EVENTS,
    DRAIN_GOAL_PER_S,
    DRAIN_REPEATS,
    E2E_CALL_MS,
    E2E_TIMEOUT_MS,
    FLOOR_COMMITS,
    GATEWAY,
    GOAL_RATE,
    JETSTREAM_POSTGRES,
    LAG_P99_GOAL_S,
    NATS,
    NO_METERING,
    OUTBOX,
    RELAY,
    REPEATS,
    WORKER,
    WRITE_P50_GOAL_S,
    WRITE_P99_GOAL_S,
    BillingResults,
    CpuPoint,
    DrainPoint,
    EndToEnd,
    Spread,
    WritePoint,
    median_and_range,
)
from headway_tools.bench.host import Machine
from headway_tools.bench.stats import fmt_latency, fmt_ms, fmt_rate, markdown_table

SECTION = "billing"
KEPT_UP = 0.95  # of the requests offered answered 200, for a lag to count as at that rate
CHECKER_INTRO = (
    "`headway_tools.bench.checker` on real processes: Postgres and NATS (fsync on), one "
    "synthetic worker, two gateways relaying to JetStream, the consumer; closed-loop "
    "clients post 1-4 texts a request while the consumer, a gateway and NATS are "
    "SIGKILLed and restarted, and copies of stored events are published again without "
    "`Nats-Msg-Id` (only the ledger's primary key can drop them). Then every request id "
    "answered 200 is looked up in the ledger. Lost: a 200 with no row; double-billed: an "
    "id with two rows, or an aggregate that is not the sum of its rows. Billed without a "
    "200 is allowed: the event was durable when the gateway died or the client gave up."
)


def _ms_range(values: tuple[float, float, float]) -> tuple[str, str]:
    median, low, high = values
    return fmt_ms(median), f"{fmt_ms(low)}–{fmt_ms(high)}"


def _met(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _pct(part: float, whole: float) -> str:
    return "n/a" if whole <= 0 else f"{100 * part / whole:.1f}%"


def write_at(results: BillingResults, rate: float) -> WritePoint | None:
    return next((w for w in results.writes if w.rate == rate), None)


def floor_s(results: BillingResults, q: float) -> float:
    """The lone commit's p50 (``q`` 0.5) or p99 (0.99), median over its runs."""
    values = [run.p50_s if q == 0.50 else run.p99_s for run in results.floor]
    return statistics.median(values) if values else math.nan


def write_reason(quantile_name: str, write: WritePoint, floor_s: float, goal_s: float) -> str:
    """Why the durable write's quantile is over its goal: the disk, or the waiting."""
    lone = f"a lone SQLite commit, fsync included, takes {fmt_ms(floor_s)} ms at {quantile_name}"
    if floor_s > goal_s:
        return f"the disk: {lone}, over the goal by itself"
    return (
        f"not the disk alone ({lone}): an event also waits for the commit in flight before "
        f"its own ({write.commits_per_event:.2f} commits per event), and for the writer "
        "thread and the event loop to get a core"
    )


def drain_of(results: BillingResults, pair: str) -> DrainPoint | None:
    return next((d for d in results.drains if d.pair == pair), None)


def goal_rows(results: BillingResults) -> list[list[str]]:
    """One row per goal of the issue: what, the goal, the figure, met or not, and why."""
    rows: list[list[str]] = []
    write = write_at(results, GOAL_RATE)
    if write is not None:
        for quantile_name, (figure, low, high), goal, floor in (
            ("p50", write.p50_s, WRITE_P50_GOAL_S, floor_s(results, 0.50)),
            ("p99", write.p99_s, WRITE_P99_GOAL_S, floor_s(results, 0.99)),
        ):
            rows.append(
                [
                    f"durable write {quantile_name} at {GOAL_RATE:,.0f} events/s",
                    f"≤ {fmt_ms(goal)} ms",
                    f"{fmt_ms(figure)} ms (runs {fmt_ms(low)}–{fmt_ms(high)})",
                    _met(figure <= goal),
                    "" if figure <= goal else write_reason(quantile_name, write, floor, goal),
                ]
            )
    drain = drain_of(results, JETSTREAM_POSTGRES)
    if drain is not None:
        rate, low, high = drain.per_s
        cores = rate * drain.cpu_us_per_event / 1e6
        rows.append(
            [
                "consumer throughput into Postgres",
                f"≥ {DRAIN_GOAL_PER_S:,.0f} events/s",
                f"{fmt_rate(rate)} events/s (runs {fmt_rate(low)}–{fmt_rate(high)})",
                _met(rate >= DRAIN_GOAL_PER_S),
                ""
                if rate >= DRAIN_GOAL_PER_S
                else f"the consumer is CPU-bound: {drain.cpu_us_per_event:,.0f} µs of its own CPU "
                f"per event ({cores:.2f} of a core), beside NATS and Postgres on the same "
                "cores",
            ]
        )
    e2e = next((e for e in results.end_to_end if e.offered_rps == GOAL_RATE), None)
    if e2e is None:
        return rows
    lag = e2e.lag.p99_s
    met = lag <= LAG_P99_GOAL_S and kept_up(e2e)
    rows.append(
        [
            f"billing lag p99 at {e2e.offered_rps:,.0f} req/s",
            f"≤ {LAG_P99_GOAL_S:g} s",
            f"{lag:.2f} s over the {e2e.load.served:,} requests served "
            f"({_pct(e2e.load.served, e2e.load.offered)})",
            _met(met),
            "" if met else lag_reason(e2e, drain_of(results, RELAY)),
        ]
    )
    return rows


def kept_up(e2e: EndToEnd) -> bool:
    """The stack served the rate offered (95% of it answered 200): only then is the lag
    the lag *at* that rate."""
    return e2e.load.served >= KEPT_UP * e2e.load.offered


def lag_reason(e2e: EndToEnd, relay: DrainPoint | None) -> str:
    """Why the billing lag's goal is missed, in the run's own figures."""
    load = e2e.load
    stored = e2e.stream_lag.p99_s
    if not kept_up(e2e):
        return (
            f"the gateway is CPU-bound ({e2e.cores.get(GATEWAY, math.nan):.2f} of a core, "
            f"{e2e.gateway_ms_per_request:.2f} ms of CPU per request served): only "
            f"{_pct(load.served, load.offered)} of the requests answered 200, the rest were "
            "shed or timed out; its relay runs on that same event loop, and "
            f"{stored:.2f} s passed at p99 before JetStream stored an event"
        )
    reason = f"{stored:.2f} s of it at p99 passed before JetStream stored the event"
    if relay is None:
        return reason
    return (
        f"{reason}; the relay moves at most {fmt_rate(relay.per_s[0])} events/s here: NATS "
        "fsyncs every message (`sync_interval: always`) and the relay awaits a batch's "
        "PubAcks before it reads the next"
    )


def write_rows(results: BillingResults) -> list[list[str]]:
    rows = []
    if results.floor:
        p50 = median_and_range([s.p50_s for s in results.floor])
        p99 = median_and_range([s.p99_s for s in results.floor])
        rows.append(
            [
                "one SQLite commit at a time, no outbox (the disk's floor)",
                f"{sum(s.count for s in results.floor):,}",
                "1.00",
                *_ms_range(p50),
                *_ms_range(p99),
                fmt_ms(max(s.max_s for s in results.floor)),
            ]
        )
    for point in results.writes:
        rows.append(
            [
                f"`Outbox.record`, Poisson {point.rate:,.0f} events/s",
                f"{point.events:,}",
                f"{point.commits_per_event:.2f}",
                *_ms_range(point.p50_s),
                *_ms_range(point.p99_s),
                fmt_ms(point.max_s),
            ]
        )
    return rows


def cpu_rows(points: Sequence[CpuPoint]) -> list[list[str]]:
    """Per concurrency: CPU µs per request without and with the outbox, and the difference
    of the medians."""
    rows = []
    for concurrency in sorted({p.concurrency for p in points}):
        without = next(p for p in points if p.concurrency == concurrency and p.sink == NO_METERING)
        with_ = next(p for p in points if p.concurrency == concurrency and p.sink == OUTBOX)
        rows.append(
            [
                "1 at a time" if concurrency == 1 else f"{concurrency} at once",
                f"{without.median_us:,.0f}",
                f"{min(without.cpu_us):,.0f}–{max(without.cpu_us):,.0f}",
                f"{with_.median_us:,.0f}",
                f"{min(with_.cpu_us):,.0f}–{max(with_.cpu_us):,.0f}",
                f"{with_.median_us - without.median_us:+,.0f}",
                f"{with_.commits_per_request:.3f}",
                f"{without.requests + with_.requests:,}",
            ]
        )
    return rows


def drain_rows(points: Sequence[DrainPoint]) -> list[list[str]]:
    rows = []
    for point in points:
        median, low, high = point.per_s
        rows.append(
            [
                point.pair,
                f"{sum(run.events for run in point.runs):,}",
                fmt_rate(median),
                f"{fmt_rate(low)}–{fmt_rate(high)}",
                f"{point.cpu_us_per_event:,.0f}",
                f"{statistics.median(run.seconds for run in point.runs):.2f}",
            ]
        )
    return rows


def _spread_ms(spread: Spread) -> str:
    return f"{spread.p50_s * 1000:,.0f} / {spread.p99_s * 1000:,.0f} / {spread.max_s * 1000:,.0f}"


def _e2e_column(e2e: EndToEnd) -> list[str]:
    load = e2e.load
    return [
        f"{load.offered:,} in {e2e.seconds:g} s",
        f"{fmt_latency(load.lag_p99_ms)} ms, "
        + ("behind schedule" if e2e.behind_schedule else "on schedule"),
        f"{load.served:,} ({_pct(load.served, load.offered)})",
        f"{load.shed:,} / {load.quota:,} / {load.timeouts:,} / {load.errors:,}",
        f"{fmt_latency(load.latency_p50_ms)} / {fmt_latency(load.latency_p99_ms)}",
        f"{e2e.billable_rows:,}",
        f"{e2e.refunded_rows:,}",
        f"{e2e.missing:,}",
        f"{e2e.gateway_ms_per_request:.2f}",
        _spread_ms(e2e.lag),
        _spread_ms(e2e.stream_lag),
        *(f"{e2e.cores.get(name, math.nan):.2f}" for name in CORES),
    ]


CORES = (GATEWAY, WORKER, CONSUMER, NATS, CLIENT)
E2E_ROWS = (
    "requests offered (open loop, Poisson)",
    "the generator's send lag p99",
    "answered 200",
    "answered 503 / 429 / timed out / other",
    "request latency p50 / p99 (ms, 200s)",
    "billable rows in the ledger",
    "refunded (not billable) rows",
    "200s minus billable rows (below 0: served after the client gave up)",
    "gateway CPU per request served (ms)",
    "**billing lag p50 / p99 / max (ms)**",
    "… until JetStream stored it (outbox + relay), ms",
    *(f"cores used: {name}" for name in CORES),
)


def e2e_rows(points: Sequence[EndToEnd]) -> list[list[str]]:
    """One row per figure, one column per offered rate."""
    columns = [_e2e_column(point) for point in points]
    return [[label, *(column[i] for column in columns)] for i, label in enumerate(E2E_ROWS)]


class CheckerFigures(Protocol):
    """What this section reads of ``bench.checker.CheckerReport`` (a seam: its tests need
    no real report)."""

    @property
    def mode(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def events(self) -> int: ...
    @property
    def answered_other(self) -> int: ...
    @property
    def no_answer(self) -> int: ...
    @property
    def kills_by_kind(self) -> Mapping[str, int]: ...
    @property
    def unexpected_exits(self) -> Sequence[str]: ...
    @property
    def duplicates_injected(self) -> int: ...
    @property
    def duplicates_delivered(self) -> int: ...
    @property
    def lost(self) -> int: ...
    @property
    def double_billed(self) -> int: ...
    @property
    def aggregate_problems(self) -> Sequence[str]: ...
    @property
    def refunded_200(self) -> int: ...
    @property
    def wrong_texts(self) -> int: ...
    @property
    def billed_after_error(self) -> int: ...
    @property
    def billed_without_200(self) -> int: ...
    @property
    def settled(self) -> bool: ...
    @property
    def settle_s(self) -> float: ...
    @property
    def ok(self) -> bool: ...


def checker_rows(report: CheckerFigures) -> list[list[str]]:
    """The checker's figures as (what, count) rows."""
    kills = report.kills_by_kind
    return [
        ["load", f"{report.mode} mode, seed {report.seed}, {report.duration_s:.0f} s"],
        ["requests answered 200 (the events to bill)", f"{report.events:,}"],
        ["answered otherwise / no answer", f"{report.answered_other:,} / {report.no_answer:,}"],
        [
            "kills: consumer / gateway / NATS",
            " / ".join(f"{kills.get(kind, 0)}" for kind in ("consumer", "gateway", "nats")),
        ],
        ["unexpected exits", f"{len(report.unexpected_exits)}"],
        [
            "duplicates injected / through the consumer",
            f"{report.duplicates_injected:,} / {report.duplicates_delivered:,}",
        ],
        ["**lost** (a 200 with no row)", f"**{report.lost:,}**"],
        ["**double-billed**", f"**{report.double_billed + len(report.aggregate_problems):,}**"],
        [
            "refunded 200s / wrong texts / billed after an error",
            f"{report.refunded_200} / {report.wrong_texts} / {report.billed_after_error}",
        ],
        ["billed without a 200 (allowed)", f"{report.billed_without_200:,}"],
        ["settled", f"{'yes' if report.settled else 'no'}, after {report.settle_s:.1f} s"],
        ["verdict", "OK" if report.ok else "FAILED"],
    ]


def render(results: BillingResults, machine: Machine, command: str, seconds: float) -> str:
    e2e = results.end_to_end
    rates = " and ".join(f"{point.offered_rps:,.0f}" for point in e2e)
    e2e_seconds = e2e[0].seconds if e2e else math.nan
    parts = [
        "## Billing: the price and the throughput of metering",
        f"Command: `{command}`  \nDate: {machine.date}  \n"
        f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
        f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; Python {machine.python}; "
        f"1-minute load average {machine.load_average:.2f} at start. Every process of every "
        "part (gateway, worker, consumer, NATS, Postgres, load generator) shares these "
        "cores; medians of repeats, with their range.",
        "### Goals",
        markdown_table(["what", "goal", "measured", "", "why"], goal_rows(results), "lllll"),
        "### 1. Latency the durable write adds to a request",
        f"`Outbox.record` on a file in a temporary directory (WAL, `synchronous=FULL`: each "
        "commit is fsynced), one coroutine per event on one event loop, timed from the call "
        f"to its return; {REPEATS} runs of {seconds / REPEATS:g} s per rate. Commits per "
        "event below 1 is the group commit: events arriving while a commit is in flight "
        f"share the next one. The floor is {FLOOR_COMMITS:,} lone commits per run of the "
        "same row, with no outbox and no event loop.",
        markdown_table(
            [
                "writes",
                "events",
                "commits/event",
                "p50 ms",
                "range",
                "p99 ms",
                "range",
                "max ms",
            ],
            write_rows(results),
            "lrrrrrrr",
        ),
        "### 2. Gateway CPU per request, without and with metering",
        "As `headway bench path`: the gateway app called through ASGI in one process, one "
        "1-text embeddings request, its replica a `MockTransport`; quotas and admission on. "
        f"Without: a sink that drops each event (`{NO_METERING}`; the event is still built). "
        "With: the gateway's own `OutboxMetering` on a temporary file. CPU time of the "
        "process (`time.process_time`), so the outbox's writer thread (its SQLite work and "
        f"its fsync calls) counts too. {REPEATS} turns of {seconds / REPEATS:g} s each, the "
        f"two sinks alternating; requests sent one at a time, or {CONCURRENT} at once "
        "(then they share commits). A difference smaller than the ranges is noise.",
        markdown_table(
            [
                "requests",
                "without µs (median)",
                "range",
                "with outbox µs (median)",
                "range",
                "difference µs",
                "commits/request",
                "requests",
            ],
            cpu_rows(results.cpu),
            "lrrrrrrr",
        ),
        "### 3. Relay and consumer throughput",
        f"An outbox file of {DRAIN_EVENTS:,} valid events. Each of {DRAIN_REPEATS} runs: the "
        "gateway's `Relay` publishes a copy of it to a stream of its own on a throw-away "
        "JetStream (file storage, fsync on every message, `Nats-Msg-Id` set) until every "
        "PubAck is in; then the billing `Consumer` drains that stream from empty (batches "
        f"of {DRAIN_BATCH}, one Postgres transaction each, acks after the commit) into a "
        "fresh database (Postgres, fsync on), timed from the first fetch to the last "
        "commit. The embedded pair reads another copy of the outbox into an SQLite ledger. "
        "CPU µs/event is this process's own (the relay's or the consumer's), not NATS's or "
        "Postgres's.",
        markdown_table(
            ["from → to", "events", "events/s (median)", "range", "CPU µs/event", "s"],
            drain_rows(results.drains),
            "lrrrrr",
        ),
        "### 4. End-to-end billing lag",
        "Processes as `headway up` starts them, on a throw-away NATS and Postgres: one "
        f"synthetic worker ({E2E_CALL_MS:g} ms a call, nothing per text), one gateway "
        "(outbox, relay to JetStream) and the billing consumer (JetStream → Postgres). "
        f"A fresh stack per rate; after a warm-up, the load generator offers {rates} 1-text "
        f"requests/s for {e2e_seconds:g} s (deadline {E2E_TIMEOUT_MS:,} ms); then, once the ledger "
        "holds an event for every 200, the lag of each of the run's events is its "
        "`recorded_at` (the consumer's clock when its batch's transaction began) minus its "
        "`at` (the gateway's clock when it finished the request); its first part, until "
        "JetStream stored the event, is read back from the stream (its store time minus "
        "`at`). Cores: CPU seconds per "
        "second of each process over the run (the client is the load generator); "
        "Postgres's are not counted. A lag counts as the lag at a rate only when at least "
        f"{KEPT_UP:.0%} of the requests offered answered 200.",
        markdown_table(
            ["", *(f"{point.offered_rps:,.0f} req/s" for point in e2e)],
            e2e_rows(e2e),
            "l" + "r" * len(e2e),
        ),
        "### 5. Lost and double-billed events (the checker)",
    ]
    if isinstance(results.checker, str):
        parts.append(f"Not run: {results.checker}.")
    else:
        parts.append(CHECKER_INTRO)
        parts.append(markdown_table(["", "count"], checker_rows(results.checker), "lr"))
    return "\n\n".join(parts)
