"""An executor asked to stop stops, however the stop is swallowed below it: the
shared-mode hang (issue 26). Under Python 3.11 nats-py's ``Subscription.next_msg``
(``asyncio.wait_for``) returns a message that arrives in the loop turn the pull is
cancelled in, instead of raising; the loop then pulled on for ever and its stop waited
for ever. The fakes here swallow the cancel the same way, on every Python."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

import pytest

from headway.batches.executor import Executor
from headway.batches.jsonl import Line
from headway.batches.metrics import ExecutorMetrics
from headway.batches.model import Batch
from headway.batches.queue import ANY_ROOM, Room, WorkItem
from headway.batches.submit import Answer
from headway.settings import ExecutorSettings
from tests.fakes import until

BATCH = Batch(
    "batch_1", 7, "acme", "key_1", "/v1/embeddings", "file_1", "24h", "in_progress", 0, 2**40
)


class Delivery:
    """A leased item; ``touch_swallows``: a touch parks until cancelled, then returns."""

    def __init__(self, line: int, *, touch_swallows: bool = False) -> None:
        self.item = WorkItem(BATCH.id, line, BATCH.tenant_id, BATCH.tenant)
        self.attempts = 1
        self.naks: list[float] = []
        self.acks = 0
        self.touching = asyncio.Event()
        self._touch_swallows = touch_swallows

    async def ack(self) -> None:
        self.acks += 1

    async def nak(self, delay_s: float) -> None:
        self.naks.append(delay_s)

    async def touch(self) -> None:
        if self._touch_swallows:
            self._touch_swallows = False  # once: the race is one turn, not every turn
            self.touching.set()
            try:
                await asyncio.get_running_loop().create_future()
            except asyncio.CancelledError:
                return  # swallowed, as a library's wait_for may


class SwallowingQueue:
    """Each pull waits for a line; a pull cancelled as its line arrives returns the line
    (the swallow), with ``arrives`` to hand it over in the turn of the cancel."""

    lease_s = 60.0

    def __init__(self, arrives: list[Delivery]) -> None:
        self.pulls = 0
        self.pulling = asyncio.Event()
        self._arrives = arrives

    async def pull(self, max_items: int, wait_s: float, room: Room = ANY_ROOM) -> list[Delivery]:
        self.pulls += 1
        self.pulling.set()
        waiting = asyncio.get_running_loop().create_future()
        if self.pulls > 1:  # once: the race is one turn, not every turn
            await waiting
        try:
            await waiting
        except asyncio.CancelledError:
            return self._arrives  # the message came as the cancel did: returned, not raised
        raise AssertionError("unreachable")

    async def ack_all(self, deliveries: Collection[Delivery]) -> None:
        for delivery in deliveries:
            await delivery.ack()

    async def close(self) -> None:
        return None


class Store:
    def batch_by_id(self, batch_id: str) -> Batch | None:
        return BATCH if batch_id == BATCH.id else None

    def recorded(self, batch_id: str, lines: Collection[int]) -> set[int]:
        return set()


class Inputs:
    async def line(self, batch: Batch, number: int) -> Line:
        return Line(number, f"c{number}", b'{"input": ["a"]}', 1)


class NeverAnswers:
    async def submit(self, batch: Batch, line: int, body: bytes) -> Answer:
        await asyncio.get_running_loop().create_future()
        raise AssertionError("unreachable")

    async def close(self) -> None:
        return None


def executor(queue: object, lease_s: float = 60.0) -> Executor:
    settings = ExecutorSettings(lines_in_flight=2, lease_s=lease_s)
    return Executor(
        Store(),  # type: ignore[arg-type]
        queue,  # type: ignore[arg-type]
        Inputs(),  # type: ignore[arg-type]
        NeverAnswers(),
        settings,
        ExecutorMetrics(),
    )


async def stopped(run: asyncio.Task[None]) -> None:
    """Cancel ``run`` and wait for it, failing (rather than hanging) if it never ends."""
    run.cancel()
    done, _ = await asyncio.wait({run}, timeout=10)
    assert done, "the executor did not stop"
    assert run.cancelled()


@pytest.mark.parametrize("arrived", [0, 1, 2])
async def test_a_stop_the_pull_swallowed_stops_the_loop_and_hands_its_lines_back(arrived):
    lines = [Delivery(n) for n in range(1, arrived + 1)]
    queue = SwallowingQueue(lines)
    lines_run = executor(queue)
    run = asyncio.ensure_future(lines_run.run())
    await queue.pulling.wait()
    await stopped(run)
    assert queue.pulls == 1  # it never pulled again
    assert [line.naks for line in lines] == [[0.0]] * arrived  # visible again at once
    assert not lines_run._running  # none of them started


async def test_a_stop_a_line_swallowed_in_a_touch_stops_the_line_too():
    line = Delivery(1, touch_swallows=True)

    class OneLine(SwallowingQueue):
        async def pull(self, max_items: int, wait_s: float, room: Room = ANY_ROOM):
            self.pulls += 1
            if self.pulls == 1:
                return [line]
            return await super().pull(max_items, wait_s, room)

    queue = OneLine([])
    queue.lease_s = 0.03  # a touch every 10 ms while the line waits for its answer
    lines_run = executor(queue, lease_s=queue.lease_s)
    run = asyncio.ensure_future(lines_run.run())
    await line.touching.wait()  # the line is inside its touch, which will swallow the stop
    await queue.pulling.wait()
    await stopped(run)
    await until(lambda: not lines_run._running, 10)  # the line ended, not left running
    assert line.naks == [0.0] and line.acks == 0
