"""The registry on PostgreSQL: shared mode, many gateways.

A registry keeps one connection (``storage.postgres``): a gateway's calls are its poll
every ``registry_poll_s``, its rollout ticks and admin writes, and a fresh connection
each time would cost Postgres a backend process each. A failed call raises
``RegistryUnavailable``. Writes take the advisory write lock first, so what a write
checks cannot change under it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from headway.registry.errors import REGISTRY
from headway.registry.sql import SqlRegistry
from headway.storage.postgres import PostgresDialect


class PostgresRegistry(SqlRegistry):
    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        connect_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(PostgresDialect(url, connect_timeout_s, failures=REGISTRY), clock)
