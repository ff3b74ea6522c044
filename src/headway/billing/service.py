"""``headway run billing``: the consumer process, its background loops and its HTTP face.

Its loops: the consumer (source → ledger, once per request id, ``consumer.py``; essential),
the export of closed hours every ``EXPORT_INTERVAL_S`` when ``billing.export_url`` is set,
and in shared mode the usage stream's fill and limits, for ``/metrics``, every
``STREAM_INTERVAL_S``. The source is JetStream's durable consumer when ``nats_url`` is set,
else the gateways' outboxes in the data dir (embedded mode, what ``headway up`` runs); the
ledger is Postgres when ``postgres_url`` is set, else SQLite in the data dir.

A ledger unreachable at start or lost later (Postgres not up yet, or restarting) is waited
out with capped, jittered backoff (``ledger_link.py``), the batch held and nothing acked,
while ``/healthz`` answers and ``/readyz`` says 503; ``headway_billing_ledger_up`` tells which.
"""

from __future__ import annotations

import logging
import time

import aiohttp

from headway.background import Background
from headway.billing.consumer import Consumer
from headway.billing.customers import customers_of
from headway.billing.export import HttpMeterClient, export_closed_hours
from headway.billing.ledger.base import Ledger
from headway.billing.ledger.open import open_ledger
from headway.billing.ledger_link import Backoff, LedgerLink, open_when_reachable
from headway.billing.metrics import BillingMetrics
from headway.billing.sources.base import EventSource
from headway.billing.sources.jetstream import JetStreamSource
from headway.billing.sources.outbox import OutboxSource
from headway.billing.sources.planted import planted_source
from headway.http.asgi import App
from headway.http.ops import ops_app
from headway.metering.build import stream_config
from headway.metering.stream_metrics import StreamMetrics
from headway.settings import Settings

log = logging.getLogger(__name__)

EXPORT_INTERVAL_S = 60.0
STREAM_INTERVAL_S = 15.0


def event_source(settings: Settings) -> EventSource:
    if settings.nats_url:
        return JetStreamSource(stream_config(settings))
    return OutboxSource(settings.outbox_dir)


class BillingService:
    def __init__(
        self,
        settings: Settings,
        metrics: BillingMetrics | None = None,
        *,
        source: EventSource | None = None,
    ) -> None:
        """``source``: the events to consume (default: the one the settings name)."""
        self.settings = settings
        self.metrics = metrics or BillingMetrics()
        self.stream_metrics = StreamMetrics(self.metrics.registry)
        self._background = Background()
        self.ledger: Ledger | None = None
        self.source: EventSource | None = source
        self._export_session: aiohttp.ClientSession | None = None
        billing = settings.billing
        self.link = LedgerLink(
            self.metrics, Backoff(billing.ledger_retry_initial_s, billing.ledger_retry_max_s)
        )

    async def start(self) -> None:
        settings, billing = self.settings, self.settings.billing
        if self.source is None:
            self.source = event_source(settings)
        self._background.essential("consumer", self._consume)
        if isinstance(self.source, JetStreamSource):
            self._background.every("stream", STREAM_INTERVAL_S, self.observe_stream)
        if billing.export_url:
            self._export_session = aiohttp.ClientSession()
            self._background.every("export", EXPORT_INTERVAL_S, self.export_once)
        log.info(
            "billing consumer: %s → %s",
            "NATS JetStream" if settings.nats_url else f"outboxes in {settings.outbox_dir}",
            "Postgres" if settings.postgres_url else settings.ledger_path,
        )

    async def _consume(self) -> None:
        """Open the ledger, waiting as long as it is unreachable, then consume for good."""
        settings, billing = self.settings, self.settings.billing
        assert self.source is not None
        self.ledger = await open_when_reachable(
            lambda: open_ledger(settings.postgres_url, settings.ledger_path), self.link
        )
        consumer = Consumer(
            planted_source(settings, self.source),  # the real one unless a test
            self.ledger,
            batch_events=billing.batch_events,
            fetch_wait_s=billing.fetch_wait_s,
            observer=self.metrics,
            link=self.link,
        )
        await consumer.run()

    async def export_once(self) -> None:
        billing = self.settings.billing
        if self.ledger is None or not self.link.up:
            return  # the consumer is waiting for the ledger; the next interval tries again
        assert billing.export_url and self._export_session
        client = HttpMeterClient(billing.export_url, billing.export_api_key, self._export_session)
        report = await export_closed_hours(
            self.ledger,
            client,
            time.time(),
            billing.export_grace_s,
            customers=await customers_of(self.settings),
        )
        if report.sent or report.failed or report.rejected or report.unmapped:
            log.info("billing export: %s", report)

    async def observe_stream(self) -> None:
        if not isinstance(self.source, JetStreamSource):
            return
        info = await self.source.stream_info()
        if info is None:
            self.stream_metrics.failed(self.settings.billing.stream)
        else:
            self.stream_metrics.observe(info)

    async def stop(self) -> None:
        await self._background.stop()
        if self.source is not None:
            await self.source.close()
        if self.ledger is not None:
            await self.ledger.close()
        if self._export_session is not None:
            await self._export_session.close()

    @property
    def ready(self) -> bool:
        return self.ledger is not None and self.source is not None and self.link.up is True


def build_billing_app(service: BillingService) -> App:
    return ops_app(service, service.metrics.registry)
