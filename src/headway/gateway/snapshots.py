"""The registry as the request path reads it: one immutable snapshot, replaced whole.

Two background loops keep it current: ``poll`` reads the registry's change counter
every ``registry_poll_s`` (one small query) and reloads when it moved, so a split, a
revoked key or a new tenant reaches every gateway within about that; ``refresh``
reloads every ``registry_refresh_s`` whatever the counter says. Readers see either the
old snapshot or the new one, never a mix. A reload that fails keeps the previous
snapshot (the loop logs and counts it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from headway.registry.model import Snapshot


class Snapshots:
    def __init__(
        self, load: Callable[[], Snapshot], changes: Callable[[], int] | None = None
    ) -> None:
        """``changes``: the registry's change counter (None: ``poll`` reloads every time)."""
        self._load = load
        self._changes = changes
        self.current = Snapshot()

    async def refresh(self) -> None:
        """Load a new snapshot (off the event loop: it reads a database) and switch to it."""
        self.current = await asyncio.to_thread(self._load)

    async def poll(self) -> None:
        """Reload if the registry changed since the current snapshot was read."""
        changes = self._changes
        if changes is not None and await asyncio.to_thread(changes) == self.current.changes:
            return
        await self.refresh()
