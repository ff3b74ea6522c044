"""The executor's send window: AIMD on the gateways' 503s."""

from __future__ import annotations

import asyncio

from headway.batches.executor import SendWindow


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
