"""What the Batch API's routes read: the batch store, the file store, their limits, and
the request limits a batch line meets when it runs (its body is checked at upload)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from headway.batches.filestore import FileStore
from headway.batches.store import BatchStore
from headway.gateway.snapshots import Snapshots
from headway.settings import BatchSettings, LimitsSettings


@dataclass(frozen=True, slots=True)
class BatchParts:
    store: BatchStore
    files: FileStore
    settings: BatchSettings
    snapshots: Snapshots
    wall_clock: Callable[[], float]
    limits: LimitsSettings = field(default_factory=LimitsSettings)
    """The gateways' request limits (``gateway.limits``): a line's body must fit them."""

    def now(self) -> int:
        return int(self.wall_clock())
