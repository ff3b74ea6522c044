"""The registry on a SQLite file: the embedded default (``headway up`` with no Postgres).

Writers are the CLI, the admin API, ``headway up``'s first start and the benchmarks;
gateways mostly read, a whole ``Snapshot`` at a time (``storage.sqlite``: WAL, a
connection per call, so a ``Registry`` is safe to share between threads).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from headway.registry.demo import DEMO_ADMIN_KEY as DEMO_ADMIN_KEY
from headway.registry.demo import DEMO_TENANTS as DEMO_TENANTS
from headway.registry.errors import REGISTRY
from headway.registry.errors import RegistryError as RegistryError  # callers catch it here
from headway.registry.rules import DEFAULT_BURST as DEFAULT_BURST
from headway.registry.rules import DEFAULT_RATE as DEFAULT_RATE
from headway.registry.sql import SqlRegistry
from headway.storage.sqlite import SqliteDialect


class Registry(SqlRegistry):
    def __init__(
        self, path: Path, *, clock: Callable[[], float] = time.time, timeout_s: float = 10.0
    ) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        super().__init__(SqliteDialect(path, timeout_s, failures=REGISTRY), clock)
