"""A gateway's metering from settings: its outbox, and in shared mode the relay to NATS.

``OutboxMetering`` is what ``GatewayService`` owns (the ``Metering`` protocol): the
request path records into the outbox; ``start`` opens it and, with ``nats_url`` set,
puts the relay on the service's background as an essential loop; ``close`` (once the
service's background, the relay's loop among it, has stopped and no request is left)
relays the outbox one last time, for at most ``gateway.outbox_flush_s``
(``Relay.flush``), then closes it, and logs how many events went and how many stay for
the next start of the same gateway id. In embedded mode there is no relay: the billing
consumer reads the outbox files themselves.
"""

from __future__ import annotations

import dataclasses
import logging
import socket

from nats.js import api

from headway.background import Background
from headway.metering.event import UsageEvent
from headway.metering.outbox import Outbox
from headway.metering.relay import Relay
from headway.metering.stream import StreamConfig
from headway.settings import Settings, UsageStreamSettings, WorkStreamSettings

log = logging.getLogger(__name__)


def stream_config(settings: Settings) -> StreamConfig:
    billing = settings.billing
    servers = tuple(url.strip() for url in (settings.nats_url or "").split(",") if url.strip())
    config = StreamConfig(
        servers=servers,
        stream=billing.stream,
        subject=billing.subject,
        duplicate_window_s=billing.duplicate_window_s,
        durable=billing.consumer,
        ack_wait_s=billing.ack_wait_s,
    )
    return with_limits(config, settings, settings.streams.usage, "streams.usage")


def with_limits(
    config: StreamConfig,
    settings: Settings,
    limits: UsageStreamSettings | WorkStreamSettings,
    section: str,
) -> StreamConfig:
    """``config`` with one stream's limits and the streams' checks from settings."""
    streams = settings.streams
    return dataclasses.replace(
        config,
        storage=api.StorageType(limits.storage),
        replicas=limits.replicas,
        max_age_s=limits.max_age_s,
        max_bytes=limits.max_bytes,
        max_msg_size=limits.max_msg_size,
        discard=api.DiscardPolicy(limits.discard),
        update_existing=streams.update,
        allow_volatile=streams.allow_volatile,
        monitor_urls=streams.monitor_url_list,
        settings=section,
    )


def gateway_id(settings: Settings) -> str:
    """The setting, or HOSTNAME-PORT: stable across restarts of one gateway."""
    return settings.gateway.id or f"{socket.gethostname()}-{settings.gateway.port}"


class OutboxMetering:
    def __init__(self, outbox: Outbox, relay: Relay | None, flush_s: float = 10.0) -> None:
        self.outbox, self.relay = outbox, relay
        self._flush_s = flush_s
        self.left_at_start: int | None = None
        """Events found in the outbox when it opened: what the last run of this gateway id
        left (its stop's flush ran out of time, or it was killed), relayed from now on."""

    @property
    def full(self) -> bool:
        return self.outbox.full

    async def record(self, event: UsageEvent) -> None:
        await self.outbox.record(event)

    async def start(self, background: Background) -> None:
        await self.outbox.start()
        self.left_at_start = self.outbox.depth
        if self.relay is not None:
            if self.left_at_start:
                log.info(
                    "usage outbox %s: %d events left by this gateway's last run; relaying them",
                    self.outbox.path,
                    self.left_at_start,
                )
            background.essential("usage_relay", self.relay.run)

    async def close(self) -> None:
        """The last flush (shared mode), then the outbox closed; for after the relay's loop
        has been cancelled and the request path has stopped recording."""
        if self.relay is None:
            await self.outbox.close()
            return
        if self.outbox.depth:
            log.info(
                "usage outbox %s: the last flush, %d events, for at most %g s",
                self.outbox.path,
                self.outbox.depth,
                self._flush_s,
            )
        try:
            flushed = await self.relay.flush(self._flush_s)
        finally:
            await self.outbox.close()  # commits the flush's last removals: depth is exact
        left = self.outbox.depth
        log.log(
            logging.INFO if flushed.emptied else logging.WARNING,
            "usage outbox %s on stop: %d events relayed in %.2f s, %d left%s",
            self.outbox.path,
            flushed.relayed,
            flushed.seconds,
            left,
            ""
            if flushed.emptied
            else f" (the flush stopped at gateway.outbox_flush_s = {self._flush_s:g} s); "
            "relayed when this gateway id starts again",
        )


def gateway_metering(settings: Settings, gateway: str) -> OutboxMetering:
    outbox = Outbox(
        settings.outbox_dir / f"{gateway}.sqlite3", max_events=settings.billing.outbox_max_events
    )
    relay = Relay(outbox, stream_config(settings)) if settings.nats_url else None
    return OutboxMetering(outbox, relay, settings.gateway.outbox_flush_s)
