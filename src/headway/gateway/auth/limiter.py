"""The one limiter of failed key checks: every route that takes a key or a token goes
through it (``checks.py``), the console's sign-in too.

A failed check (a key or token that matches nothing, or has expired) counts against two buckets
(``failures.py``): the **client address** (``http/client_address.py``: IPv6 by its /64, behind a
trusted proxy the forwarded one), against one host guessing, and the **key prefix** (the first
``key_prefix_chars`` characters presented), against a guesser on many addresses trying variants
of a key it partly knows. The prefix is kept only as a 32-bit digest (in memory, in Redis, in
the log), which names no prefix: 2²² prefixes of a key's 54 secret bits share each one.

A subject over its limit is **refused before its key is checked** (429, Retry-After until it may
fail once more): a guesser learns nothing from the refusals, and they count as no failure.

**Who is never refused.** A key accepted from an address within ``known_for_s`` is still
checked, and served from there whatever its address or prefix owes: refusals cost those who
failed, not a tenant behind a guesser's NAT nor the owner of a key whose prefix is being
guessed. Someone who has not failed can be held up only as a key new to a locked-out address
(it cannot be told from the next guess there: at most ``window_s / failures``), or by an
attacker who already knows 54 bits of their key. There is no global rule: failures from a
thousand addresses lock out those thousand addresses, nobody else.

Each lockout is logged once, naming the address and the prefix's digest, never the key. With
``redis_url`` the buckets are shared (``redis_store.py``, falling back to local ones:
``fallback.py``); the known pairs and the lockouts seen stay in this gateway, so a served
request costs no Redis call, nor does one refused under a lockout already seen.
"""

from __future__ import annotations

import hashlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from headway.errors import AuthThrottled
from headway.gateway.auth.failures import FailureLimit
from headway.gateway.auth.store import (
    FailureStore,
    LocalFailureStore,
    Subject,
    SubjectKind,
)
from headway.settings import FailedAuthSettings

log = logging.getLogger(__name__)

PREFIX_DIGEST_HEX = 8
"""A key prefix is known by the first 32 bits of its SHA-256, in hex."""


class AuthObserver(Protocol):
    def failed(self) -> None:
        """A key check failed (counted against its address and prefix)."""

    def refused(self, subject: SubjectKind) -> None:
        """A request was refused before its key was checked, by this subject's lockout."""

    def locked(self, subject: SubjectKind) -> None:
        """A failure locked a subject out."""


class NoAuthObserver:
    def failed(self) -> None:
        pass

    def refused(self, subject: SubjectKind) -> None:
        pass

    def locked(self, subject: SubjectKind) -> None:
        pass


@dataclass(slots=True)
class Attempt:
    """A presented key: from where, itself, and its digest."""

    address: str
    presented: str
    digest: bytes
    subjects: tuple[Subject, Subject] | None = None
    """Whom a failure counts against, once asked (``FailedAuthLimiter.subjects``)."""


def prefix_digest(presented: str, chars: int) -> str:
    return hashlib.sha256(presented[:chars].encode("utf-8", "replace")).hexdigest()[
        :PREFIX_DIGEST_HEX
    ]


