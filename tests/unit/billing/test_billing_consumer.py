"""The consumer's loop with a memory source and ledger: exactly once, dead letters, retries."""

from __future__ import annotations

import msgspec
import pytest

from headway.billing.consumer import Consumer, split
from headway.billing.ledger.base import Applied, DeadLetter
from headway.billing.ledger.memory import MemoryLedger
from headway.billing.sources.base import Delivery, MemorySource
from headway.metering.event import LEGACY_TENANT_ID, UsageEvent, decode, encode
from tests.builders import schema_1, usage_event


def delivery(data: bytes, n: int) -> Delivery:
    return Delivery(data, f"test #{n}", None, n)


class Recorder:
    def __init__(self) -> None:
        self.applied: list[Applied] = []
        self.lags: list[float] = []
        self.failures = 0
        self.source_failures: list[str] = []

    def committed(self, applied, lags_s):
        self.applied.append(applied)
        self.lags.extend(lags_s)

    def apply_failed(self):
        self.failures += 1

    def source_failed(self, step):
        self.source_failures.append(step)

    def pending(self, events):
        pass


async def test_duplicates_and_replays_change_nothing_and_garbage_is_a_dead_letter():
    events = [usage_event(f"r{i}", texts=i + 1) for i in range(5)]
    stream = [delivery(encode(e), i) for i, e in enumerate(events)]
    stream += [delivery(encode(events[1]), 5), delivery(b"{not json", 6)]
    stream += [delivery(encode(e), 7 + i) for i, e in enumerate(events)]  # a replay
    source, ledger, seen = MemorySource(stream), MemoryLedger(), Recorder()
    consumer = Consumer(
        source, ledger, batch_events=4, observer=seen, wall_clock=lambda: events[0].at + 2
    )
    while await consumer.step() is not None:
        pass
    assert source.acked == stream
    assert await ledger.counts() == {"processed": 5, "billable": 5, "dead": 1}
    assert sum(a.new for a in seen.applied) == 5
    assert sum(a.duplicates for a in seen.applied) == 6
    [row] = await ledger.hours(0, 2**33, None)
    assert (row.requests, row.texts) == (5, 1 + 2 + 3 + 4 + 5)
    assert await ledger.check_aggregates() == []
    assert seen.lags and all(abs(lag - 2) < 1e-9 for lag in seen.lags[:5])


async def test_a_failing_ledger_holds_the_batch_unacked_until_it_commits():
    class Flaky(MemoryLedger):
        fails = 3

        async def apply(self, events: list[UsageEvent], dead: list[DeadLetter]) -> Applied:
            if self.fails:
                self.fails -= 1
                assert not source.acked  # nothing acknowledged while the write fails
                raise ConnectionError("database away")
            return await super().apply(events, dead)

    source = MemorySource([delivery(encode(usage_event("r1")), 1)])
    ledger, seen = Flaky(), Recorder()
    consumer = Consumer(source, ledger, observer=seen, max_backoff_s=0.001)
    applied = await consumer.step()
    assert applied is not None and applied.new == 1
    assert seen.failures == 3 and len(source.acked) == 1
    assert (await ledger.counts())["processed"] == 1


async def test_an_empty_source_is_none():
    assert await Consumer(MemorySource(), MemoryLedger()).step() is None


def test_an_event_with_a_nul_character_is_malformed():
    import pytest

    from headway.metering.event import MalformedEvent, decode

    with pytest.raises(MalformedEvent, match="NUL"):
        decode(encode(usage_event("r\x00")))
    assert decode(encode(usage_event("r1"))).request_id == "r1"


async def test_a_failed_fetch_or_ack_is_counted_and_the_consumer_carries_on():
    class Flaky(MemorySource):
        fetch_fails, ack_fails = 1, 1

        async def fetch(self, max_events, timeout_s):
            if self.fetch_fails:
                self.fetch_fails -= 1
                raise ConnectionError("nats away")
            return await super().fetch(max_events, timeout_s)

        async def ack(self, deliveries):
            if self.ack_fails:
                self.ack_fails -= 1
                self.waiting[:0] = deliveries  # not acked: it comes again
                raise ConnectionError("nats away")
            await super().ack(deliveries)

    source, ledger, seen = (
        Flaky([delivery(encode(usage_event("r1")), 1)]),
        MemoryLedger(),
        Recorder(),
    )
    consumer = Consumer(source, ledger, observer=seen, fetch_wait_s=0.001)
    assert await consumer.step() is None  # the fetch failed
    first = await consumer.step()  # committed; the ack failed
    again = await consumer.step()  # delivered again: a duplicate
    assert seen.source_failures == ["fetch", "ack"]
    assert (first.new, again.new, again.duplicates) == (1, 0, 1)
    assert len(source.acked) == 1 and (await ledger.counts())["processed"] == 1


async def test_an_event_written_before_tenant_ids_is_billed_under_its_name_not_lost():
    old = usage_event("old", tenant="acme", texts=3)
    new = usage_event("new", tenant="acme", tenant_id=7, texts=2)
    stream = [delivery(schema_1(old), 1), delivery(encode(new), 2)]
    source, ledger = MemorySource(stream), MemoryLedger()
    applied = await Consumer(source, ledger).step()
    assert applied == Applied(new=2, duplicates=0, dead=0) and source.acked == stream
    rows = await ledger.hours(0, 2**33, None)
    assert [(row.tenant_id, row.tenant, row.texts) for row in rows] == [
        (LEGACY_TENANT_ID, "acme", 3),
        (7, "acme", 2),
    ]
    assert decode(schema_1(old)) == msgspec.structs.replace(old, tenant_id=0, schema=1)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"tenant_id": None}, "tenant_id"),  # a current event without its id
        ({"tenant_id": 0}, "tenant_id 0 in an event of schema 2"),
        ({"tenant_id": 5, "schema": 1}, "tenant_id 5 in an event of schema 1"),
        ({"tenant_id": -1}, "tenant_id"),
        ({"tenant_id": "1"}, "tenant_id"),
        ({"tenant_id": None, "schema": 3}, "tenant_id"),
    ],
)
def test_an_event_whose_tenant_id_does_not_fit_its_schema_is_a_dead_letter(fields, says):
    raw = msgspec.structs.asdict(usage_event("r1"))
    raw.update(fields)
    if fields.get("tenant_id", 1) is None:
        del raw["tenant_id"]
    events, dead = split([delivery(msgspec.json.encode(raw), 1)])
    assert events == [] and len(dead) == 1
    assert says in dead[0].reason
