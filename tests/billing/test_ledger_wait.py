"""The consumer waits for a Postgres ledger that is down at start and after a loss.

A throw-away Postgres is started only after ``BillingService`` started, then stopped
and started again under load: every event lands once, nothing is acked before its
commit, the gauge and the retry counter follow, and each outage is two log lines.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from headway.billing.metrics import BillingMetrics
from headway.billing.service import BillingService
from headway.billing.sources.base import Delivery
from headway.metering.event import encode
from headway.settings import Settings
from headway_tools.testing.postgres_server import PostgresServer
from tests.billing.conftest import usage_event


class QueueSource:
    """Deliveries pushed by the test; ``fetch`` waits for them as JetStream would."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self.acked: list[Delivery] = []
        self.pushed = 0

    def push(self, data: bytes) -> None:
        self.pushed += 1
        self._queue.put_nowait(Delivery(data, f"test #{self.pushed}", None, self.pushed))

    async def fetch(self, max_events: int, timeout_s: float) -> Sequence[Delivery]:
        try:
            first = await asyncio.wait_for(self._queue.get(), timeout_s)
        except TimeoutError:
            return []
        taken = [first]
        while len(taken) < max_events and not self._queue.empty():
            taken.append(self._queue.get_nowait())
        return taken

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        self.acked.extend(deliveries)

    async def pending(self) -> int | None:
        return self._queue.qsize()

    async def close(self) -> None:
        return None


def sample(metrics: BillingMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)  # poll interval, not a stand-in for the condition


async def test_consumer_waits_for_postgres_down_at_start_and_after_a_loss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="headway.billing.ledger_link")
    server = PostgresServer(fsync=False)
    settings = Settings(
        data_dir=tmp_path,
        postgres_url=server.url,
        billing={"ledger_retry_initial_s": 0.05, "ledger_retry_max_s": 0.2},
    )
    source, metrics = QueueSource(), BillingMetrics()
    service = BillingService(settings, metrics, source=source)
    try:
        await service.start()
        for i in range(10):
            source.push(encode(usage_event(f"before-{i}")))
        await until(lambda: sample(metrics, "headway_billing_ledger_retries_total") >= 3, "retries")
        assert not service.ready and sample(metrics, "headway_billing_ledger_up") == 0
        assert not source.acked

        await asyncio.to_thread(server.start)
        await until(lambda: len(source.acked) == 10, "the first events acked")
        assert service.ready and sample(metrics, "headway_billing_ledger_up") == 1
        assert service.ledger is not None
        assert (await service.ledger.counts())["processed"] == 10

        await asyncio.to_thread(server.stop)
        for i in range(20):
            source.push(encode(usage_event(f"during-{i}")))
        await until(lambda: sample(metrics, "headway_billing_ledger_up") == 0, "the loss seen")
        retries = sample(metrics, "headway_billing_ledger_retries_total")
        await until(
            lambda: sample(metrics, "headway_billing_ledger_retries_total") >= retries + 3,
            "retries after the loss",
        )
        assert len(source.acked) == 10  # the batch held is not acked while Postgres is away

        await asyncio.to_thread(server.start)
        await until(lambda: len(source.acked) == 30, "every event acked")
        assert sample(metrics, "headway_billing_ledger_up") == 1 and service.ready
        assert (await service.ledger.counts())["processed"] == 30
        assert set((await service.ledger.processed_ids()).values()) == {1}
    finally:
        await service.stop()
        server.close()
    messages = [r.getMessage() for r in caplog.records if r.name == "headway.billing.ledger_link"]
    assert [m.split(" (")[0].split(";")[0] for m in messages] == [
        "billing ledger unreachable while opening it",
        "billing ledger reachable again",
        "billing ledger unreachable while writing a batch",
        "billing ledger reachable again",
    ]  # one line per change of state, however many tries each outage took
    assert service.link.changes == 4
