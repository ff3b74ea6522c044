"""The registry as the request path reads it: one immutable snapshot, replaced whole.

A background loop reloads keys, tenants and models every ``registry_refresh_s``;
readers see either the old snapshot or the new one, never a mix. A reload that
fails keeps the previous snapshot (the loop logs and counts it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from headway.registry.model import Snapshot


class Snapshots:
    def __init__(self, load: Callable[[], Snapshot]) -> None:
        self._load = load
        self.current = Snapshot()

    async def refresh(self) -> None:
        """Load a new snapshot (off the event loop: it reads SQLite) and switch to it."""
        self.current = await asyncio.to_thread(self._load)
