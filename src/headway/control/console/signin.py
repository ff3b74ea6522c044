"""How a ``POST /console/login`` ended, as its counter labels it."""

from __future__ import annotations

from typing import Literal

SignInOutcome = Literal["ok", "bad_form", "bad_key", "not_admin", "throttled"]
SIGNIN_OUTCOMES: tuple[SignInOutcome, ...] = ("ok", "bad_form", "bad_key", "not_admin", "throttled")
"""Signed in; the form's token missing, expired or from another site; a key that is no key;
a tenant's key; refused before the key was checked (too many failed key checks from the
address or for the prefix: ``gateway/auth/limiter.py``)."""
