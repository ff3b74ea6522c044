"""The work queue in shared mode: a NATS JetStream work-queue stream.

The stream (``config.stream``, subjects ``<subject>.>``) has WORK_QUEUE retention: a
message leaves it when acked, so what it holds is exactly the lines not yet done. Each
item is published on ``<subject>.<batch_id>``, so ``drop`` purges one batch by subject
filter, with ``Nats-Msg-Id`` = ``<batch_id>:<line>``: the stream stores a line put twice
within ``duplicate_window_s`` once (a ``put`` retried after a lost PubAck, or run again
by an executor that restarted mid-batch). FILE storage; a PubAck means stored (the
servers run with ``sync_interval: always``). A big ``put`` is pipelined: a window of
``publish_window`` messages is on the wire before its PubAcks are awaited.

One durable pull consumer (``config.durable``) is shared by every executor; each binds
its own pull subscription to it. Explicit acks, ``ack_wait`` = ``lease_s``, redelivery
forever (``max_deliver`` -1), ``max_ack_pending`` room for every executor's lines in
flight. ``nak(delay)`` is JetStream's delayed NAK, ``touch`` its in-progress ack, and
``attempts`` the message's ``num_delivered``. Unlike the SQLite queue, an ack from a
delivery whose lease ran out (and was delivered again) still acks the message: the line
is done either way, and the batch store keeps one result per line.

NATS away: the connection reconnects forever (``metering.stream.connect``); ``pull``
returns ``[]`` once ``wait_s`` has passed, as if the queue were empty; ``put``, ``drop``,
``depth`` and acks raise ``WorkQueueUnavailable`` (a ``put`` that raised may have stored
some of its items: put them all again, the duplicate window keeps one of each). The
first call connects, creates the stream if it is missing (an existing one with another
configuration is a ``WorkQueueConfigError``: nothing is changed), creates or updates the
consumer, and binds the subscription, in a task of its own that a call waits for at most
its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BadRequestError, NoStreamResponseError

from headway.batches.queue import (
    Delivery,
    WorkItem,
    WorkQueueConfigError,
    WorkQueueError,
    WorkQueueUnavailable,
)
from headway.metering.stream import STREAM_NAME_IN_USE, StreamConfig, connect

log = logging.getLogger(__name__)

_NATS_ERRORS = (nats.errors.Error, TimeoutError, OSError)
_NOT_IN_A_SUBJECT_TOKEN = frozenset(" \t\r\n.*>")
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(WorkItem)


def work_stream_config(config: StreamConfig) -> api.StreamConfig:
    return api.StreamConfig(
        name=config.stream,
        subjects=[f"{config.subject}.>"],
        retention=api.RetentionPolicy.WORK_QUEUE,
        storage=config.storage,
        num_replicas=config.replicas,
        duplicate_window=config.duplicate_window_s,
    )


async def ensure_work_stream(js: JetStreamContext, config: StreamConfig) -> api.StreamInfo:
    """Create the stream if it is missing; one that exists must have this configuration."""
    wanted = work_stream_config(config)
    try:
        return await js.add_stream(wanted)  # the same configuration again: accepted as is
    except BadRequestError as exc:
        if exc.err_code != STREAM_NAME_IN_USE:
            raise
    found = (await js.stream_info(config.stream)).config
    raise WorkQueueConfigError(
        f"the JetStream stream {config.stream!r} exists with another configuration "
        f"(subjects {found.subjects}, retention {_name(found.retention)}, storage "
        f"{_name(found.storage)}, duplicate window {found.duplicate_window} s) than the "
        f"batch work queue needs (subjects {wanted.subjects}, retention work_queue, storage "
        f"{_name(wanted.storage)}, duplicate window {wanted.duplicate_window} s): delete it "
        f"(`nats stream rm {config.stream}`, losing its queued lines) or set "
        "HEADWAY_BATCHES__STREAM to another name"
    )


async def ensure_work_consumer(js: JetStreamContext, config: StreamConfig) -> api.ConsumerInfo:
    """Create the shared durable consumer, or bring an existing one to ``config``."""
    wanted = api.ConsumerConfig(
        name=config.durable,
        durable_name=config.durable,
        filter_subject=f"{config.subject}.>",
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=config.ack_wait_s,
        max_deliver=-1,
        max_ack_pending=config.max_ack_pending,
    )
    return await js.add_consumer(config.stream, wanted)


class JetStreamWorkQueue:
    """A ``WorkQueue`` on a JetStream work-queue stream (see the module docstring);
    ``config.ack_wait_s`` is the lease."""

    def __init__(self, config: StreamConfig, *, publish_window: int = 500) -> None:
        self._config = config
        self._publish_window = publish_window
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._subscription: JetStreamContext.PullSubscription | None = None
        self._setup: asyncio.Task[None] | None = None
        self._last_failure = ""
        self._failing = False
        self._closed = False
        self.duplicates_total = 0
        """Items ``put`` that the stream held already (within its duplicate window)."""

    @property
    def lease_s(self) -> float:
        return self._config.ack_wait_s

    async def put(self, items: Sequence[WorkItem]) -> None:
        for item in items:
            _check_token(item.batch_id)
        if not items:
            return
        await self._connected()
        for start in range(0, len(items), self._publish_window):
            await self._publish(items[start : start + self._publish_window])

    async def pull(self, max_items: int, wait_s: float) -> list[Delivery]:
        if max_items < 1:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        try:
            subscription = await self._ready(wait_s)
            messages = await subscription.fetch(
                batch=max_items, timeout=max(deadline - loop.time(), 0.001)
            )
        except TimeoutError:  # nats.errors.TimeoutError too: nothing came in time
            return []
        except WorkQueueUnavailable:
            messages = []
        except APIError as exc:  # the consumer or the stream is gone: set them up again
            self._subscription = None
            self._note_failure(f"fetch answered {exc}")
            messages = []
        except _NATS_ERRORS as exc:
            self._note_failure(f"fetch failed: {exc!r}")
            messages = []
        if not messages:  # failed at once: wait out wait_s, as an empty queue would
            await asyncio.sleep(max(deadline - loop.time(), 0.0))
            return []
        self._note_success()
        return [delivery for message in messages if (delivery := await self._delivery(message))]

    async def drop(self, batch_id: str) -> int:
        _check_token(batch_id)
        await self._connected()
        assert self._nc is not None
        request = {"filter": f"{self._config.subject}.{batch_id}"}
        try:
            answer = await self._nc.request(
                f"{api.DEFAULT_PREFIX}.STREAM.PURGE.{self._config.stream}",
                json.dumps(request).encode(),
                timeout=self._config.request_timeout_s,
            )
        except _NATS_ERRORS as exc:
            raise WorkQueueUnavailable(
                f"JetStream did not purge batch {batch_id}: {exc!r}"
            ) from exc
        reply = json.loads(answer.data)
        if "error" in reply:
            raise WorkQueueUnavailable(f"JetStream refused to purge batch {batch_id}: {reply}")
        return int(reply.get("purged", 0))

    async def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        """Each acked on its own (JetStream has no ack of many), all at once."""
        await asyncio.gather(*(delivery.ack() for delivery in deliveries))

    async def depth(self) -> int:
        await self._connected()
        assert self._js is not None
        try:
            info = await self._js.stream_info(self._config.stream)
        except _NATS_ERRORS as exc:
            raise WorkQueueUnavailable(f"JetStream stream info failed: {exc!r}") from exc
        return int(info.state.messages)

    async def close(self) -> None:
        self._closed = True
        if self._setup is not None:
            self._setup.cancel()
            with contextlib.suppress(asyncio.CancelledError, *_NATS_ERRORS):
                await self._setup
            self._setup = None
        nc, self._nc, self._js, self._subscription = self._nc, None, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()

    async def _publish(self, items: Sequence[WorkItem]) -> None:
        """Publish one window, then wait for its PubAcks; raises unless all came."""
        assert self._js is not None
        subject = self._config.subject
        sent: list[asyncio.Future[api.PubAck]] = []
        try:
            for item in items:
                sent.append(
                    await self._js.publish_async(
                        f"{subject}.{item.batch_id}",
                        _ENCODER.encode(item),
                        stream=self._config.stream,
                        headers={api.Header.MSG_ID: f"{item.batch_id}:{item.line}"},
                    )
                )
        except _NATS_ERRORS as exc:
            for future in sent:
                future.cancel()
            raise WorkQueueUnavailable(f"publishing work items failed: {exc!r}") from exc
        _, pending = await asyncio.wait(sent, timeout=self._config.request_timeout_s)
        for future in pending:
            future.cancel()  # frees its place in nats-py's window of pending PubAcks
        failures = [f.exception() for f in sent if f not in pending and f.exception() is not None]
        if any(isinstance(exc, NoStreamResponseError) for exc in failures):
            self._subscription = None  # the stream is gone: the next call sets it up again
        if pending or failures:
            first = f": {failures[0]!r}" if failures else ""
            raise WorkQueueUnavailable(
                f"JetStream confirmed {len(sent) - len(pending) - len(failures)} of "
                f"{len(sent)} work items within {self._config.request_timeout_s} s{first}; "
                "put them again (those stored are not stored twice)"
            )
        self.duplicates_total += sum(1 for future in sent if future.result().duplicate)

    async def _delivery(self, message: Msg) -> JetStreamDelivery | None:
        try:
            item = _DECODER.decode(message.data)
        except msgspec.DecodeError:  # not ours: never deliverable, so drop it for good
            log.warning(
                "work queue %s: message #%d is not a work item; terminated",
                self._config.stream,
                message.metadata.sequence.stream,
            )
            with contextlib.suppress(*_NATS_ERRORS):
                await message.term()
            return None
        return JetStreamDelivery(message, item, self._config.request_timeout_s)

    async def _connected(self) -> None:
        """Ready and connected now: a put, drop or depth while NATS is away fails at once
        rather than waiting in nats-py's reconnect buffer."""
        await self._ready(self._config.request_timeout_s)
        if self._nc is None or not self._nc.is_connected:
            raise WorkQueueUnavailable(
                f"not connected to NATS at {', '.join(self._config.servers)} (reconnecting)"
            )

    async def _ready(self, timeout_s: float) -> JetStreamContext.PullSubscription:
        """The subscription, set up in its own task if need be, waiting at most
        ``timeout_s``; ``WorkQueueUnavailable`` if it is not there by then."""
        if self._closed:
            raise WorkQueueError(f"the work queue on stream {self._config.stream} is closed")
        if self._subscription is not None:
            return self._subscription
        setup = self._setup
        if setup is None:
            setup = self._setup = asyncio.get_running_loop().create_task(
                self._set_up(), name="work-queue setup"
            )
        done, _ = await asyncio.wait({setup}, timeout=max(timeout_s, 0.0))
        if not done:
            raise WorkQueueUnavailable(
                f"NATS at {', '.join(self._config.servers)} not reachable yet "
                f"(still trying){self._last_failure}"
            )
        if self._setup is setup:  # several callers may have waited on this one set-up
            self._setup = None
        if (exc := setup.exception()) is not None:
            if not isinstance(exc, _NATS_ERRORS):
                raise exc
            self._last_failure = f"; last: {exc!r}"
            self._note_failure(f"cannot set up the stream and consumer: {exc!r}")
            raise WorkQueueUnavailable(f"cannot set up the work queue: {exc!r}") from exc
        assert self._subscription is not None
        return self._subscription

    async def _set_up(self) -> None:
        if self._nc is None or self._js is None:
            self._nc, self._js = await connect(self._config)
        await ensure_work_stream(self._js, self._config)
        await ensure_work_consumer(self._js, self._config)
        self._subscription = await self._js.pull_subscribe_bind(
            durable=self._config.durable, stream=self._config.stream
        )

    def _note_failure(self, detail: str) -> None:
        if not self._failing:
            self._failing = True
            log.warning("work queue: %s; logged again when it recovers", detail)

    def _note_success(self) -> None:
        if self._failing:
            self._failing = False
            log.warning("work queue: pulling again")


