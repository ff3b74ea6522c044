"""What one request accumulates on its way through the gateway."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from headway.gateway.quota.store import Quota
from headway.http.asgi import Request
from headway.registry.model import Tier


def _new_request_id() -> str:
    return os.urandom(16).hex()


@dataclass(slots=True)
class Call:
    """The request id is always ours, never the client's: later it keys billing dedupe."""

    request: Request
    request_id: str = field(default_factory=_new_request_id)
    tenant: str = ""
    tier: Tier = "interactive"
    quota: Quota | None = None
    texts: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with the response whatever it is (the rate-limit headers)."""
