"""The SQLite work queue's own guarantees: a lease lost is lost (a late ack, nak or touch
changes nothing), big puts in one transaction, the file shared with the batch store's
tables and with another process."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path
from typing import cast

import pytest

from headway.batches.queue import WorkItem, WorkQueueError
from headway.batches.sqlite_queue import SqliteWorkQueue


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "batches.sqlite3"


async def test_a_late_ack_of_a_lost_lease_leaves_the_row_to_its_new_holder(path: Path) -> None:
    clock = FakeClock()
    loser = SqliteWorkQueue(path, lease_s=10.0, clock=clock)
    winner = SqliteWorkQueue(path, lease_s=10.0, clock=clock)
    try:
        await loser.put([WorkItem("batch_a", 1, "acme")])
        (lost,) = await loser.pull(1, 0)
        assert await winner.pull(1, 0) == []  # the lease holds
        clock.now += 10.0
        (held,) = await winner.pull(1, 0)
        assert held.attempts == 2
        await lost.ack()
        await lost.touch()
        await lost.nak(0)
        assert loser.stale_leases == 3
        assert await winner.depth() == 1  # still there, still the winner's
        clock.now += 9.0
        assert await loser.pull(1, 0) == []  # the loser's nak did not make it visible
        await held.touch()  # the winner's touch counts: 10 s more from now
        clock.now += 9.0
        assert await loser.pull(1, 0) == []
        await held.ack()
        assert winner.stale_leases == 0
        assert await winner.depth() == 0
    finally:
        await loser.close()
        await winner.close()


async def test_an_ack_after_the_lease_ran_out_but_before_a_new_claim_deletes(path: Path) -> None:
    clock = FakeClock()
    queue = SqliteWorkQueue(path, lease_s=10.0, clock=clock)
    try:
        await queue.put([WorkItem("batch_a", 1, "acme")])
        (slow,) = await queue.pull(1, 0)
        clock.now += 60.0
        await slow.ack()
        assert queue.stale_leases == 0
        assert await queue.depth() == 0
    finally:
        await queue.close()


async def test_a_nak_gives_up_the_lease(path: Path) -> None:
    clock = FakeClock()
    queue = SqliteWorkQueue(path, lease_s=10.0, clock=clock)
    try:
        await queue.put([WorkItem("batch_a", 1, "acme")])
        (first,) = await queue.pull(1, 0)
        await first.nak(5.0)
        clock.now += 4.9
        assert await queue.pull(1, 0) == []
        clock.now += 0.1
        (again,) = await queue.pull(1, 0)
        await first.ack()  # the nak'd delivery holds nothing any more
        assert queue.stale_leases == 1 and await queue.depth() == 1
        await again.ack()
        assert await queue.depth() == 0
    finally:
        await queue.close()


async def test_pull_hands_out_the_oldest_first(path: Path) -> None:
    queue = SqliteWorkQueue(path, lease_s=30.0)
    try:
        await queue.put([WorkItem("batch_b", line, "t") for line in (3, 1, 2)])
        await queue.put([WorkItem("batch_a", 1, "t")])
        got = await queue.pull(10, 0)
        assert [(d.item.batch_id, d.item.line) for d in got] == [
            ("batch_b", 3),
            ("batch_b", 1),
            ("batch_b", 2),
            ("batch_a", 1),
        ]
    finally:
        await queue.close()


async def test_a_big_put_is_one_transaction(path: Path) -> None:
    queue = SqliteWorkQueue(path, lease_s=30.0)
    items = [WorkItem("batch_a", line, "acme") for line in range(1, 50_001)]
    broken = [*items[:40_000], WorkItem("batch_a", 40_001, cast(str, object())), *items[40_001:]]
    try:
        with pytest.raises(WorkQueueError, match="binding parameter"):
            await queue.put(broken)  # fails at item 40,001 of 50,000 ...
        assert await queue.depth() == 0  # ... and none of the 40,000 before it stayed
        await queue.put(items)
        assert await queue.depth() == 50_000
        assert len(await queue.pull(500, 0)) == 500
    finally:
        await queue.close()


async def test_the_table_shares_the_file_with_other_tables(path: Path) -> None:
    store = sqlite3.connect(path)
    store.execute("CREATE TABLE batches (id TEXT PRIMARY KEY)")
    store.execute("INSERT INTO batches VALUES ('batch_a')")
    store.commit()
    store.close()
    queue = SqliteWorkQueue(path, lease_s=30.0)
    try:
        await queue.put([WorkItem("batch_a", 1, "acme")])
        assert await queue.depth() == 1
    finally:
        await queue.close()
    check = sqlite3.connect(path)
    try:
        assert check.execute("SELECT id FROM batches").fetchall() == [("batch_a",)]
        assert check.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        check.close()


async def test_a_closed_queue_says_so(path: Path) -> None:
    queue = SqliteWorkQueue(path, lease_s=30.0)
    await queue.close()
    with pytest.raises(WorkQueueError, match="closed"):
        await queue.pull(1, 0)


def test_a_lease_must_be_positive(path: Path) -> None:
    with pytest.raises(WorkQueueError, match="lease"):
        SqliteWorkQueue(path, lease_s=0)


PULLER = """
import asyncio, json, sys
from pathlib import Path
from typing import cast
from headway.batches.sqlite_queue import SqliteWorkQueue

async def main() -> None:
    queue = SqliteWorkQueue(Path(sys.argv[1]), lease_s=60.0)
    print("ready", flush=True)
    got = []
    while True:
        deliveries = await queue.pull(5, 1.0)
        if not deliveries and got:
            break
        for delivery in deliveries:
            got.append(delivery.item.line)
            await delivery.ack()
    await queue.close()
    print(json.dumps(got), flush=True)

asyncio.run(main())
"""


async def test_two_processes_share_the_queue_and_never_the_same_item(path: Path) -> None:
    queue = SqliteWorkQueue(path, lease_s=60.0)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PULLER, str(path), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert (await asyncio.wait_for(child.stdout.readline(), 30)).strip() == b"ready"
        await queue.put([WorkItem("batch_a", line, "acme") for line in range(1, 1_001)])
        mine: list[int] = []
        while await queue.depth():
            for delivery in await queue.pull(5, 0.2):
                mine.append(delivery.item.line)
                await delivery.ack()
        out, _ = await asyncio.wait_for(child.communicate(), 60)
        theirs: list[int] = json.loads(out.decode().strip().splitlines()[-1])
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        await queue.close()
    assert child.returncode == 0
    assert sorted(mine + theirs) == list(range(1, 1_001))  # each exactly once
    assert theirs, "the other process got none"