class JetStreamDelivery:
    """One message of the work-queue stream, leased by the shared consumer."""

    __slots__ = ("_ack_timeout_s", "_message", "attempts", "item")

    def __init__(self, message: Msg, item: WorkItem, ack_timeout_s: float) -> None:
        self._message = message
        self._ack_timeout_s = ack_timeout_s
        self.item = item
        self.attempts = int(message.metadata.num_delivered)

    async def ack(self) -> None:
        """Waits for the server to confirm (``ack_sync``): the line is then never
        delivered again."""
        try:
            await self._message.ack_sync(timeout=self._ack_timeout_s)
        except nats.errors.MsgAlreadyAckdError:
            return
        except _NATS_ERRORS as exc:
            raise WorkQueueUnavailable(
                f"JetStream did not confirm the ack of {_key(self.item)}: {exc!r}; "
                "it will be delivered again"
            ) from exc

    async def nak(self, delay_s: float) -> None:
        try:
            await self._message.nak(delay=max(delay_s, 0.0))
        except nats.errors.MsgAlreadyAckdError:
            return
        except _NATS_ERRORS as exc:
            raise WorkQueueUnavailable(f"the nak of {_key(self.item)} failed: {exc!r}") from exc

    async def touch(self) -> None:
        try:
            await self._message.in_progress()
        except _NATS_ERRORS as exc:
            raise WorkQueueUnavailable(f"the touch of {_key(self.item)} failed: {exc!r}") from exc


def _check_token(batch_id: str) -> None:
    """A batch id is one subject token: no dots, wildcards or spaces."""
    if not batch_id or _NOT_IN_A_SUBJECT_TOKEN.intersection(batch_id):
        raise WorkQueueError(
            f"batch id {batch_id!r} cannot be a NATS subject token (no '.', '*', '>' or "
            "whitespace); batch ids are made by batches.model.new_batch_id"
        )


def _key(item: WorkItem) -> str:
    return f"{item.batch_id}:{item.line}"


def _name(value: object) -> str:
    return str(getattr(value, "value", value))
