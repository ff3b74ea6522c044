"""What one request accumulates on its way through the gateway."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

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
    texts: int = 0