class FailedAuthLimiter:
    """Counts failed key checks and says whom to refuse (see the module's docstring)."""

    def __init__(
        self,
        settings: FailedAuthSettings | None = None,
        store: FailureStore | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        observer: AuthObserver | None = None,
    ) -> None:
        """``store``: where failures are counted (default: this process); ``clock``:
        monotonic seconds, for known keys and lockouts seen."""
        self.settings = settings = settings or FailedAuthSettings()
        self._store = store or LocalFailureStore(settings.tracked, clock)
        self._clock = clock
        self._observer = observer or NoAuthObserver()
        self._limits = {
            "address": FailureLimit(settings.address_failures, settings.address_window_s),
            "key_prefix": FailureLimit(settings.key_prefix_failures, settings.key_prefix_window_s),
        }
        self._known: OrderedDict[tuple[str, bytes], float] = OrderedDict()
        """(address, key digest) → until when it is exempt; least recently served first."""
        self._locked_until: OrderedDict[str, float] = OrderedDict()
        """Subject key → until when this gateway knows it is refused."""
        self._logged: OrderedDict[str, float] = OrderedDict()
        """Subject key → when its lockout was last logged here."""

    @property
    def store(self) -> FailureStore:
        return self._store

    def attempt(self, address: str, presented: str, digest: bytes) -> Attempt:
        return Attempt(address, presented, digest)

    def subjects(self, attempt: Attempt) -> tuple[Subject, Subject]:
        """Whom a failure of ``attempt`` counts against: its address, its key's prefix."""
        if attempt.subjects is None:
            prefix = prefix_digest(attempt.presented, self.settings.key_prefix_chars)
            attempt.subjects = (
                Subject("address", attempt.address, self._limits["address"]),
                Subject("key_prefix", prefix, self._limits["key_prefix"]),
            )
        return attempt.subjects

    def known(self, address: str, digest: bytes) -> bool:
        """This key was accepted from this address within ``known_for_s``: it is checked
        without asking the limiter (a pair served all along is renewed once half of that has
        gone: a served request costs one dict lookup here)."""
        pair = (address, digest)
        until = self._known.get(pair)
        if until is None:
            return False
        now = self._clock()
        if until <= now:
            return False
        if until - now < self.settings.known_for_s / 2:
            self._remember(pair, now)
        return True

    async def admit(self, attempt: Attempt) -> None:
        """Return if ``attempt``'s key may be checked; ``AuthThrottled`` (429) if not."""
        if self.known(attempt.address, attempt.digest):
            return  # served from here before: no subject is looked at (nor made)
        now = self._clock()
        subjects = self.subjects(attempt)
        for subject in subjects:
            until = self._locked_until.get(subject.key)
            if until is not None:
                if until > now:
                    raise self._refusal(subject, until - now)
                del self._locked_until[subject.key]
        waits = await self._store.locked_for(subjects)
        for subject, wait in zip(subjects, waits, strict=True):
            if wait > 0:
                self._remember_lockout(subject, wait)
                raise self._refusal(subject, wait)

    def succeeded(self, attempt: Attempt) -> None:
        """The key was accepted: from this address it is exempt for ``known_for_s``."""
        self._remember((attempt.address, attempt.digest), self._clock())

    def _remember(self, pair: tuple[str, bytes], now: float) -> None:
        self._known[pair] = now + self.settings.known_for_s
        self._known.move_to_end(pair)
        if len(self._known) > self.settings.tracked:
            self._known.popitem(last=False)

    async def failed(self, attempt: Attempt) -> None:
        """The key was refused (401): count it; log each lockout it starts."""
        self._known.pop((attempt.address, attempt.digest), None)
        self._observer.failed()
        subjects = self.subjects(attempt)
        outcomes = await self._store.fail(subjects)
        for subject, outcome in zip(subjects, outcomes, strict=True):
            if outcome.locked_s > 0:
                self._remember_lockout(subject, outcome.locked_s)
            if outcome.started:
                self._observer.locked(subject.kind)
                if self._first_in_window(subject):
                    self._log_lockout(subject, attempt.address, outcome.locked_s)

    def _remember_lockout(self, subject: Subject, wait_s: float) -> None:
        self._locked_until[subject.key] = self._clock() + wait_s
        self._locked_until.move_to_end(subject.key)
        if len(self._locked_until) > self.settings.tracked:
            self._locked_until.popitem(last=False)

    def _first_in_window(self, subject: Subject) -> bool:
        """One log line per lockout: a subject locked again within its window (a guesser
        keeping to the limit) is the same lockout."""
        now = self._clock()
        last = self._logged.pop(subject.key, None)
        if last is not None and now - last < subject.limit.window_s:
            self._logged[subject.key] = last
            return False
        self._logged[subject.key] = now
        if len(self._logged) > self.settings.tracked:
            self._logged.popitem(last=False)
        return True

    def _refusal(self, subject: Subject, wait_s: float) -> AuthThrottled:
        self._observer.refused(subject.kind)
        limit = subject.limit
        whose = "from this address" if subject.kind == "address" else "of keys beginning so"
        return AuthThrottled(
            f"too many failed key checks {whose}: the limit is {limit.failures} within "
            f"{limit.window_s:g} s; try again in {math.ceil(wait_s)} s",
            retry_after_s=wait_s,
        )

    def _log_lockout(self, subject: Subject, address: str, wait_s: float) -> None:
        limit = subject.limit
        if subject.kind == "address":
            whom = f"refusing {address}"
        else:
            whom = f"refusing keys of prefix #{subject.name} (the last from {address})"
        log.warning(
            "failed key checks: %d within %.0f s; %s for %d s",
            limit.failures,
            limit.window_s,
            whom,
            math.ceil(wait_s),
        )
