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
        await loser.put([WorkItem("batch_a", 1, 1, "acme")])
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
        await queue.put([WorkItem("batch_a", 1, 1, "acme")])
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
        await queue.put([WorkItem("batch_a", 1, 1, "acme")])
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
        await queue.put([WorkItem("batch_b", line, 1, "t") for line in (3, 1, 2)])
        await queue.put([WorkItem("batch_a", 1, 1, "t")])
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
    items = [WorkItem("batch_a", line, 1, "acme") for line in range(1, 50_001)]
    broken = [*items[:40_000], WorkItem("batch_a", 40_001, 1, cast(str, object())), *items[40_001:]]
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
        await queue.put([WorkItem("batch_a", 1, 1, "acme")])
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
        await queue.put([WorkItem("batch_a", line, 1, "acme") for line in range(1, 1_001)])
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


OLD_LAYOUT = """
CREATE TABLE work_items (
    batch_id TEXT NOT NULL,
    line INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    visible_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_id TEXT,
    PRIMARY KEY (batch_id, line)
);
CREATE INDEX work_items_by_tenant ON work_items (tenant);
"""


async def test_a_file_of_the_previous_version_is_upgraded_and_its_items_served(
    path: Path,
) -> None:
    """A running system upgrades: rows queued under the tenant's name only (one leased by
    an executor that died) are served beside new ones, in turns of their own by name, with
    no tenant id; the index by name makes way for the one by id."""
    clock = FakeClock()
    old = sqlite3.connect(path)
    old.executescript(OLD_LAYOUT)
    rows = [("batch_old", n, "acme", clock.now, 0, None) for n in (1, 2)]
    rows += [("batch_old", 3, "acme", clock.now + 5, 1, "dead-executor")]  # leased
    rows += [("batch_other", 1, "globex", clock.now, 0, None)]
    old.executemany("INSERT INTO work_items VALUES (?, ?, ?, ?, ?, ?)", rows)
    old.commit()
    old.close()
    queue = SqliteWorkQueue(path, lease_s=30.0, clock=clock)
    again = SqliteWorkQueue(path, lease_s=30.0, clock=clock)  # a second executor opening
    try:
        await queue.put([WorkItem("batch_new", n, 7, "acme") for n in (1, 2)])
        assert await again.depth() == 6
        got = await queue.pull(3, 0)  # one of each: the old acme, globex, the new acme (7)
        assert sorted((d.item.tenant_id, d.item.tenant) for d in got) == [
            (0, "acme"),
            (0, "globex"),
            (7, "acme"),
        ]
        clock.now += 6  # the dead executor's lease runs out (ours hold)
        got += await again.pull(10, 0)
        assert sorted((d.item.batch_id, d.item.line, d.item.tenant_id) for d in got) == [
            ("batch_new", 1, 7),
            ("batch_new", 2, 7),
            ("batch_old", 1, 0),
            ("batch_old", 2, 0),
            ("batch_old", 3, 0),
            ("batch_other", 1, 0),
        ]
        for delivery in got:
            await delivery.ack()
        assert await queue.depth() == 0
    finally:
        await queue.close()
        await again.close()
    check = sqlite3.connect(path)
    indexes = {row[1] for row in check.execute("PRAGMA index_list(work_items)")}
    check.close()
    assert "work_items_by_tenant_id" in indexes and "work_items_by_tenant" not in indexes
