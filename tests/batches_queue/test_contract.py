"""Both work queues through one contract: delivery, leases, naks, touches, duplicates,
drops, concurrent pullers, reopening, depth, and fairness across tenants (round robin,
within the puller's room); each test runs on SQLite and JetStream."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from headway.batches.queue import Delivery, Room, WorkItem, WorkQueue, WorkQueueError
from tests.batches_queue.conftest import OpenQueue

SHORT_LEASE_S = 1.0
LONG_LEASE_S = 30.0
IDS = {"acme": 1, "t1": 2, "t2": 3, "t3": 4, "big": 5, "small": 6, "a": 7, "b": 8}
"""Each test tenant's id: what an item names its tenant by."""


def items(
    batch_id: str, count: int, tenant: str = "acme", tenant_id: int | None = None
) -> list[WorkItem]:
    """``tenant_id`` None: the tenant's usual id."""
    owner = IDS[tenant] if tenant_id is None else tenant_id
    return [WorkItem(batch_id, line, owner, tenant) for line in range(1, count + 1)]


async def pull_at_least(queue: WorkQueue, count: int, timeout_s: float = 10.0) -> list[Delivery]:
    deadline = time.monotonic() + timeout_s
    deliveries: list[Delivery] = []
    while len(deliveries) < count:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{len(deliveries)} of {count} deliveries in {timeout_s} s"
        deliveries += await queue.pull(count - len(deliveries), min(remaining, 1.0))
    return deliveries


def keys(deliveries: list[Delivery]) -> list[tuple[str, int]]:
    return [(d.item.batch_id, d.item.line) for d in deliveries]


async def test_put_pull_ack_then_nothing_comes_back(open_queue: OpenQueue) -> None:
    queue = open_queue(SHORT_LEASE_S)
    assert queue.lease_s == SHORT_LEASE_S
    await queue.put(items("batch_a", 3, tenant="t1"))
    got = await pull_at_least(queue, 3)
    assert sorted(keys(got)) == [("batch_a", 1), ("batch_a", 2), ("batch_a", 3)]
    assert {d.item.tenant for d in got} == {"t1"}
    assert [d.attempts for d in got] == [1, 1, 1]
    for delivery in got:
        await delivery.ack()
    assert await queue.depth() == 0
    assert await queue.pull(10, 2.5 * SHORT_LEASE_S) == []  # past the lease: nothing again


async def test_pull_on_an_empty_queue_waits_then_answers_nothing(open_queue: OpenQueue) -> None:
    queue = open_queue(LONG_LEASE_S)
    started = time.monotonic()
    assert await queue.pull(5, 0.6) == []
    assert 0.5 <= time.monotonic() - started < 3.0


async def test_a_waiting_pull_gets_an_item_put_meanwhile(open_queue: OpenQueue) -> None:
    puller, putter = open_queue(LONG_LEASE_S), open_queue(LONG_LEASE_S)
    assert await puller.pull(1, 0.1) == []  # set up before the put
    started = time.monotonic()
    waiting = asyncio.create_task(puller.pull(5, 8.0))
    await putter.put(items("batch_a", 1))
    got = await waiting
    assert keys(got) == [("batch_a", 1)]
    assert time.monotonic() - started < 5.0  # answered when the item came, not at wait_s


async def test_an_unacked_item_is_delivered_again_after_the_lease(open_queue: OpenQueue) -> None:
    queue = open_queue(SHORT_LEASE_S)
    await queue.put(items("batch_a", 1))
    (first,) = await pull_at_least(queue, 1)
    pulled_at = time.monotonic()
    (again,) = await pull_at_least(queue, 1)
    assert time.monotonic() - pulled_at >= 0.9 * SHORT_LEASE_S
    assert again.item == first.item
    assert (first.attempts, again.attempts) == (1, 2)
    await again.ack()
    assert await queue.depth() == 0


async def test_a_nak_hides_the_item_until_its_delay(open_queue: OpenQueue) -> None:
    queue = open_queue(LONG_LEASE_S)
    await queue.put(items("batch_a", 1))
    (first,) = await pull_at_least(queue, 1)
    naked_at = time.monotonic()
    await first.nak(2.0)
    assert await queue.pull(1, 1.0) == []  # still within the delay
    (again,) = await pull_at_least(queue, 1)
    assert time.monotonic() - naked_at >= 1.9
    assert again.item == first.item and again.attempts == 2
    await again.ack()


