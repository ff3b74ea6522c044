"""The failed-key limiter alone: its pure bucket, the local store and the rules of whom it
refuses, on a fake clock."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.errors import AuthThrottled
from headway.gateway.auth.failures import FailureLimit, allowance, fail, locked_for
from headway.gateway.auth.fallback import FallbackFailureStore
from headway.gateway.auth.limiter import FailedAuthLimiter, prefix_digest
from headway.gateway.auth.store import (
    Failed,
    FailureStoreUnavailable,
    LocalFailureStore,
    Subject,
)
from headway.registry.keys import key_digest
from headway.settings import FailedAuthSettings
from tests.fakes import FakeClock

FIVE_A_MINUTE = FailureLimit(failures=5, window_s=60.0)
SETTINGS = FailedAuthSettings(
    address_failures=5, address_window_s=60, key_prefix_failures=8, key_prefix_window_s=60
)
VICTIM_KEY = "hw_victimvictimvictimvictim"


class Recorder:
    def __init__(self) -> None:
        self.failures = 0
        self.refusals: list[str] = []
        self.lockouts: list[str] = []

    def failed(self) -> None:
        self.failures += 1

    def refused(self, subject: str) -> None:
        self.refusals.append(subject)

    def locked(self, subject: str) -> None:
        self.lockouts.append(subject)


def limiter(clock: FakeClock, **changes: float) -> tuple[FailedAuthLimiter, Recorder]:
    recorder = Recorder()
    chosen = SETTINGS.model_copy(update=changes)
    return FailedAuthLimiter(chosen, clock=clock, observer=recorder), recorder  # type: ignore[arg-type]


async def check(limiter: FailedAuthLimiter, address: str, key: str, valid: bool) -> int:
    """One key check as ``KeyChecks`` makes it: the status the client gets."""
    attempt = limiter.attempt(address, key, key_digest(key))
    try:
        await limiter.admit(attempt)
    except AuthThrottled:
        return 429
    if not valid:
        await limiter.failed(attempt)
        return 401
    limiter.succeeded(attempt)
    return 200


# The bucket of failures (pure).


def test_failures_lock_a_subject_at_its_limit_until_one_has_refilled():
    state = None
    for _ in range(5):
        assert locked_for(state, 100.0, FIVE_A_MINUTE) == 0
        state = fail(state, 100.0, FIVE_A_MINUTE)
    assert locked_for(state, 100.0, FIVE_A_MINUTE) == pytest.approx(12.0)  # 60 s / 5
    assert locked_for(state, 106.0, FIVE_A_MINUTE) == pytest.approx(6.0)
    assert locked_for(state, 112.0, FIVE_A_MINUTE) == 0
    assert allowance(state, 400.0, FIVE_A_MINUTE) == 5.0  # full again: forgotten


def test_a_locked_subjects_failure_is_not_counted_so_its_wait_stays_true():
    state = None
    for _ in range(5):
        state = fail(state, 0.0, FIVE_A_MINUTE)
    again = fail(state, 6.0, FIVE_A_MINUTE)
    assert locked_for(again, 6.0, FIVE_A_MINUTE) == pytest.approx(6.0)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0.0, 20.0), st.booleans()), max_size=80))
def test_a_subject_never_fails_more_than_its_limit_plus_its_refill(steps):
    """Attempts at any times, each refused (locked) or failed: over every interval the
    failures counted are at most failures + rate × length."""
    state, now, counted = None, 0.0, []
    for pause, _ in steps:
        now += pause
        if locked_for(state, now, FIVE_A_MINUTE) == 0:
            state = fail(state, now, FIVE_A_MINUTE)
            counted.append(now)
    for i, start in enumerate(counted):
        for j in range(i, len(counted)):
            length = counted[j] - start
            assert j - i + 1 <= 5 + FIVE_A_MINUTE.rate * length + 1e-9


# The rules of whom the limiter refuses.


async def test_an_address_past_its_limit_is_refused_before_its_keys_are_checked():
    clock = FakeClock()
    guard, recorder = limiter(clock)
    for number in range(5):
        assert await check(guard, "203.0.113.9", f"hw_guess{number:02}", valid=False) == 401
    attempt = guard.attempt("203.0.113.9", "hw_valid", key_digest("hw_valid"))
    with pytest.raises(AuthThrottled) as refused:
        await guard.admit(attempt)
    assert refused.value.status == 429 and refused.value.retry_after_s == pytest.approx(12.0)
    assert "5 within 60 s" in refused.value.message
    assert recorder.failures == 5 and recorder.lockouts == ["address"]
    assert recorder.refusals == ["address"]
    assert await check(guard, "198.51.100.1", "hw_other", valid=False) == 401  # others: not
    clock.advance(12)
    assert await check(guard, "203.0.113.9", "hw_valid", valid=True) == 200


async def test_a_key_accepted_from_an_address_is_served_there_whatever_others_fail():
    clock = FakeClock()
    guard, _ = limiter(clock)
    assert await check(guard, "192.0.2.7", VICTIM_KEY, valid=True) == 200  # the tenant, first
    for number in range(20):  # a guesser behind the same NAT
        await check(guard, "192.0.2.7", f"hw_guess{number:02}", valid=False)
    assert await check(guard, "192.0.2.7", "hw_new_here", valid=True) == 429  # cannot be told
    for _ in range(50):
        assert await check(guard, "192.0.2.7", VICTIM_KEY, valid=True) == 200
    clock.advance(SETTINGS.known_for_s + 1)  # unseen there for a day: a stranger again
    for number in range(5):
        await check(guard, "192.0.2.7", f"hw_guess{number:02}", valid=False)
    assert await check(guard, "192.0.2.7", VICTIM_KEY, valid=True) == 429


async def test_variants_of_one_key_from_many_addresses_lock_its_prefix_not_its_owner():
    clock = FakeClock()
    guard, recorder = limiter(clock)
    assert await check(guard, "192.0.2.7", VICTIM_KEY, valid=True) == 200
    for number in range(8):  # one guess each from eight addresses, all variants of the tail
        variant = VICTIM_KEY[:-2] + f"{number:02}"
        assert await check(guard, f"10.9.0.{number}", variant, valid=False) == 401
    assert recorder.lockouts == ["key_prefix"]
    assert await check(guard, "10.9.0.99", VICTIM_KEY[:-2] + "zz", valid=False) == 429
    assert await check(guard, "10.9.0.98", VICTIM_KEY, valid=True) == 429  # the key itself too
    assert await check(guard, "192.0.2.7", VICTIM_KEY, valid=True) == 200  # but not its owner
    assert await check(guard, "10.9.0.97", "hw_anotherkey12345", valid=False) == 401
    assert recorder.refusals == ["key_prefix", "key_prefix"]


async def test_there_is_no_global_lockout():
    clock = FakeClock()
    guard, _ = limiter(clock)
    for host in range(200):  # a thousand failures a minute, from two hundred addresses
        for number in range(5):
            await check(guard, f"10.1.{host}.1", f"hw_{host:03}guess{number}", valid=False)
    assert await check(guard, "10.1.0.1", "hw_valid", valid=True) == 429
    assert await check(guard, "198.51.100.1", "hw_valid", valid=True) == 200  # nobody else
    assert await check(guard, "198.51.100.2", "hw_wrong", valid=False) == 401


async def test_each_lockout_is_one_log_line_naming_the_address_never_the_key(caplog):
    clock = FakeClock()
    guard, recorder = limiter(clock)
    with caplog.at_level(logging.WARNING, "headway.gateway.auth.limiter"):
        for _ in range(3):  # a guesser keeping to the limit: locked, one allowed, locked…
            for number in range(6):
                await check(guard, "203.0.113.9", f"hw_secret{number}", valid=False)
            clock.advance(12)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["failed key checks: 5 within 60 s; refusing 203.0.113.9 for 12 s"]
    assert recorder.lockouts == ["address"] * 3  # each counted
    assert "hw_secret" not in caplog.text
    clock.advance(60)
    with caplog.at_level(logging.WARNING, "headway.gateway.auth.limiter"):
        for number in range(5):
            await check(guard, "203.0.113.9", f"hw_secret{number}", valid=False)
    assert len(caplog.records) == 2  # a lockout after a quiet window is a new one


def test_a_prefix_is_known_by_a_short_digest_of_its_first_characters():
    assert prefix_digest(VICTIM_KEY, 12) == prefix_digest(VICTIM_KEY[:12] + "x", 12)
    assert prefix_digest(VICTIM_KEY, 12) != prefix_digest("hw_another_one", 12)
    assert len(prefix_digest(VICTIM_KEY, 12)) == 8
    assert VICTIM_KEY[3:12] not in prefix_digest(VICTIM_KEY, 12)


async def test_the_local_store_forgets_the_least_recently_failed_past_its_bound():
    store = LocalFailureStore(tracked=3, clock=FakeClock())
    subjects = [Subject("address", f"10.0.0.{n}", FIVE_A_MINUTE) for n in range(5)]
    for subject in subjects:
        await store.fail([subject])
    assert store.subjects == 3
    assert await store.fail([subjects[4]]) == [Failed(0.0, False)]


# Redis away: the local store, said once.


class Switchable:
    def __init__(self, clock: FakeClock) -> None:
        self.buckets = LocalFailureStore(clock=clock)
        self.available = True
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if not self.available:
            raise FailureStoreUnavailable("switched off")

    async def locked_for(self, subjects):
        self._check()
        return await self.buckets.locked_for(subjects)

    async def fail(self, subjects):
        self._check()
        return await self.buckets.fail(subjects)

    async def close(self) -> None:
        pass


async def test_with_the_shared_store_away_failures_are_counted_locally_and_said_once(caplog):
    clock = FakeClock()
    shared, modes = Switchable(clock), []
    store = FallbackFailureStore(
        shared, LocalFailureStore(clock=clock), clock=clock, on_mode_change=modes.append
    )
    subject = [Subject("address", "203.0.113.9", FIVE_A_MINUTE)]
    shared.available = False
    with caplog.at_level(logging.INFO, "headway.gateway.auth.fallback"):
        for _ in range(5):
            await store.fail(subject)
        assert await store.locked_for(subject) == [pytest.approx(12.0)]  # still limited
        assert store.mode == "local" and modes == ["local"]
        assert shared.calls == 1  # probed once a second at most, not per call
        shared.available = True
        clock.advance(1.0)
        assert await store.locked_for(subject) == [0.0]  # Redis's own count: none
        assert store.mode == "redis" and modes == ["local", "redis"]
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said[0][0] == "WARNING" and "unavailable (switched off)" in said[0][1]
    assert said[1] == (
        "INFO",
        "failed-auth store is back; counting failed key checks in Redis again",
    )
    assert len(said) == 2


@settings(max_examples=60, deadline=None)
@given(
    guesses=st.lists(
        st.tuples(
            st.sampled_from(["192.0.2.7", "10.9.0.1", "10.9.0.2"]),  # the victim's NAT too
            st.sampled_from([VICTIM_KEY[:-1] + "x", "hw_guessguess1", "hw_guessguess2"]),
            st.floats(0.0, 30.0),
        ),
        max_size=60,
    )
)
async def test_a_client_served_before_is_never_refused_whatever_others_fail(guesses):
    """The rule that a refusal costs only those who failed, as an invariant: however many
    wrong keys come from its own address or share its key's prefix, a key served from an
    address is served from it again."""
    clock = FakeClock()
    guard, _ = limiter(clock)
    assert await check(guard, "192.0.2.7", VICTIM_KEY, valid=True) == 200
    for address, key, pause in guesses:
        clock.advance(pause)
        assert await check(guard, address, key, valid=False) in (401, 429)
        assert await check(guard, "192.0.2.7", VICTIM_KEY, valid=True) == 200
