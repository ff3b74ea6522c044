"""The rule of what the executor's token may run: one line of a live batch, as its
tenant, with its key, under that line's own request id."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from headway.batches.model import Batch, RequestCounts, line_request_id
from headway.gateway.lines.claims import LineClaim, LiveBatches, claim_refusal
from tests.fakes import FakeClock

LIVE = Batch(
    "batch_1",
    7,
    "acme",
    "ab" * 8,
    "/v1/embeddings",
    "file-in",
    "24h",
    "in_progress",
    100,
    100 + 86400,
    counts=RequestCounts(total=3),
)


def claim(line: int = 2, **changes: object) -> LineClaim:
    base = LineClaim("batch_1", line, 7, "ab" * 8, line_request_id("batch_1", line))
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_line_of_a_live_batch_with_its_own_request_id_may_run() -> None:
    assert claim_refusal(LIVE, claim()) is None
    assert claim_refusal(LIVE, claim(line=3)) is None


def test_every_part_of_the_claim_must_match_the_batch() -> None:
    refusals = {
        "no batch": claim_refusal(None, claim()),
        "other tenant": claim_refusal(LIVE, claim(tenant_id=8)),
        "other key": claim_refusal(LIVE, claim(key_id="cd" * 8)),
        "line 0": claim_refusal(LIVE, claim(line=0, request_id=line_request_id("batch_1", 0))),
        "past the end": claim_refusal(
            LIVE, claim(line=4, request_id=line_request_id("batch_1", 4))
        ),
        "a chosen request id": claim_refusal(LIVE, claim(request_id="ee" * 16)),
        "another line's id": claim_refusal(LIVE, claim(request_id=line_request_id("batch_1", 1))),
    }
    assert all(refusals.values()), refusals
    # Another tenant's batch is not told apart from no batch at all.
    assert refusals["other tenant"] == claim_refusal(None, claim(tenant_id=8))


def test_only_a_running_batch_runs_lines() -> None:
    for status in ("finalizing", "cancelling", "completed", "cancelled", "failed", "expired"):
        refusal = claim_refusal(replace(LIVE, status=status), claim())  # type: ignore[arg-type]
        assert refusal is not None and status in refusal


def test_a_validating_batch_runs_its_first_lines_queued_before_its_move() -> None:
    """The mover queues lines, then moves the batch to in_progress (with its total): a
    line that arrives in between runs; the total bounds lines only once it is known."""
    validating = replace(LIVE, status="validating", counts=RequestCounts())
    assert claim_refusal(validating, claim(line=3)) is None
    assert claim_refusal(validating, claim(request_id="ee" * 16)) is not None
    assert claim_refusal(replace(validating, key_id="cd" * 8), claim()) is not None


class Store:
    def __init__(self, batch: Batch | None) -> None:
        self.batch, self.reads = batch, 0

    def batch_by_id(self, batch_id: str) -> Batch | None:
        self.reads += 1
        return self.batch


def test_a_live_batch_is_read_once_a_ttl_and_one_not_live_every_time() -> None:
    clock = FakeClock(now=0.0)
    store = Store(replace(LIVE, status="cancelling"))
    live = LiveBatches(store, ttl_s=1.0, clock=clock)  # type: ignore[arg-type]
    assert asyncio.run(live.refusal(claim())) is not None
    store.batch = LIVE  # found running: its line runs at once (not cached as refused)
    assert asyncio.run(live.refusal(claim())) is None
    assert asyncio.run(live.refusal(claim(line=3))) is None
    assert store.reads == 2
    store.batch = replace(LIVE, status="cancelling")
    clock.now = 1.5  # the ttl passed: read again, and refused
    assert asyncio.run(live.refusal(claim())) is not None
    assert store.reads == 3
