"""The JetStream side of usage events, shared by the relay (publisher) and the billing
source (consumer): where the stream is, what it is, and how to stay connected to it.

The stream keeps every event on disk (``storage`` FILE; the servers in production and
tests run with ``sync_interval: always``, so a PubAck means fsynced) and drops a
re-published event whose ``Nats-Msg-Id`` (our request id) it has seen within
``duplicate_window_s``: the relay may publish a row twice (its PubAck was lost in an
outage) and the stream still holds it once. Beyond the window the consumer's ledger
deduplicates by request id.

``connect`` reconnects forever, every ``reconnect_wait_s``: an outage of NATS is a wait,
never a crash. nats-py calls its error callback once per failed attempt; here that is
counted, and logged once per outage (and once on recovery), not twice a second.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext, api
from nats.js.errors import BadRequestError

log = logging.getLogger(__name__)

STREAM_NAME_IN_USE = 10058
"""JetStream's err_code: a stream of this name exists with another configuration."""


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


async def ensure_stream(js: JetStreamContext, config: StreamConfig) -> api.StreamInfo:
    """Create the stream, or bring an existing one to ``config``; idempotent."""
    wanted = api.StreamConfig(
        name=config.stream,
        subjects=[config.subject],
        retention=api.RetentionPolicy.LIMITS,
        storage=config.storage,
        num_replicas=config.replicas,
        duplicate_window=config.duplicate_window_s,
    )
    try:
        return await js.add_stream(wanted)
    except BadRequestError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise
    return await js.update_stream(wanted)


class _OutageLog:
    """nats-py's connection callbacks, reduced to one line per outage and one per recovery."""

    def __init__(self, servers: str, reconnect_wait_s: float) -> None:
        self._servers = servers
        self._reconnect_wait_s = reconnect_wait_s
        self._down_since: float | None = None
        self._errors_this_outage = 0
        self._client: NATS | None = None
        self.errors = 0
        """Failed attempts and connection errors so far."""

    async def error(self, exc: Exception) -> None:
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
