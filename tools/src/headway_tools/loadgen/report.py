"""A run's ``Report`` as a plain-text table, or as a JSON-able dict (and back).

The dict holds every ``Summary`` field plus its rates (``offered_rps``,
``served_rps``, ``goodput_rps``, ``served_texts_per_s``) for readers; ``from_json``
ignores the rates, so ``from_json(to_json(report)) == report``. Missing
percentiles are ``null``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from headway_tools.loadgen.errors import MalformedReport
from headway_tools.loadgen.recorder import (
    LAG_MAX_LIMIT_S,
    LAG_P99_LIMIT_S,
    ClientStats,
    Report,
    Summary,
)

_RATES = ("offered_rps", "served_rps", "goodput_rps", "served_texts_per_s")
_SUMMARY_FIELDS = tuple(f.name for f in dataclasses.fields(Summary))
_CLIENT_FIELDS = tuple(f.name for f in dataclasses.fields(ClientStats))


def _summary_json(summary: Summary) -> dict[str, Any]:
    out = dataclasses.asdict(summary)
    out.update({name: getattr(summary, name) for name in _RATES})
    return out


def to_json(report: Report) -> dict[str, Any]:
    client = report.client
    return {
        "duration_s": report.duration_s,
        "behind_schedule": report.behind_schedule,
        "overall": _summary_json(report.overall),
        "classes": [_summary_json(s) for s in report.classes],
        "timeline": [_summary_json(s) for s in report.timeline],
        "error_reasons": dict(report.error_reasons),
        "client": None
        if client is None
        else {**dataclasses.asdict(client), "cpu_us_per_request": client.cpu_us_per_request},
    }


def _summary_from(data: Mapping[str, Any]) -> Summary:
    return Summary(**{name: data[name] for name in _SUMMARY_FIELDS})


def from_json(data: Mapping[str, Any]) -> Report:
    """The ``Report`` that ``to_json`` wrote."""
    try:
        client = data["client"]
        return Report(
            duration_s=data["duration_s"],
            overall=_summary_from(data["overall"]),
            classes=tuple(_summary_from(s) for s in data["classes"]),
            timeline=tuple(_summary_from(s) for s in data["timeline"]),
            behind_schedule=data["behind_schedule"],
            error_reasons=dict(data["error_reasons"]),
            client=None
            if client is None
            else ClientStats(**{name: client[name] for name in _CLIENT_FIELDS}),
        )
    except (KeyError, TypeError) as exc:
        raise MalformedReport(f"not a load report: {exc!r}") from exc


# -- text -------------------------------------------------------------------------

_COLUMNS = (
    "",
    "offered",
    "served",
    "goodput",
    "shed",
    "quota",
    "timeout",
    "error",
    "goodput/s",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "rej p99",
    "texts/s",
    "lag p99",
)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def _row(summary: Summary) -> list[str]:
    s = summary
    return [
        s.name,
        str(s.offered),
        str(s.served),
        str(s.goodput),
        str(s.shed),
        str(s.quota),
        str(s.timeouts),
        str(s.errors),
        _rate(s.goodput_rps),
        _ms(s.latency_p50_ms),
        _ms(s.latency_p95_ms),
        _ms(s.latency_p99_ms),
        _ms(s.rejection_p99_ms),
        _rate(s.served_texts_per_s),
        _ms(s.lag_p99_ms),
    ]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def render_text(report: Report) -> str:
    """A header, the overall and per-class table, then the per-second timeline."""
    lines = []
    client = report.client
    if client is not None:
        cpu = client.cpu_us_per_request
        lines.append(
            f"target {client.target}  {report.duration_s:g} s  {client.arrivals} arrivals  "
            f"{client.requests} requests  connections {client.connections_opened} "
            f"(peak {client.peak_connections}, failed {client.connect_failures}, "
            f"requests that waited for one {client.waited_for_connection})  "
            f"client cpu {'-' if cpu is None else f'{cpu:.0f}'} µs/request"
        )
    overall = report.overall
    lag = f"lag p99 {_ms(overall.lag_p99_ms)} ms, max {_ms(overall.lag_max_ms)} ms"
    if report.behind_schedule:
        lines.append(
            f"BEHIND SCHEDULE ({lag}; limits: p99 {LAG_P99_LIMIT_S * 1000:g} ms, "
            f"max {LAG_MAX_LIMIT_S * 1000:g} ms): the load offered was less than asked"
        )
    else:
        lines.append(f"schedule kept ({lag})")
    lines.append("latencies in ms from each request's intended send time; rej = 503/429")
    lines.append("")
    lines += _table([_COLUMNS, _row(overall), *(_row(s) for s in report.classes)])
    lines.append("")
    lines += _table([("second", *_COLUMNS[1:]), *(_row(s) for s in report.timeline)])
    if report.error_reasons:
        lines.append("")
        lines.append("errors:")
        lines += [f"  {count:>7}  {reason}" for reason, count in report.error_reasons.items()]
    return "\n".join(lines) + "\n"
