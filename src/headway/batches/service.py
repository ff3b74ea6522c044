"""``headway run batches``: one executor process, its loops and its HTTP face.

    mover   every ``executor.poll_s``: batches from status to status (``mover.py``)
    lines   pull lines from the work queue and run them (``executor.py``); essential
    files   every minute: delete the files past their retention
    depth   every few seconds: the queue's depth for ``/metrics`` (in shared mode also
            the BATCH_WORK stream's fill and limits, ``metering/stream_metrics.py``)

It uses the gateways' stores (Postgres with ``postgres_url``, else SQLite in the data
dir; files at ``batches.files_dir``), the registry while quotas are on (tenants' bursts),
and JetStream with ``nats_url``, else the SQLite queue. Any number of executors may share
one set of stores (leases; repeatable moves). The HTTP face (``/healthz``, ``/readyz``,
``/metrics``) starts at once, the loops once the store is migrated and the queue set up,
each waited for with backoff (``links.py``), so an executor never exits for Postgres or
NATS away; ``/readyz`` is 503 while either is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from headway import plants
from headway.background import Background
from headway.batches.bursts import RegistryBursts
from headway.batches.executor import Executor
from headway.batches.filestore import DirectoryFileStore
from headway.batches.inputs import Inputs
from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.links import ExecutorLinks, watched
from headway.batches.metrics import ExecutorMetrics
from headway.batches.mover import Bursts, Mover, no_bursts
from headway.batches.offload import off_loop
from headway.batches.open import open_batch_store
from headway.batches.queue import WorkQueue, WorkQueueUnavailable
from headway.batches.queue_open import open_work_queue
from headway.batches.store import BatchStore, BatchStoreUnavailable
from headway.batches.submit import HttpSubmitter
from headway.dependency_link import until_reachable
from headway.http.asgi import App
from headway.http.ops import ops_app
from headway.metering.stream_metrics import StreamMetrics
from headway.registry.open import open_registry
from headway.registry.store import RegistryStore
from headway.settings import Settings
from headway.tls.hops import gateway_client

log = logging.getLogger(__name__)

REAP_INTERVAL_S = 60.0
UNNAMED_INTERVAL_S = 3600.0
"""How often stored bytes are walked for copies no record names (``Mover.sweep_unnamed``):
a walk of every stored file, for what only a crash leaves."""
DEPTH_INTERVAL_S = 5.0


class ExecutorService:
    def __init__(self, settings: Settings, metrics: ExecutorMetrics | None = None) -> None:
        if not settings.batches.executor_token:
            raise ValueError(
                "batches.executor_token is empty: set HEADWAY_BATCHES__EXECUTOR_TOKEN to the "
                "gateways' token (`headway up` makes one for its own processes)"
            )
        self.settings = settings
        self.metrics = metrics or ExecutorMetrics()
        self.stream_metrics = StreamMetrics(self.metrics.registry)
        executor = settings.batches.executor
        self.links = ExecutorLinks.of(
            self.metrics, executor.dependency_retry_initial_s, executor.dependency_retry_max_s
        )
        self._background = Background()
        self.store: BatchStore | None = None
        self.queue: WorkQueue | None = None
        self.registry: RegistryStore | None = None
        self._submitter: HttpSubmitter | None = None
        self._gateway_tls = gateway_client(settings.tls)  # a bad TLS file fails here, at once

    async def start(self) -> None:
        """Starts nothing that needs a dependency: the loops start once both are had."""
        self.queue = open_work_queue(self.settings)  # connects on first use
        self._background.essential("lines", self._run)

    async def _run(self) -> None:
        """Wait for the store and the queue, start the loops, then run lines for good."""
        settings, batches = self.settings, self.settings.batches
        executor = batches.executor
        queue = self.queue
        assert queue is not None
        self.store = store = await until_reachable(
            lambda: off_loop(open_batch_store, settings),
            self.links.store,
            BatchStoreUnavailable,
            "opening it",
        )
        await until_reachable(queue.depth, self.links.queue, WorkQueueUnavailable, "setting it up")
        files = DirectoryFileStore(settings.files_dir)
        inputs = Inputs(store, files, settings.gateway.limits, batches.max_inputs)
        self._submitter = HttpSubmitter(
            executor.gateway_urls,
            batches.executor_token,
            executor.line_timeout_ms,
            self._gateway_tls,
        )
        bursts: Bursts = no_bursts  # quotas off: no line is too big for one
        if settings.gateway.quota.enabled:
            self.registry = registry = open_registry(settings)
            bursts = RegistryBursts(registry)
        mover = Mover(
            store,
            queue,
            files,
            inputs,
            batches.file_retention_s,
            time.time,
            bursts=bursts,
            metrics=self.metrics,
            duplicate_a_line=plants.planted(settings, "duplicate_line"),
        )
        lines = Executor(
            store, queue, inputs, self._submitter, executor, self.metrics, links=self.links
        )
        links = self.links
        self._background.every(
            "mover", executor.poll_s, watched(self._tick(mover), links, "moving batches")
        )
        self._background.every(
            "files", REAP_INTERVAL_S, watched(mover.reap_files, links, "reaping files")
        )
        self._background.every(
            "unnamed", UNNAMED_INTERVAL_S, watched(mover.sweep_unnamed, links, "sweeping files")
        )
        self._background.every(
            "depth", DEPTH_INTERVAL_S, watched(self._depth, links, "reading the queue's depth")
        )
        log.info(
            "batch executor: queue on %s, stores on %s, %d lines at once through %s",
            "NATS JetStream" if settings.nats_url else settings.batches_path,
            "Postgres" if settings.postgres_url else settings.batches_path,
            executor.lines_in_flight,
            ", ".join(executor.gateway_urls),
        )
        await lines.run()

    def _tick(self, mover: Mover) -> Callable[[], Awaitable[None]]:
        async def tick() -> None:
            await mover.tick()
            self.links.store.succeeded()  # every tick reads the store's open batches

        return tick

    async def _depth(self) -> None:
        if self.queue is not None:
            self.metrics.queue_depth.set(await self.queue.depth())
            self.links.queue.succeeded()
        if isinstance(self.queue, JetStreamWorkQueue) and self.queue.stream is not None:
            self.stream_metrics.observe(self.queue.stream)

    async def stop(self) -> None:
        await self._background.stop()
        if self._submitter is not None:
            await self._submitter.close()
        if self.queue is not None:
            await self.queue.close()
        if self.store is not None:
            self.store.close()
        if self.registry is not None:
            self.registry.close()

    @property
    def ready(self) -> bool:
        return self.store is not None and self.queue is not None and self.links.up


def build_executor_app(service: ExecutorService) -> App:
    return ops_app(service, service.metrics.registry)
