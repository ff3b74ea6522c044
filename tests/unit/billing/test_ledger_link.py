"""Backoff delays and the ledger link's state changes, with a fake clock and jitter."""

from __future__ import annotations

import logging

import pytest

from headway.billing.ledger.errors import LedgerUnavailable, SchemaTooNew
from headway.billing.ledger.memory import MemoryLedger
from headway.billing.ledger_link import Backoff, LedgerLink, backoff_delay, open_when_reachable


def test_delays_double_up_to_the_cap_and_jitter_stays_within_half_and_all() -> None:
    lows = [backoff_delay(n, 0.1, 5.0, 0.0) for n in range(10)]
    highs = [backoff_delay(n, 0.1, 5.0, 0.999999) for n in range(10)]
    assert lows[:4] == pytest.approx([0.05, 0.1, 0.2, 0.4])
    assert max(highs) == pytest.approx(5.0, rel=1e-5) and highs[-1] == highs[-2]
    assert all(0 < low <= high for low, high in zip(lows, highs, strict=True))
    assert backoff_delay(10_000, 0.1, 5.0, 0.5) == pytest.approx(3.75)  # no overflow


def test_backoff_resets_and_refuses_bounds_out_of_order() -> None:
    backoff = Backoff(1.0, 8.0, unit=lambda: 0.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.next() == 0.5
    with pytest.raises(ValueError, match="initial_s"):
        Backoff(2.0, 1.0)


class Seen:
    def __init__(self) -> None:
        self.states: list[bool] = []
        self.retries = 0

    def ledger_up(self, up: bool) -> None:
        self.states.append(up)

    def ledger_retry(self) -> None:
        self.retries += 1


async def test_opening_waits_through_unavailable_and_logs_each_change_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="headway.billing.ledger_link")
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    failures = 5

    async def open_ledger() -> MemoryLedger:
        nonlocal failures
        if failures:
            failures -= 1
            raise LedgerUnavailable("connection refused")
        return MemoryLedger()

    seen = Seen()
    link = LedgerLink(seen, Backoff(0.1, 0.3, unit=lambda: 1.0), sleep)
    await open_when_reachable(open_ledger, link)
    assert slept == pytest.approx([0.1, 0.2, 0.3, 0.3, 0.3])
    assert seen.states == [False, True] and seen.retries == 5 and link.up is True
    assert len(caplog.records) == 2  # one line down, one line up; not one per attempt


async def test_an_error_no_wait_can_cure_is_raised() -> None:
    async def open_ledger() -> MemoryLedger:
        raise SchemaTooNew("the ledger holds migration 99")

    with pytest.raises(SchemaTooNew):
        await open_when_reachable(open_ledger, LedgerLink())