async def test_touch_extends_the_lease(open_queue: OpenQueue) -> None:
    holder, other = open_queue(SHORT_LEASE_S), open_queue(SHORT_LEASE_S)
    await holder.put(items("batch_a", 1))
    (held,) = await pull_at_least(holder, 1)

    async def keep_touching() -> None:
        while True:
            await held.touch()
            await asyncio.sleep(SHORT_LEASE_S / 4)  # the touch period, well inside the lease

    touching = asyncio.create_task(keep_touching())
    try:
        assert await other.pull(1, 3 * SHORT_LEASE_S) == []  # three leases: held throughout
    finally:
        touching.cancel()
    stopped_at = time.monotonic()
    (again,) = await pull_at_least(other, 1)  # no more touches: the lease runs out
    assert time.monotonic() - stopped_at >= 0.5 * SHORT_LEASE_S
    assert again.item == held.item and again.attempts == 2
    await again.ack()


async def test_putting_a_queued_item_again_keeps_one(open_queue: OpenQueue) -> None:
    queue = open_queue(LONG_LEASE_S)
    await queue.put(items("batch_a", 2))
    await queue.put(items("batch_a", 2))
    assert await queue.depth() == 2
    (leased,) = await pull_at_least(queue, 1)
    await queue.put([leased.item])  # queued and leased: still not a second copy
    assert await queue.depth() == 2
    rest = await pull_at_least(queue, 1)
    assert await queue.pull(5, 0.5) == []
    assert sorted(keys([leased, *rest])) == [("batch_a", 1), ("batch_a", 2)]


async def test_drop_removes_one_batchs_items_only(open_queue: OpenQueue) -> None:
    queue = open_queue(LONG_LEASE_S)
    await queue.put(items("batch_a", 3) + items("batch_b", 2))
    assert await queue.drop("batch_a") == 3
    assert await queue.drop("batch_a") == 0
    assert await queue.depth() == 2
    got = await pull_at_least(queue, 2)
    assert sorted(keys(got)) == [("batch_b", 1), ("batch_b", 2)]
    assert await queue.pull(5, 0.5) == []


async def test_two_pullers_never_share_an_item(open_queue: OpenQueue) -> None:
    first, second = open_queue(LONG_LEASE_S), open_queue(LONG_LEASE_S)
    await first.put(items("batch_a", 120) + items("batch_b", 80))
    done: Counter[tuple[str, int]] = Counter()
    per_puller: list[int] = [0, 0]
    deadline = time.monotonic() + 30.0

    async def work(queue: WorkQueue, index: int) -> None:
        while sum(done.values()) < 200:
            assert time.monotonic() < deadline, f"{sum(done.values())} of 200 done in time"
            for delivery in await queue.pull(7, 0.2):
                assert delivery.attempts == 1  # nobody else had it
                done[(delivery.item.batch_id, delivery.item.line)] += 1
                per_puller[index] += 1
                await delivery.ack()

    await asyncio.gather(work(first, 0), work(second, 1))
    assert len(done) == 200 and set(done.values()) == {1}
    assert per_puller[0] > 0 and per_puller[1] > 0
    assert await first.depth() == 0


async def test_a_new_queue_object_sees_what_an_old_one_put(open_queue: OpenQueue) -> None:
    old = open_queue(LONG_LEASE_S)
    await old.put(items("batch_a", 4))
    (acked,) = await pull_at_least(old, 1)
    await acked.ack()
    await old.close()
    new = open_queue(LONG_LEASE_S)
    assert await new.depth() == 3
    got = await pull_at_least(new, 3)
    assert sorted(keys(got)) == [("batch_a", 2), ("batch_a", 3), ("batch_a", 4)]


async def test_depth_counts_what_is_not_acked(open_queue: OpenQueue) -> None:
    queue = open_queue(LONG_LEASE_S)
    assert await queue.depth() == 0
    await queue.put(items("batch_a", 5))
    assert await queue.depth() == 5
    leased = await pull_at_least(queue, 2)
    assert await queue.depth() == 5  # leased, not done
    await leased[0].ack()
    await leased[1].nak(30.0)
    assert await queue.depth() == 4  # delayed, not done


# Fairness across tenants --------------------------------------------------------------


async def test_one_tenants_line_goes_out_beside_anothers_thousand(open_queue: OpenQueue) -> None:
    """The attack: a tenant queues a thousand lines ahead of another tenant's one. The one
    line is in the next pull, not behind the thousand."""
    queue = open_queue(LONG_LEASE_S)
    await queue.put(items("batch_big", 1_000, tenant="big"))
    await queue.put(items("batch_small", 1, tenant="small"))
    got = await pull_at_least(queue, 2)
    assert {d.item.tenant for d in got} == {"big", "small"}, keys(got)


