"""What every stage after authentication knows about the request it serves.

The values the request path makes for each request (here, in ``stages/`` and
``endpoints/``) are slotted dataclasses that no stage changes once made, but not
``frozen``: CPython 3.11 builds a frozen one with an ``object.__setattr__`` per field,
and the path builds about ten per request (docs/DESIGN.md, "Decisions").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from headway.registry.model import Tenant

Clock = Callable[[], float]


@dataclass(slots=True)
class Deadline:
    """When the request must be answered, on the gateway's monotonic clock."""

    at: float
    clock: Clock

    def remaining_s(self) -> float:
        return self.at - self.clock()


@dataclass(slots=True)
class RequestContext:
    """Who asked, through which route, by when, and what every answer must carry.

    ``request_id`` is the edge's (ours, never the client's); ``response_headers`` is
    the request's own dict, which the edge adds to the answer whatever it is.
    """

    request_id: str
    route: str
    tenant: Tenant
    deadline: Deadline
    response_headers: dict[str, str]
