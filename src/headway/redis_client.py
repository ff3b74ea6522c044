"""The one way headway connects to Redis (quotas, the results cache): short timeouts, and
one immediate retry on a broken connection (a restarted server leaves the pool's sockets
dead), none on a timeout, which would double it."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry


def connect(url: str, timeout_s: float) -> aioredis.Redis:
    return aioredis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), retries=1, supported_errors=(RedisConnectionError,)),
    )
