"""The discovery seam: ``addresses()`` answers a pool's replica base URLs now.

The gateway asks once at start-up and then every ``dns_interval_s``; the pool
keeps the replicas it knows, adds new ones (they take traffic once their own
``/readyz`` says so) and drops vanished ones (work already sent finishes). A
source that cannot answer raises ``DiscoveryFailed`` and the last answer stands.
"""

from __future__ import annotations

from typing import Protocol


class DiscoveryFailed(Exception):
    """The replicas' addresses could not be looked up."""


class Discovery(Protocol):
    async def addresses(self) -> list[str]: ...
