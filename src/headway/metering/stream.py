"""The JetStream side of usage events, shared by the relay (publisher) and the billing
source (consumer): where the stream is, what it is, and how to stay connected to it.

The stream keeps every event on disk (``ensure_stream`` checks its storage and the servers'
fsync, ``stream_guard.py``) and drops a re-published event whose ``Nats-Msg-Id`` (our
request id) it has seen within ``duplicate_window_s``; beyond the window the consumer's
ledger deduplicates by request id. It is bounded and refuses a publish once full
(``discard`` NEW): the event stays in the gateway's outbox, and a full outbox answers 503
``metering_unavailable``, so billing refuses work rather than drop unbilled events. Its
retention is LIMITS: ``max_age_s`` is what bounds how long the consumer may be away.

``connect`` reconnects forever, every ``reconnect_wait_s``: an outage of NATS is a wait,
never a crash, logged once when it starts and once on recovery, not per failed attempt.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext, api
from nats.js.errors import APIError

from headway.metering.stream_guard import (
    STREAM_NAME_IN_USE,
    OnceProbe,
    Owned,
    SyncProbe,
    VarzProbe,
    check_durability,
    monitor_urls,
    reconcile,
)

log = logging.getLogger(__name__)

STREAM_FULL = 10077
"""JetStream's err_code: a publish refused, the stream being at its ``max_bytes``."""

__all__ = ["STREAM_NAME_IN_USE", "StreamConfig", "connect", "ensure_stream", "sync_probe"]


@dataclass(frozen=True, slots=True)
class StreamConfig:
    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    """NATS URLs of one cluster (``settings.nats_url``, split at commas)."""
    stream: str = "USAGE"
    subject: str = "usage.events"
    duplicate_window_s: float = 120.0
    """JetStream drops a re-published event with a ``Nats-Msg-Id`` seen this recently."""
    durable: str = "billing"
    """The billing consumer's durable name: its position survives consumer restarts."""
    ack_wait_s: float = 30.0
    """A delivered, unacknowledged event is delivered again after this long."""
    max_ack_pending: int = 20_000
    """At most this many events delivered and not yet acknowledged."""
    storage: api.StorageType = api.StorageType.FILE
    replicas: int = 1
    max_age_s: float = 0.0
    """Messages older than this are removed (0: kept for ever). The settings bound it."""
    max_bytes: int = -1
    """The stream holds at most this many bytes (-1: no limit). The settings bound it."""
    max_msg_size: int = -1
    """A bigger message is refused (-1: only NATS's max_payload)."""
    discard: api.DiscardPolicy = api.DiscardPolicy.NEW
    """Full: refuse the publish (NEW), never drop the oldest messages to make room."""
    update_existing: bool = False
    """An existing stream that differs from this is changed to it, not refused."""
    allow_volatile: bool = False
    """Memory storage, or servers that do not fsync every write, are accepted (dev)."""
    monitor_urls: tuple[str, ...] = ()
    """The servers' monitoring endpoints (``/varz``); empty: each server's host, port 8222."""
    settings: str = "streams.usage"
    """The settings section of these limits, named in errors."""
    name_setting: str = "billing.stream"
    subject_setting: str = "billing.subject"
    duplicate_window_setting: str = "billing.duplicate_window_s"
    reconnect_wait_s: float = 0.5
    """Between attempts to reach NATS while it is away (forever)."""
    connect_timeout_s: int = 2
    """One attempt to open a connection."""
    request_timeout_s: float = 5.0
    """A JetStream API call, and a PubAck, take at most this long."""
    client_name: str = "headway"


async def connect(config: StreamConfig) -> tuple[NATS, JetStreamContext]:
    """A connection that reconnects forever; returns once NATS has answered (it waits,
    however long NATS is away)."""
    outage = _OutageLog(", ".join(config.servers), config.reconnect_wait_s)
    nc = NATS()
    try:
        await nc.connect(
            servers=list(config.servers),
            name=config.client_name,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            # Annotated int, used as a sleep: seconds as a float work.
            reconnect_time_wait=config.reconnect_wait_s,  # type: ignore[arg-type]
            connect_timeout=config.connect_timeout_s,
            error_cb=outage.error,
            disconnected_cb=outage.disconnected,
            reconnected_cb=outage.reconnected,
        )
    except BaseException:
        # Cut short (cancelled: the relay's bounded flush on stop): close the socket a
        # half-done handshake may have opened, rather than leave it to the collector.
        await nc.close()
        raise
    outage.connected(nc)
    return nc, nc.jetstream(timeout=config.request_timeout_s)


