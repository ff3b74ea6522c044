"""The relay: carries a gateway's outbox to NATS JetStream, oldest event first.

A row leaves the outbox only after its PubAck (the server has fsynced it: ``sync_interval:
always``), so an event is always in the outbox, the stream, or both; a row published again
after a lost PubAck is stored once, by its ``Nats-Msg-Id`` (the request id). A batch goes
out whole (``publish_async``) before its PubAcks are awaited, and the wait gives up only once
none has come for ``publish_timeout_s``. A batch not fully acknowledged sends the cursor back
to the oldest row left, after a backoff doubling from ``backoff_s`` to ``max_backoff_s``.

Outages stay here: the request path only writes the outbox (503 once it is full), and
``stream.connect`` reconnects on its own. ``run`` returns only when cancelled; any other
exception is a bug, and a stream refused at set-up (``StreamConfigError``,
``StreamDurabilityError``) is one that no retry mends: ``Background.essential`` stops the
process for either.

``flush(timeout_s)``, after ``run`` is cancelled on stop, relays what is left the same way
until the outbox is empty or the deadline passes, so an absent NATS holds the stop no longer.
What remains is relayed by the next ``run`` on that file (same gateway id, same volume); an
event published twice is stored once by ``Nats-Msg-Id`` and billed once by the ledger's key.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import nats.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NoStreamResponseError

from headway.metering.outbox import OutboxError, OutboxRow, OutboxRows
from headway.metering.stream import StreamConfig, connect, ensure_stream, sync_probe
from headway.metering.stream_link import FailureStreak

log = logging.getLogger(__name__)

_NATS_ERRORS = (nats.errors.Error, TimeoutError, OSError)


@dataclass(frozen=True, slots=True)
class Flushed:
    """What ``Relay.flush`` did."""

    relayed: int
    """Events the stream acknowledged during the flush (duplicates included)."""
    emptied: bool
    """The outbox was seen empty; False: the flush stopped at its deadline."""
    seconds: float


class Relay:
    """Outbox → JetStream, until cancelled (see the module docstring)."""

    def __init__(
        self,
        outbox: OutboxRows,
        config: StreamConfig,
        *,
        batch: int = 2_000,
        publish_timeout_s: float = 5.0,
        idle_s: float = 0.05,
        backoff_s: float = 0.1,
        max_backoff_s: float = 2.0,
    ) -> None:
        self._outbox = outbox
        self._config = config
        self._probe = sync_probe(config)
        self._batch = batch
        self._publish_timeout_s = publish_timeout_s
        self._idle_s = idle_s
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._stream_ready = False
        self._streak = FailureStreak(
            log,
            "usage relay: publishing failed (%s); the events stay in the outbox and are "
            "retried with backoff; logged again when publishing recovers",
            "usage relay: publishing again",
        )
        self.published_total = 0
        """Events the stream acknowledged (stored now, or already held: see ``duplicates``)."""
        self.duplicates_total = 0
        """Of those, events the stream already held (re-published after a lost PubAck)."""
        self.publish_failures: dict[str, int] = {}
        """Failed publishes (and outbox reads or removals) by reason: ``timeout``,
        ``disconnected``, ``no_stream``, ``api_error``, ``outbox``."""

    @property
    def publish_failures_total(self) -> int:
        return sum(self.publish_failures.values())

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    async def run(self) -> None:
        try:
            self._nc, self._js = await connect(self._config)
            cursor = 0
            backoff = self._backoff_s
            while True:
                moved = await self._step(cursor)
                if moved is None:  # something failed: start again from the oldest row
                    cursor = 0
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self._max_backoff_s)
                    continue
                backoff = self._backoff_s
                if moved == cursor:
                    await asyncio.sleep(self._idle_s)
                cursor = moved
        finally:
            await self.close()

    async def flush(self, timeout_s: float) -> Flushed:
        """Relay what is in the outbox until it is empty or ``timeout_s`` has passed; for
        after ``run`` has been cancelled and the outbox takes no more events (see the
        module docstring). Closes the connection before it returns."""
        started, before = time.monotonic(), self.published_total
        emptied = False
        try:
            async with asyncio.timeout(timeout_s):
                await self._drain()
            emptied = True
        except TimeoutError:
            pass
        finally:
            await self.close()
        return Flushed(self.published_total - before, emptied, time.monotonic() - started)

    async def _drain(self) -> None:
        """``run``'s loop, ending once a read finds nothing after the cursor."""
        if not await self._outbox.read(0, 1):
            return  # the usual stop: nothing to relay, so no connection to wait for
        if self._nc is None or self._nc.is_closed:
            self._nc, self._js = await connect(self._config)
        cursor, backoff = 0, self._backoff_s
        while True:
            moved = await self._step(cursor)
            if moved is None:
                cursor = 0
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)
                continue
            if moved == cursor:
                return
            cursor, backoff = moved, self._backoff_s

    async def close(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()

    async def _step(self, cursor: int) -> int | None:
        """Relay one batch after ``cursor``; the new cursor, or None after a failure."""
        assert self._nc is not None and self._js is not None
        if not self._nc.is_connected:
            self._failed("disconnected", "not connected to NATS")
            return None
        if not self._stream_ready:
            try:
                await ensure_stream(self._js, self._config, self._probe)
            except _NATS_ERRORS as exc:
                self._failed("api_error", f"cannot create the stream: {exc!r}")
                return None
            self._stream_ready = True
        try:
            rows = await self._outbox.read(cursor, self._batch)
        except OutboxError as exc:
            self._failed("outbox", str(exc))
            return None
        if not rows:
            return cursor
        acked, failures = await self._publish(rows)
        if acked:
            try:
                await self._outbox.remove(acked)
            except OutboxError as exc:
                self._failed("outbox", str(exc))
                return None
        if failures:
            for reason, count in failures.items():
                self._count(reason, count)
            summary = ", ".join(f"{count} {reason}" for reason, count in failures.items())
            self._streak.failed(f"{summary} of {len(rows)} events")
            return None
        self._streak.recovered()
        return rows[-1].id

    async def _publish(self, rows: Sequence[OutboxRow]) -> tuple[list[int], dict[str, int]]:
        """Publish every row, then wait for their PubAcks; the ids acknowledged, and the
        failures by reason."""
        assert self._js is not None
        failures: dict[str, int] = {}
        sent: list[tuple[OutboxRow, asyncio.Future[api.PubAck]]] = []
        for row in rows:
            try:
                future = await self._js.publish_async(
                    self._config.subject,
                    row.data,
                    stream=self._config.stream,
                    headers={api.Header.MSG_ID: row.request_id},
                )
            except _NATS_ERRORS:
                failures["disconnected"] = len(rows) - len(sent)
                break
            sent.append((row, future))
        await self._until_settled_or_stalled([future for _, future in sent])
        acked: list[int] = []
        for row, future in sent:
            if not future.done():
                future.cancel()  # frees its place in nats-py's window of pending PubAcks
                reason = "timeout"
            elif future.cancelled():
                reason = "disconnected"
            elif (exc := future.exception()) is not None:
                if isinstance(exc, NoStreamResponseError):
                    self._stream_ready = False
                    reason = "no_stream"
                elif isinstance(exc, APIError):
                    reason = "api_error"
                else:
                    reason = "disconnected"
            else:
                acked.append(row.id)
                self.published_total += 1
                if future.result().duplicate:
                    self.duplicates_total += 1
                continue
            failures[reason] = failures.get(reason, 0) + 1
        return acked, failures

    async def _until_settled_or_stalled(self, futures: list[asyncio.Future[api.PubAck]]) -> None:
        """Wait for every PubAck, giving up once none has come for ``publish_timeout_s``
        (NATS is gone, or the message was lost): a slow disk is waited for, a dead
        connection is not."""
        unsettled = len(futures)
        progress = asyncio.Event()

        def settled(_: asyncio.Future[api.PubAck]) -> None:
            nonlocal unsettled
            unsettled -= 1
            progress.set()

        for future in futures:
            future.add_done_callback(settled)
        while unsettled:
            progress.clear()
            try:
                await asyncio.wait_for(progress.wait(), self._publish_timeout_s)
            except TimeoutError:
                return

    def _count(self, reason: str, count: int = 1) -> None:
        self.publish_failures[reason] = self.publish_failures.get(reason, 0) + count

    def _failed(self, reason: str, detail: str) -> None:
        self._count(reason)
        self._streak.failed(f"{reason}: {detail}")
        return None
