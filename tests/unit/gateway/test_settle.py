"""The one rule of what a failed request is owed back and leaves for the ledger."""

from __future__ import annotations

import asyncio

import pytest

from headway.errors import (
    DeadlineExceeded,
    Overloaded,
    QuotaExceeded,
    UpstreamFailed,
    ValidationFailed,
)
from headway.gateway.stages.admit import AdmissionRefused
from headway.gateway.stages.settle import FAILED, KEPT, REFUSED, settlement


@pytest.mark.parametrize(
    ("ended", "owed"),
    [
        (None, KEPT),  # served: the meter's own billable event
        (asyncio.CancelledError(), KEPT),  # the client left
        (ValidationFailed("bad body"), KEPT),
        (QuotaExceeded("used up"), KEPT),
        (AdmissionRefused("shed"), REFUSED),
        (Overloaded("every worker's queue full"), FAILED),  # sent, and refused there
        (UpstreamFailed("replica failed"), FAILED),
        (DeadlineExceeded("too late"), FAILED),
        (RuntimeError("a bug"), FAILED),
    ],
)
def test_each_ending_is_settled_by_the_one_table(ended: BaseException | None, owed: object) -> None:
    assert settlement(ended) == owed


def test_only_a_failure_on_our_side_leaves_an_event_and_every_refusal_a_refund() -> None:
    assert FAILED.refund and FAILED.not_billable_event
    assert REFUSED.refund and not REFUSED.not_billable_event
    assert not KEPT.refund and not KEPT.not_billable_event