async def test_pulls_of_one_take_the_tenants_in_turn(open_queue: OpenQueue) -> None:
    """An executor refilling one freed slot at a time: each tenant in turn, none twice
    before every other with items has had one."""
    queue = open_queue(LONG_LEASE_S)
    for tenant in ("t1", "t2", "t3"):
        await queue.put(items(f"batch_{tenant}", 20, tenant=tenant))
    served: list[str] = []
    for _ in range(9):
        (delivery,) = await pull_at_least(queue, 1)
        served.append(delivery.item.tenant)
        await delivery.ack()
    rounds = [served[i : i + 3] for i in range(0, 9, 3)]
    assert all(sorted(r) == ["t1", "t2", "t3"] for r in rounds), served
    assert rounds[0] == rounds[1] == rounds[2]  # the same order every round


async def test_a_pull_takes_no_more_of_a_tenant_than_its_room(open_queue: OpenQueue) -> None:
    queue = open_queue(LONG_LEASE_S)
    await queue.put(items("batch_a", 10, tenant="a") + items("batch_b", 10, tenant="b"))
    a, b = IDS["a"], IDS["b"]
    got = await queue.pull(10, 5.0, Room(per_tenant=3, tenants={b: 1}))
    assert Counter(d.item.tenant for d in got) == {"a": 3, "b": 1}
    assert await queue.pull(10, 0.5, Room(3, {a: 0, b: 0})) == []  # none of either now
    rest = await pull_at_least_with(queue, 9, Room(None, {a: 0}))
    assert Counter(d.item.tenant for d in rest) == {"b": 9}  # a tenant told to wait: skipped
    assert await queue.depth() == 20


async def test_a_tenant_is_its_id_not_its_name(open_queue: OpenQueue) -> None:
    """A deleted acme's lines still queued and the lines of the acme created after it: two
    tenants, each with its own turns and room, told apart by id."""
    queue = open_queue(LONG_LEASE_S)
    await queue.put(items("batch_old", 20, tenant_id=1) + items("batch_new", 1, tenant_id=9))
    got = await queue.pull(2, 5.0)
    assert sorted((d.item.tenant_id, d.item.tenant) for d in got) == [(1, "acme"), (9, "acme")]
    waited = await pull_at_least_with(queue, 5, Room(per_tenant=5, tenants={9: 0}))
    assert {d.item.tenant_id for d in waited} == {1}  # the new acme's room is its own


async def test_an_item_without_a_tenant_id_is_refused(open_queue: OpenQueue) -> None:
    queue = open_queue(LONG_LEASE_S)
    with pytest.raises(WorkQueueError, match="names no tenant id"):
        await queue.put(items("batch_a", 2, tenant_id=0))
    assert await queue.depth() == 0


async def test_a_big_tenant_does_not_starve_a_small_one(open_queue: OpenQueue) -> None:
    """Two pullers run a big tenant's 600 lines; a small tenant's 6 arrive meanwhile and are
    all done within the next few pulls, and every line of both is done once."""
    first, second = open_queue(LONG_LEASE_S), open_queue(LONG_LEASE_S)
    await first.put(items("batch_big", 600, tenant="big"))
    done: list[tuple[str, int]] = []
    small_put_at: list[int] = []

    async def work(queue: WorkQueue) -> None:
        deadline = time.monotonic() + 60.0
        while len(done) < 606:
            assert time.monotonic() < deadline, f"{len(done)} of 606 done"
            for delivery in await queue.pull(4, 0.2):
                done.append((delivery.item.batch_id, delivery.item.line))
                await delivery.ack()
            if len(done) >= 100 and not small_put_at:
                small_put_at.append(len(done))
                await queue.put(items("batch_small", 6, tenant="small"))

    await asyncio.gather(work(first), work(second))
    assert len(set(done)) == 606 == len(done)
    small_at = [i for i, (batch, _) in enumerate(done) if batch == "batch_small"]
    # Round robin: at least one small line per pull of 4 once they are seen (2 pullers,
    # counts read at most COUNTS_FRESH_S late); far from the 500 big lines still queued.
    assert max(small_at) - small_put_at[0] < 60, (small_put_at, small_at)


async def pull_at_least_with(
    queue: WorkQueue, count: int, room: Room, timeout_s: float = 10.0
) -> list[Delivery]:
    deadline = time.monotonic() + timeout_s
    deliveries: list[Delivery] = []
    while len(deliveries) < count:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{len(deliveries)} of {count} deliveries in {timeout_s} s"
        deliveries += await queue.pull(count - len(deliveries), min(remaining, 1.0), room)
    return deliveries