def sync_probe(config: StreamConfig) -> SyncProbe:
    """Reads the fsync setting of the servers ``config`` names, until one has answered."""
    return OnceProbe(VarzProbe(monitor_urls(config.servers, config.monitor_urls)))


def owned(config: StreamConfig) -> Owned:
    """The settings that own the stream's fields, named in a refusal."""
    return Owned(
        config.settings,
        config.name_setting,
        config.subject_setting,
        config.duplicate_window_setting,
    )


async def ensure_stream(
    js: JetStreamContext, config: StreamConfig, probe: SyncProbe | None = None
) -> api.StreamInfo:
    """Create the usage stream, or check the one there; idempotent. Raises
    ``StreamDurabilityError`` or ``StreamConfigError`` (``stream_guard.py``), which no
    retry mends: the caller stops."""
    wanted = api.StreamConfig(
        name=config.stream,
        subjects=[config.subject],
        retention=api.RetentionPolicy.LIMITS,
        storage=config.storage,
        num_replicas=config.replicas,
        duplicate_window=config.duplicate_window_s,
        max_age=config.max_age_s,
        max_bytes=config.max_bytes,
        max_msg_size=config.max_msg_size,
        discard=config.discard,
    )
    await check_durability(
        config.stream,
        config.storage,
        probe or sync_probe(config),
        allow_volatile=config.allow_volatile,
    )
    return await reconcile(js, wanted, owned(config), update_existing=config.update_existing)


class _OutageLog:
    """nats-py's connection callbacks, reduced to one line per outage and one per recovery.

    A JetStream error answer to ``publish_async`` (the stream full: err_code 10077) also
    arrives here, not on the publish's future, which is left to time out: nats-py 2.16's
    ``APIError.from_error`` raises instead of returning. That is the server refusing,
    not an outage, and is logged as such, at most once per ``REFUSAL_LOG_S``."""

    REFUSAL_LOG_S = 60.0

    def __init__(self, servers: str, reconnect_wait_s: float) -> None:
        self._servers = servers
        self._reconnect_wait_s = reconnect_wait_s
        self._down_since: float | None = None
        self._errors_this_outage = 0
        self._client: NATS | None = None
        self.errors = 0
        """Failed attempts and connection errors so far."""
        self.refusals = 0
        """JetStream error answers to publishes so far."""
        self._refusal_logged_at = -math.inf

    async def error(self, exc: Exception) -> None:
        if isinstance(exc, APIError):
            self._refused(exc)
            return
        self.errors += 1
        self._errors_this_outage += 1
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning(
                "NATS at %s unreachable (%s: %s); retrying every %.1f s, logged once per outage",
                self._servers,
                type(exc).__name__,
                exc,
                self._reconnect_wait_s,
            )

    def _refused(self, exc: APIError) -> None:
        self.refusals += 1
        now = time.monotonic()
        if now - self._refusal_logged_at < self.REFUSAL_LOG_S:
            return
        self._refusal_logged_at = now
        full = exc.err_code == STREAM_FULL
        log.warning(
            "JetStream at %s refused a publish (%s, err_code %s)%s; %d refusals so far",
            self._servers,
            exc.description,
            exc.err_code,
            ": the stream is at its max_bytes; what it refused stays where it came from"
            if full
            else "",
            self.refusals,
        )

    async def disconnected(self) -> None:
        if self._client is not None and self._client.is_closed:
            return  # closed on purpose
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning(
                "NATS at %s: connection lost; reconnecting every %.1f s",
                self._servers,
                self._reconnect_wait_s,
            )

    async def reconnected(self) -> None:
        self.connected(self._client)

    def connected(self, client: NATS | None) -> None:
        self._client = client
        if self._down_since is not None:
            log.warning(
                "NATS at %s reachable again after %.1f s (%d failed attempts)",
                self._servers,
                time.monotonic() - self._down_since,
                self._errors_this_outage,
            )
        self._down_since = None
        self._errors_this_outage = 0
