"""What the Batch API's routes read: the batch store, the file store, their limits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from headway.batches.filestore import FileStore
from headway.batches.store import BatchStore
from headway.gateway.snapshots import Snapshots
from headway.settings import BatchSettings


@dataclass(frozen=True, slots=True)
class BatchParts:
    store: BatchStore
    files: FileStore
    settings: BatchSettings
    snapshots: Snapshots
    wall_clock: Callable[[], float]

    def now(self) -> int:
        return int(self.wall_clock())
