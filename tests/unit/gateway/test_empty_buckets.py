"""``EmptyBuckets``: a bucket found empty refuses the tenant until one text has refilled,
never for longer than ``RECHECK_S`` without asking the store again."""

from __future__ import annotations

import pytest

from headway.errors import QuotaExceeded
from headway.gateway.context import RequestContext
from headway.gateway.quota.store import Quota, QuotaDecision
from headway.gateway.stages.quota import RECHECK_S, EmptyBuckets
from headway.registry.model import Tenant


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ctx(rate: float = 0.5, burst: float = 10) -> RequestContext:
    tenant = Tenant(1, "t", "interactive", rate, burst)
    return RequestContext("r", "embeddings", tenant, None, {})  # type: ignore[arg-type]


def decision(granted: bool, remaining: float, rate: float = 0.5) -> QuotaDecision:
    return QuotaDecision(granted, remaining, 0.0 if granted else 3.0, 10, (10 - remaining) / rate)


def test_a_granted_charge_or_a_bucket_with_texts_left_leaves_no_hint():
    clock = Clock()
    empty = EmptyBuckets(clock)
    quota = Quota(1, 0.5, 10)
    empty.note(quota, decision(True, 0))
    empty.check(ctx())
    empty.note(quota, decision(False, 4))  # short for a large request, not empty
    empty.check(ctx())


def test_an_empty_bucket_refuses_with_headers_until_it_is_looked_at_again():
    clock = Clock()
    empty = EmptyBuckets(clock)
    empty.note(Quota(1, 0.5, 10), decision(False, 0))
    request = ctx()
    with pytest.raises(QuotaExceeded) as refused:
        empty.check(request)
    assert refused.value.retry_after_s == pytest.approx(2.0)  # one text at 0.5 texts/s
    assert request.response_headers["x-ratelimit-remaining"] == "0"
    assert request.response_headers["x-ratelimit-reset"] == "20"
    clock.now += RECHECK_S  # the store is asked again, however slow the refill
    empty.check(ctx())


def test_a_fast_refill_ends_the_hint_when_one_text_is_back():
    clock = Clock()
    empty = EmptyBuckets(clock)
    empty.note(Quota(1, 100, 10), decision(False, 0.5, rate=100))
    clock.now += 0.004
    with pytest.raises(QuotaExceeded):
        empty.check(ctx(rate=100))
    clock.now += 0.002  # 0.5 texts at 100 texts/s: back after 5 ms
    empty.check(ctx(rate=100))


def test_a_later_grant_forgets_the_hint():
    clock = Clock()
    empty = EmptyBuckets(clock)
    quota = Quota(1, 0.5, 10)
    empty.note(quota, decision(False, 0))
    empty.note(quota, decision(True, 0))
    empty.check(ctx())
