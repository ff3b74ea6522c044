"""How a ``POST /console/login`` ended, and its counter."""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter

SignInOutcome = Literal["ok", "bad_form", "bad_key", "not_admin", "throttled"]
SIGNIN_OUTCOMES: tuple[SignInOutcome, ...] = ("ok", "bad_form", "bad_key", "not_admin", "throttled")
"""Signed in; the form's token missing, expired or from another site; a key that is no key;
a tenant's key; refused before the key was checked (too many failed key checks from the
address or for the prefix: ``gateway/auth/limiter.py``)."""


class SignInCounter:
    """``headway_console_signin_total``, by outcome."""

    def __init__(self, registry: CollectorRegistry) -> None:
        counter = Counter(
            "headway_console_signin_total",
            "POST /console/login answers by outcome: ok, bad_form (the form's token missing, "
            "expired or from another site), bad_key, not_admin (a tenant's key), throttled "
            "(too many failures: refused before the key was checked).",
            ["outcome"],
            registry=registry,
        )
        self._by_outcome = {outcome: counter.labels(outcome) for outcome in SIGNIN_OUTCOMES}

    def count(self, outcome: SignInOutcome) -> None:
        self._by_outcome[outcome].inc()
