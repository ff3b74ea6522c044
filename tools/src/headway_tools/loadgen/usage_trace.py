"""A trace from production: the ledger's per-request usage rows → a replayable trace.

The embedded ledger (``<data dir>/ledger.sqlite3``, written by ``headway run billing``
or ``headway up``) keeps one ``processed_requests`` row per usage event: tenant,
endpoint, the model name asked for, tier, texts, real tokens, and ``at`` (when the
gateway finished) with ``total_s`` (how long it took). A request arrived at
``at - total_s``; its offset is that arrival less the first one's. The file is opened
read-only, so a running billing consumer is undisturbed.

What a usage row does not hold, the trace approximates, and says so here:

- **lengths**: only the request's total tokens are metered. Each text is given an even
  share of the words, ``tokens - 2 × texts`` (a text costs ``[CLS]`` and ``[SEP]``
  besides its words, and the load generator's words are one token each), at least one;
  for rerank the query's tokens are counted in too, so its documents come out longer.
- **deadlines**: the ``X-Timeout-Ms`` a caller sent is not metered; each tier gets one
  (``timeouts_ms``).
- **refused requests**: only requests that did work on our side have a usage event. A
  request refused before its quota was charged (401, 429, a fast 503) is missing, so
  a trace of an overload offers less than the overload did.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from headway_tools.loadgen.errors import InvalidSpec
from headway_tools.loadgen.trace import ENDPOINTS, Trace, TraceRequest, default_duration

SPECIAL_TOKENS = 2  # [CLS] and [SEP], around every text
DEFAULT_TIMEOUTS_MS: Mapping[str, int] = {"interactive": 1000, "batch": 10_000}

_SELECT = (
    "SELECT tenant, endpoint, alias, tier, texts, tokens, at - total_s AS arrived"
    " FROM processed_requests WHERE texts > 0 AND at - total_s >= ? AND at - total_s < ?"
)


@dataclass(frozen=True, slots=True)
class UsageTrace:
    """The trace, and how many of the rows it read had to be left out (and why)."""

    trace: Trace
    rows: int
    skipped: Mapping[str, int]


def split_words(tokens: int, texts: int) -> tuple[int, ...]:
    """``texts`` lengths in words that add up to ``tokens`` less the special tokens."""
    words = max(texts, tokens - SPECIAL_TOKENS * texts)
    share, extra = divmod(words, texts)
    return tuple(share + (i < extra) for i in range(texts))


def trace_from_ledger(
    path: Path,
    *,
    start: float = 0.0,
    end: float = float("inf"),
    tenants: Collection[str] = (),
    timeouts_ms: Mapping[str, int] = DEFAULT_TIMEOUTS_MS,
) -> UsageTrace:
    """The requests that arrived in ``[start, end)`` (unix seconds), of ``tenants`` (all
    when empty), as a trace that starts at the first of them."""
    if not path.is_file():
        raise InvalidSpec(f"{path}: no ledger file there")
    query = _SELECT
    parameters: list[object] = [start, end]
    if tenants:
        query += f" AND tenant IN ({', '.join('?' * len(tenants))})"
        parameters += sorted(tenants)
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = db.execute(query + " ORDER BY arrived, rowid", parameters).fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise InvalidSpec(f"{path}: cannot read its usage rows: {exc}") from exc
    requests = []
    skipped: dict[str, int] = {}
    first = rows[0][6] if rows else 0.0
    for tenant, endpoint, alias, tier, texts, tokens, arrived in rows:
        reason = _unusable(endpoint, tier, timeouts_ms)
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        requests.append(
            TraceRequest(
                offset_s=arrived - first,
                tenant=tenant,
                lengths=split_words(tokens, texts),
                timeout_ms=timeouts_ms[tier],
                endpoint=endpoint,
                model=alias,
            )
        )
    if not requests:
        raise InvalidSpec(f"{path}: no usage rows to make a trace of in that range")
    trace = Trace(tuple(requests), default_duration(requests[-1].offset_s))
    return UsageTrace(trace, len(rows), skipped)


def _unusable(endpoint: str, tier: str, timeouts_ms: Mapping[str, int]) -> str:
    if endpoint not in ENDPOINTS:
        return f"endpoint {endpoint}"
    if tier not in timeouts_ms:
        return f"tier {tier} (no timeout given for it)"
    return ""
