"""The executor's send window: AIMD on the gateways' 503s, waiting lines let through round
robin by tenant."""

from __future__ import annotations

import asyncio

from headway.batches.window import SendWindow


async def test_a_shed_halves_the_window_and_answers_grow_it_back_one_per_window():
    window = SendWindow(8)
    window.answered(shed=True)
    assert window.size == 4
    window.answered(shed=True)
    window.answered(shed=True)
    window.answered(shed=True)
    assert window.size == 1  # never below one line
    for _ in range(3):  # 1 → 2 → 2.5 → 2.9
        window.answered(shed=False)
    assert 2.8 < window.size < 3.0
    for _ in range(100):
        window.answered(shed=False)
    assert window.size == 8  # never above the lines in flight


async def test_lines_beyond_the_window_wait_until_one_returns():
    window = SendWindow(4)
    window.answered(shed=True)  # room for 2
    await window.acquire()
    await window.acquire()
    third = asyncio.ensure_future(window.acquire())
    await asyncio.sleep(0)
    assert not third.done() and window.sending == 2
    window.release()
    await asyncio.wait_for(third, 1)
    assert window.sending == 2


async def test_waiting_lines_go_round_robin_by_tenant_oldest_first_within_one():
    window = SendWindow(1)
    big, small = 1, 2  # tenants' ids
    await window.acquire(big)
    order: list[str] = []

    async def send(tenant: int, name: str) -> None:
        await window.acquire(tenant)
        order.append(name)

    waiting = [asyncio.ensure_future(send(big, f"big{i}")) for i in range(5)]
    waiting.append(asyncio.ensure_future(send(small, "small0")))  # last to come
    await asyncio.sleep(0)
    for _ in range(3):
        window.release()
        await asyncio.sleep(0)
    assert order == ["big0", "small0", "big1"]  # the small tenant's line: the next place
    for _ in range(3):
        window.release()
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*waiting), 1)
    assert order == ["big0", "small0", "big1", "big2", "big3", "big4"]


async def test_a_line_cancelled_while_waiting_takes_no_place():
    window = SendWindow(1)
    await window.acquire(1)
    gone = asyncio.ensure_future(window.acquire(1))
    kept = asyncio.ensure_future(window.acquire(2))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    window.release()
    await asyncio.wait_for(kept, 1)
    assert window.sending == 1 and gone.cancelled()
    window.release()
    assert window.sending == 0
