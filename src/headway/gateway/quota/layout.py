"""The quota Redis checked for a layout that could forget buckets (``redis_layout``).

At start-up an unsafe instance (evicting policy, or the cache's own) stops the gateway:
the operator sees the reason before any tenant is served on it. Found later (Redis was
away at start, or was reconfigured, or failed over to a replica configured otherwise),
the gateway does not stop serving: the store refuses itself and the fallback limits at
a 1/N local share, the documented outage bound, until a check finds the instance safe.
The check runs with every gateway heartbeat; one log line when the verdict changes.
"""

from __future__ import annotations

import logging
from typing import Protocol

from headway.gateway.quota.store import QuotaStoreUnavailable
from headway.redis_client import RedisEndpoint
from headway.redis_layout import RedisLayoutError

logger = logging.getLogger(__name__)


class CheckedStore(Protocol):
    """A shared quota store that can tell whether its instance could forget a bucket."""

    async def check_layout(self, cache: RedisEndpoint | None) -> str | None: ...


class LayoutGuard:
    """Refuses to start on an unsafe quota instance; afterwards, logs each change."""

    def __init__(
        self, store: CheckedStore, cache: RedisEndpoint | None, *, required: bool = True
    ) -> None:
        self._store = store
        self._cache = cache
        self._required = required
        self._starting = True
        self._problem: str | None = None

    async def check(self) -> None:
        """Raises ``RedisLayoutError`` only on the first call (start-up)."""
        starting, self._starting = self._starting, False
        if not self._required:
            if starting:
                logger.warning(
                    "redis.require_noeviction is off: nothing checks that the quota Redis "
                    "never evicts a bucket"
                )
            return
        try:
            problem = await self._store.check_layout(self._cache)
        except QuotaStoreUnavailable:
            return  # unreachable: the fallback's business; checked again next time
        if problem is not None and starting:
            raise RedisLayoutError(problem)
        if problem is not None and self._problem is None:
            logger.error("%s; limiting quotas locally until it is fixed", problem)
        elif problem is None and self._problem is not None:
            logger.info("the quota Redis can no longer evict buckets; using it again")
        self._problem = problem
