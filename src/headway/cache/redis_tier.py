"""The shared tier: entries in Redis, seen by every gateway, failing open.

Each entry is one string ``{prefix}{scope}:{key hex}`` holding ``Entry.encode()``,
written with ``SET EX ttl``. ``get_many`` is one ``MGET``; ``put_many`` one
pipeline of ``SET``s (no transaction); ``drop_scope`` walks the scope's keys with
``SCAN MATCH`` and ``UNLINK``s each page (freed in Redis's background thread).

A cache is an optimisation, so Redis trouble never reaches a request. Every call
is bounded by ``deadline_s`` (and each socket operation by ``timeout_s``); any
failure makes ``get_many`` answer all misses and ``put_many`` do nothing. It is
counted in ``errors``, logged once (a warning when the tier goes down, an info
line when it answers again), and the tier is skipped without a network call for
``retry_s``, so a dead server costs one timeout per ``retry_s``, not one per
request. A value that does not decode reads as a miss and counts as an error.
No key or value is logged: a key is a digest, but it still names a text.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from headway import redis_client
from headway.cache.entry import Entry, EntryCorrupt
from headway.redis_client import REDIS_FAILURES, RedisEndpoint

logger = logging.getLogger(__name__)

_FAILURES = REDIS_FAILURES  # OSError among them covers TimeoutError (the deadline)
_SCAN_PAGE = 1000
_KEY_HEX_CHARS = 64


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis ``MATCH`` pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


class RedisCache:
    """Entries in Redis under ``prefix``, one namespace per scope; never raises to callers."""

    def __init__(
        self,
        endpoint: RedisEndpoint | str,
        ttl_s: int,
        prefix: str = "headway:cache:",
        *,
        timeout_s: float = 0.05,
        deadline_s: float = 0.2,
        retry_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._redis = redis_client.connect(endpoint, timeout_s)
        self.ttl_s = ttl_s
        self.prefix = prefix
        self._deadline_s = deadline_s
        self._retry_s = retry_s
        self._clock = clock
        self._skip_until: float | None = None
        """While set, Redis failed and is not asked again before this time."""
        self._errors = 0

    @property
    def errors(self) -> int:
        """Failed calls (and undecodable values), since start."""
        return self._errors

    @property
    def failing(self) -> bool:
        """True from a failure until Redis answers again."""
        return self._skip_until is not None

    def redis_key(self, scope: str, key: bytes) -> str:
        return f"{self.prefix}{scope}:{key.hex()}"

    async def get_many(self, scope: str, keys: Sequence[bytes]) -> list[Entry | None]:
        """Each key's entry or ``None``, in order; all ``None`` while Redis is failing."""
        if not keys or not self._admit():
            return [None] * len(keys)
        names = [self.redis_key(scope, key) for key in keys]
        try:
            async with asyncio.timeout(self._deadline_s):
                values: list[bytes | str | None] = await self._redis.mget(names)
        except _FAILURES as exc:
            self._failed("get", exc)
            return [None] * len(keys)
        self._answered()
        found: list[Entry | None] = []
        for value in values:
            entry = None
            if isinstance(value, bytes):  # always, as responses are not decoded
                try:
                    entry = Entry.decode(value)
                except EntryCorrupt:
                    self._errors += 1
            found.append(entry)
        return found

    async def put_many(self, scope: str, items: Sequence[tuple[bytes, Entry]]) -> None:
        """``SET EX`` each entry in one round trip; nothing while Redis is failing."""
        if not items or not self._admit():
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipeline:
                for key, entry in items:
                    pipeline.set(self.redis_key(scope, key), entry.encode(), ex=self.ttl_s)
                async with asyncio.timeout(self._deadline_s):
                    await pipeline.execute()
        except _FAILURES as exc:
            self._failed("put", exc)
            return
        self._answered()

    async def drop_scope(self, scope: str) -> bool:
        """Delete every entry of ``scope``; False if Redis failed (the rest expire by TTL).

        Tried even while the tier is skipped: it is rare and worth one attempt. Only
        this scope's keys match (its name is escaped, and the hex key is exactly 64
        characters, so scope ``a`` does not match scope ``a:b``).
        """
        pattern = f"{self.prefix}{glob_escape(scope)}:" + "?" * _KEY_HEX_CHARS
        try:
            cursor = 0
            while True:
                cursor, names = await self._redis.scan(cursor, match=pattern, count=_SCAN_PAGE)
                if names:
                    await self._redis.unlink(*names)
                if cursor == 0:
                    break
        except _FAILURES as exc:
            self._failed("drop", exc)
            return False
        self._answered()
        return True

    async def close(self) -> None:
        await self._redis.aclose()

    def _admit(self) -> bool:
        """Whether to call Redis now: yes unless failing and ``retry_s`` has not passed.

        When it has, this call is the probe, and the next one is moved ``retry_s`` on
        first, so concurrent requests do not all try a dead server at once.
        """
        if self._skip_until is None:
            return True
        now = self._clock()
        if now < self._skip_until:
            return False
        self._skip_until = now + self._retry_s
        return True

    def _failed(self, operation: str, exc: BaseException) -> None:
        self._errors += 1
        if self._skip_until is None:
            logger.warning(
                "results cache: Redis %s failed (%s: %s); skipping the shared tier, "
                "retrying every %.1f s",
                operation,
                type(exc).__name__,
                exc,
                self._retry_s,
            )
        self._skip_until = self._clock() + self._retry_s

    def _answered(self) -> None:
        if self._skip_until is not None:
            self._skip_until = None
            logger.info("results cache: Redis answers again; using the shared tier")
