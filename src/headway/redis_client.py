"""The one way headway connects to Redis (quotas, failed key checks, the results cache):
short timeouts, one immediate retry on a broken connection (a restarted server leaves the
pool's sockets dead), none on a timeout, which would double it; the user, password and
TLS files of the instance from settings (``RedisEndpoint``).

Two instances, never one (docs/redis.md): ``quota_endpoint`` is ``redis_url``, where the
buckets live under ``noeviction``; ``cache_endpoint`` is ``redis.cache_url``, the cache's
evicting one. A password is never part of a repr or of ``redacted``, the form to log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.retry import Retry

from headway.settings import RedisInstanceSettings, Settings

REDIS_FAILURES: tuple[type[Exception], ...] = (RedisError, OSError, RuntimeError)
"""What a call to a Redis that is away raises: redis-py's errors, OSError (TimeoutError,
a refused connect), and RuntimeError, uvloop's "unable to perform operation on
<TCPTransport closed=True>" when the server dies while redis-py re-establishes a pooled
connection (seen in the chaos run as a 500 on /v1/embeddings)."""


@dataclass(frozen=True, slots=True)
class RedisEndpoint:
    """One Redis instance: where it is and how to sign in."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @classmethod
    def of(cls, url: str, instance: RedisInstanceSettings) -> RedisEndpoint:
        return cls(
            url,
            instance.username,
            instance.password,
            instance.tls_ca,
            instance.tls_cert,
            instance.tls_key,
        )

    @property
    def redacted(self) -> str:
        """The URL without any password it carries: what a log line may show."""
        return redact(self.url)

    def client_kwargs(self) -> dict[str, Any]:
        """What ``Redis.from_url`` takes beyond the URL. A URL's own user and password win
        over these in redis-py, so settings refuse a password given both ways."""
        kwargs: dict[str, Any] = {}
        if self.username is not None:
            kwargs["username"] = self.username
        if self.password is not None:
            kwargs["password"] = self.password
        if urlsplit(self.url).scheme == "rediss":
            # Verify the server always; a CA file replaces the system's trust store.
            kwargs["ssl_cert_reqs"] = "required"
            kwargs["ssl_check_hostname"] = True
            if self.tls_ca is not None:
                kwargs["ssl_ca_certs"] = str(self.tls_ca)
            if self.tls_cert is not None and self.tls_key is not None:
                kwargs["ssl_certfile"] = str(self.tls_cert)
                kwargs["ssl_keyfile"] = str(self.tls_key)
        return kwargs


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def quota_endpoint(settings: Settings) -> RedisEndpoint | None:
    """The quota instance (``redis_url``): buckets, gateway heartbeats, failed key checks."""
    if settings.redis_url is None:
        return None
    return RedisEndpoint.of(settings.redis_url, settings.redis.quota)


def cache_endpoint(settings: Settings) -> RedisEndpoint | None:
    """The results cache's instance (``redis.cache_url``), if it has one."""
    if settings.redis.cache_url is None:
        return None
    return RedisEndpoint.of(settings.redis.cache_url, settings.redis.cache)


def connect(endpoint: RedisEndpoint | str, timeout_s: float) -> aioredis.Redis:
    if isinstance(endpoint, str):
        endpoint = RedisEndpoint(endpoint)
    return aioredis.Redis.from_url(
        endpoint.url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), retries=1, supported_errors=(RedisConnectionError,)),
        **endpoint.client_kwargs(),
    )
