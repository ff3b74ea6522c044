"""Brute-force protection for the console's sign-in: failed sign-ins counted per client
address and for the whole gateway process (pure: only the clock is injected).

One rule, a sliding window of failure times, applied twice:

- **per address**: after ``address_failures`` failures from one client address within
  ``address_window_s``, that address is refused, before any key it sends is checked,
  until the oldest of them leaves the window; its next failure locks it again at once.
  One address thus tries at most ``address_failures`` keys every ``address_window_s``.
- **per gateway**: after ``gateway_failures`` failures from all addresses together within
  ``GATEWAY_WINDOW_S`` (a minute), every address is refused until the oldest of them is a
  minute old: a guesser spread over many addresses gets at most that many keys a minute.

An IPv6 client is counted by its /64 (``counted_as``): one host is routinely given a
whole /64, so counting each of its addresses apart would give it 2⁶⁴ tries a window.

A refusal is not a failure: it is not counted, so it never extends a lockout, and the
``retry_after_s`` it carries is the real wait. A success clears its address's failures
(not the gateway's: those were someone else's).

Why a sliding window and not an exponential lockout: the state is at most
``address_failures`` times per address, a refusal says exactly when to come back, and an
operator who mistypes from behind the same NAT as a guesser waits at most one window,
never longer each time. The guesser gains nothing from that: a key is 256 random bits,
and five guesses every fifteen minutes is ~480 a day.

Memory: at most ``address_failures`` times for each of at most ``max_addresses``
addresses (past it, the address whose last failure is oldest is forgotten), and
``gateway_failures`` times for the gateway. While an address is refused nothing of its
is counted, and the gateway counts at most ``gateway_failures`` failures a minute, so
with ``max_addresses ≥ gateway_failures × address_window_s / 60`` only addresses with no
failure left in their window are ever forgotten (defaults: 100 × 15 = 1,500 ≤ 10,000).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

GATEWAY_WINDOW_S = 60.0

Failures = tuple[float, ...]
"""The times of counted failures, oldest first."""
Scope = Literal["address", "gateway"]
"""Whom a lockout refuses: one address, or every address."""

SignInOutcome = Literal["ok", "bad_form", "bad_key", "not_admin", "throttled"]
SIGNIN_OUTCOMES: tuple[SignInOutcome, ...] = ("ok", "bad_form", "bad_key", "not_admin", "throttled")
"""How a ``POST /console/login`` ended: signed in; the form's token missing, expired or from
another site; a key that is no key; a tenant's key; refused before the key was checked."""


@dataclass(frozen=True, slots=True)
class Throttled:
    """Sign-ins refused (``scope``: from one address, or from all) for ``retry_after_s``
    more seconds, after ``failures`` failures within ``window_s``."""

    scope: Scope
    retry_after_s: float
    failures: int
    window_s: float

    @property
    def retry_after(self) -> int:
        """The ``Retry-After`` header's whole seconds: rounded up, at least 1."""
        return max(1, math.ceil(self.retry_after_s))


def counted_as(host: str) -> str:
    """What a client address is counted as: an IPv4 address itself, an IPv6 address its
    /64; anything else (a name, "unknown") as it is."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def in_window(failures: Failures, now: float, window_s: float) -> Failures:
    """The failures still inside the window that ends at ``now``."""
    start = now - window_s
    for index, at in enumerate(failures):
        if at > start:
            return failures[index:]
    return ()


def refusal(
    failures: Failures, now: float, limit: int, window_s: float, scope: Scope
) -> Throttled | None:
    """Refused while ``limit`` failures are in the window: until the ``limit``-th newest
    leaves it."""
    live = in_window(failures, now, window_s)
    if len(live) < limit:
        return None
    return Throttled(scope, live[-limit] + window_s - now, limit, window_s)


class SignInAttempts:
    """Counts failed sign-ins and says whom to refuse (see the module's docstring)."""

    def __init__(
        self,
        *,
        address_failures: int = 5,
        address_window_s: float = 900.0,
        gateway_failures: int = 100,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min(address_failures, gateway_failures, max_addresses) < 1 or address_window_s <= 0:
            raise ValueError("sign-in limits must be positive")
        self._address_failures = address_failures
        self._address_window_s = address_window_s
        self._gateway_failures = gateway_failures
        self._max_addresses = max_addresses
        self._clock = clock
        self._by_address: OrderedDict[str, Failures] = OrderedDict()
        """Least recently failed first."""
        self._gateway: Failures = ()

    @property
    def tracked_addresses(self) -> int:
        return len(self._by_address)

    def refused(self, address: str) -> Throttled | None:
        """Whether a sign-in from ``address`` is refused now (its own lockout first)."""
        now = self._clock()
        mine = self._by_address.get(address)
        if mine is not None:
            if not in_window(mine, now, self._address_window_s):
                del self._by_address[address]  # nothing left to remember
            else:
                refused = self._address_rule(mine, now)
                if refused is not None:
                    return refused
        return self._gateway_rule(self._gateway, now)

    def failed(self, address: str) -> list[Throttled]:
        """Count a failed sign-in from ``address``; the lockouts it starts (its address's,
        the gateway's), each returned once, by the failure that starts it."""
        now = self._clock()
        before = self._by_address.pop(address, ())
        mine = (*in_window(before, now, self._address_window_s), now)[-self._address_failures :]
        self._by_address[address] = mine  # now the most recently failed
        while len(self._by_address) > self._max_addresses:
            self._by_address.popitem(last=False)
        gateway_before = self._gateway
        live = in_window(gateway_before, now, GATEWAY_WINDOW_S)
        self._gateway = (*live, now)[-self._gateway_failures :]
        started = []
        if self._address_rule(before, now) is None:
            started.append(self._address_rule(mine, now))
        if self._gateway_rule(gateway_before, now) is None:
            started.append(self._gateway_rule(self._gateway, now))
        return [lockout for lockout in started if lockout is not None]

    def succeeded(self, address: str) -> None:
        """A sign-in from ``address`` succeeded: forget its failures."""
        self._by_address.pop(address, None)

    def _address_rule(self, failures: Failures, now: float) -> Throttled | None:
        return refusal(failures, now, self._address_failures, self._address_window_s, "address")

    def _gateway_rule(self, failures: Failures, now: float) -> Throttled | None:
        return refusal(failures, now, self._gateway_failures, GATEWAY_WINDOW_S, "gateway")
