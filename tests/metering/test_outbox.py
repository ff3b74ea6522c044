"""The outbox: group commit, durability across SIGKILL, its bound, failures reaching
every waiter, and a depth that follows removals made elsewhere."""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from headway.metering.event import decode
from headway.metering.outbox import Outbox, OutboxError, OutboxFile
from headway.quantile import quantile
from tests.builders import usage_event
from tests.fakes import until


async def started(path: Path, **options: float) -> Outbox:
    outbox = Outbox(path, **options)  # type: ignore[arg-type]
    await outbox.start()
    return outbox


async def test_concurrent_records_share_a_few_commits(tmp_path: Path) -> None:
    outbox = await started(tmp_path / "gw-1.sqlite3")
    try:
        await asyncio.gather(*(outbox.record(usage_event(f"r{i}")) for i in range(100)))
        assert outbox.commits <= 10, f"{outbox.commits} commits for 100 concurrent records"
        assert outbox.depth == 100
        rows = await outbox.read(0, 1000)
        assert [row.request_id for row in rows] == [f"r{i}" for i in range(100)]
        assert decode(rows[7].data) == usage_event("r7")
    finally:
        await outbox.close()


DURABILITY_CHILD = """
import asyncio, sys
from pathlib import Path
from headway.metering.outbox import Outbox
from tests.builders import usage_event

async def main():
    outbox = Outbox(Path(sys.argv[1]))
    await outbox.start()
    await outbox.record(usage_event("survivor"))
    print("recorded", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_an_event_recorded_survives_sigkill_right_after(tmp_path: Path) -> None:
    path = tmp_path / "gw-1.sqlite3"
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        DURABILITY_CHILD,
        str(path),
        stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert child.stdout is not None
        assert await asyncio.wait_for(child.stdout.readline(), 20) == b"recorded\n"
        child.send_signal(signal.SIGKILL)  # no close(): the writer thread dies with it
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()
    reader = OutboxFile(path)
    try:
        rows = await reader.read(0, 10)
    finally:
        await reader.close()
    assert [row.request_id for row in rows] == ["survivor"]


async def test_full_flips_at_the_bound_and_logs_once_each_way(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headway.metering.outbox")
    outbox = await started(tmp_path / "gw-1.sqlite3", max_events=5)
    try:
        for i in range(4):
            await outbox.record(usage_event(f"r{i}"))
        assert not outbox.full
        for i in range(4, 9):  # past the bound: work already done is still recorded
            await outbox.record(usage_event(f"r{i}"))
            assert outbox.full
        rows = await outbox.read(0, 100)
        await outbox.remove([row.id for row in rows[:3]])  # 6 left: still full
        assert outbox.full
        await outbox.remove([rows[3].id, rows[4].id])  # 4 left
        assert not outbox.full and outbox.depth == 4
        await outbox.remove([rows[5].id])
    finally:
        await outbox.close()
    lines = [record.getMessage() for record in caplog.records]
    assert len([line for line in lines if "is full" in line]) == 1, lines
    assert len([line for line in lines if "has room again" in line]) == 1, lines


async def test_a_failed_commit_fails_every_waiter_and_the_next_one_succeeds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gw-1.sqlite3"
    outbox = await started(path)
    saboteur = sqlite3.connect(path, isolation_level=None)
    try:
        saboteur.execute(
            "CREATE TRIGGER disk_on_fire BEFORE INSERT ON outbox "
            "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
        results = await asyncio.wait_for(
            asyncio.gather(
                *(outbox.record(usage_event(f"r{i}")) for i in range(50)),
                return_exceptions=True,
            ),
            timeout=10,
        )
        assert all(isinstance(result, OutboxError) for result in results), results
        assert "disk on fire" in str(results[0])
        assert outbox.depth == 0 and await outbox.read(0, 100) == []
        saboteur.execute("DROP TRIGGER disk_on_fire")
        await outbox.record(usage_event("after"))
        assert outbox.depth == 1
    finally:
        saboteur.close()
        await outbox.close()


async def test_removals_from_another_connection_show_in_depth(tmp_path: Path) -> None:
    path = tmp_path / "gw-1.sqlite3"
    outbox = await started(path, refresh_s=0.05)
    other = OutboxFile(path)  # as the embedded consumer, in another process, would
    try:
        await asyncio.gather(*(outbox.record(usage_event(f"r{i}")) for i in range(10)))
        rows = await other.read(0, 4)
        assert [row.request_id for row in rows] == ["r0", "r1", "r2", "r3"]
        assert await other.remove([row.id for row in rows]) == 4
        await until(lambda: outbox.depth == 6)
        assert await other.depth() == 6
        assert [row.request_id for row in await outbox.read(rows[-1].id, 2)] == ["r4", "r5"]
    finally:
        await other.close()
        await outbox.close()


async def test_close_commits_what_is_queued_then_refuses(tmp_path: Path) -> None:
    path = tmp_path / "gw-1.sqlite3"
    outbox = await started(path)
    records = [asyncio.ensure_future(outbox.record(usage_event(f"r{i}"))) for i in range(20)]
    await asyncio.sleep(0)  # every record has queued its event
    await outbox.close()
    await asyncio.gather(*records)
    with pytest.raises(OutboxError, match="not open"):
        await outbox.record(usage_event("late"))
    reopened = await started(path)
    try:
        assert reopened.depth == 20
    finally:
        await reopened.close()


async def test_records_arriving_together_share_commits(tmp_path: Path) -> None:
    """Requests arriving at random (Poisson, 1,000/s) each await their record: they share
    fsyncs (group commit). The latencies are printed (``-s``), not bounded: a time limit
    fails on a busy machine, and ``headway bench billing`` measures them."""
    outbox = await started(tmp_path / "gw-1.sqlite3")
    latencies: list[float] = []

    async def one_request(i: int) -> None:
        began = time.perf_counter()
        await outbox.record(usage_event(f"r{i}"))
        latencies.append(time.perf_counter() - began)

    rng = random.Random(7)
    tasks = []
    try:
        start = time.perf_counter()
        arrival = 0.0
        for i in range(1000):
            arrival += rng.expovariate(1000.0)
            await asyncio.sleep(max(0.0, start + arrival - time.perf_counter()))
            tasks.append(asyncio.create_task(one_request(i)))
        await asyncio.gather(*tasks)
    finally:
        await outbox.close()
    p50, p99 = quantile(latencies, 0.5), quantile(latencies, 0.99)
    print(
        f"record at 1000/s: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, "
        f"{1000 / outbox.commits:.2f} records per commit"
    )
    assert len(latencies) == 1000
    assert outbox.commits < 1000
