"""The work queue in shared mode: a NATS JetStream work-queue stream, a consumer per tenant.

The stream (``<subject>.>``, WORK_QUEUE retention, FILE storage, servers on ``sync_interval:
always``, so a PubAck means stored) holds exactly the lines not yet acked. An item goes on
``<subject>.<tenant_token(id)>.<batch_id>`` with ``Nats-Msg-Id`` ``<batch_id>:<line>``, so a
line put again within ``duplicate_window_s`` is stored once; ``put`` keeps
``publish_window`` messages on the wire before awaiting their PubAcks.

A pull reads each tenant's message count (one filtered ``STREAM.INFO``, trusted for
``COUNTS_FRESH_S``), shares ``max_items`` round robin within the ``Room`` (``fair.py``) from
after the tenant served last, and fetches every share at once by no-wait pull requests to
the tenants' durable consumers (``<durable>_<token>``), polling until ``wait_s``. A consumer
is made, idempotently, when its tenant's items are found, and removed by the server after
``INACTIVE_S`` idle: its messages stay, its leases are lost (a line may run twice).

Older layouts are served until drained: name-digest tokens (``name_token``) deliver
``LEGACY_TENANT_ID``; items on ``<subject>.<batch_id>`` go through the old shared consumer,
narrowed at set-up to ``<subject>.*``, which an older executor then cannot widen (the server
refuses overlapping filters), so it stops pulling: upgrade every executor.

``ack_wait`` is the lease, ``max_deliver`` -1, ``nak`` a delayed NAK, ``touch`` an
in-progress ack; an ack after the lease ran out still acks (the store keeps one result per
line). NATS away: ``pull`` returns ``[]`` after ``wait_s``, other calls raise
``WorkQueueUnavailable`` (a failed ``put`` may have stored some items: put them all again).
Set-up (connect, ``ensure_work_stream``, narrow the shared consumer) runs in a task of its
own that a call waits for at most its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
from collections import Counter
from collections.abc import Sequence

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import APIError, BadRequestError, NoStreamResponseError

from headway.batches.fair import rotation, round_robin
from headway.batches.model import LEGACY_TENANT_ID
from headway.batches.queue import (
    ANY_ROOM,
    Delivery,
    Room,
    WorkItem,
    WorkQueueConfigError,
    WorkQueueError,
    WorkQueueUnavailable,
    check_owned,
)
from headway.metering.stream import StreamConfig, connect, owned, sync_probe
from headway.metering.stream_guard import (
    StreamConfigError,
    StreamDurabilityError,
    SyncProbe,
    check_durability,
    reconcile,
)
from headway.metering.stream_link import FailureStreak, StreamSetup

log = logging.getLogger(__name__)

COUNTS_FRESH_S = 0.5
"""How long a read of each tenant's message count is trusted (a tenant whose first items
another executor put is found this late, at most, by a busy puller)."""
INACTIVE_S = 3600.0
"""A tenant's consumer that no one pulled from for this long is removed by the server."""
LEGACY = ""
"""The rotation's key for items on the old layout (``<subject>.<batch_id>``)."""
ATTEMPT_S = 1.0
"""The least time one look of a pull gives a JetStream call (a pull of ``wait_s`` 0 still
looks once), and ``request_timeout_s`` the most."""
OVERLAPPING_FILTER = 10100
"""JetStream's error code for a consumer whose filter overlaps another's on the stream."""

_NATS_ERRORS = (nats.errors.Error, TimeoutError, OSError)
_NOT_IN_A_SUBJECT_TOKEN = frozenset(" \t\r\n.*>")
_ENCODER = msgspec.json.Encoder()


class _Message(msgspec.Struct):
    """A work item as published: by this version, or by the previous (no ``tenant_id``)."""

    batch_id: str
    line: int
    tenant: str
    tenant_id: int = LEGACY_TENANT_ID


_DECODER = msgspec.json.Decoder(_Message)


def _decoded(data: bytes) -> WorkItem:
    message = _DECODER.decode(data)
    return WorkItem(message.batch_id, message.line, message.tenant_id, message.tenant)


def tenant_token(tenant_id: int) -> str:
    """The tenant's subject token and consumer suffix."""
    return f"id{tenant_id}"


def name_token(tenant: str) -> str:
    """The previous version's token of a tenant: a digest of its name (its items are
    served until drained; nothing is published under it any more)."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:24]


def work_stream_config(config: StreamConfig) -> api.StreamConfig:
    return api.StreamConfig(
        name=config.stream,
        subjects=[f"{config.subject}.>"],
        retention=api.RetentionPolicy.WORK_QUEUE,
        storage=config.storage,
        num_replicas=config.replicas,
        duplicate_window=config.duplicate_window_s,
        max_age=config.max_age_s,
        max_bytes=config.max_bytes,
        max_msg_size=config.max_msg_size,
        discard=config.discard,
    )


async def ensure_work_stream(
    js: JetStreamContext, config: StreamConfig, probe: SyncProbe | None = None
) -> api.StreamInfo:
    """Create the stream if it is missing; one that exists must have this configuration
    (its limits are changed only with ``config.update_existing``), and its storage must
    keep a PubAck (``stream_guard.py``); else a ``WorkQueueConfigError``."""
    try:
        await check_durability(
            config.stream,
            config.storage,
            probe or sync_probe(config),
            allow_volatile=config.allow_volatile,
        )
        return await reconcile(
            js, work_stream_config(config), owned(config), update_existing=config.update_existing
        )
    except (StreamConfigError, StreamDurabilityError) as exc:
        raise WorkQueueConfigError(f"the batch work queue: {exc}") from exc


def consumer_config(config: StreamConfig, key: str) -> api.ConsumerConfig:
    """The consumer of one tenant's items (``key`` its token), or with ``LEGACY`` the old
    shared consumer, narrowed to the old layout (see the module docstring)."""
    if key == LEGACY:
        name, subjects, inactive = config.durable, f"{config.subject}.*", None
    else:
        name, subjects, inactive = (
            f"{config.durable}_{key}",
            f"{config.subject}.{key}.>",
            INACTIVE_S,
        )
    return api.ConsumerConfig(
        name=name,
        durable_name=name,
        filter_subject=subjects,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=config.ack_wait_s,
        max_deliver=-1,
        max_ack_pending=config.max_ack_pending,
        inactive_threshold=inactive,
    )


class JetStreamWorkQueue:
    """A ``WorkQueue`` on a JetStream work-queue stream (see the module docstring);
    ``config.ack_wait_s`` is the lease."""

    def __init__(
        self,
        config: StreamConfig,
        *,
        publish_window: int = 500,
        poll_s: float = 0.05,
        max_poll_s: float = 0.25,
    ) -> None:
        self._config = config
        self._probe = sync_probe(config)
        self._publish_window = publish_window
        self._poll_s, self._max_poll_s = poll_s, max_poll_s
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._setup = StreamSetup(self._set_up, "work-queue setup")
        """Done: the stream is there and the old shared consumer narrowed."""
        self._consumers: set[str] = set()
        """Keys whose consumer this object made (or found) since its last set-up."""
        self._counts: dict[str, int] = {}
        """Messages on each key's subjects, as last read and since corrected."""
        self._counted_at = -math.inf
        self._after: str | None = None
        """The key this object's last pull served last (the rotation goes on after it)."""
        self._last_failure = ""
        self._streak = FailureStreak(
            log, "work queue: %s; logged again when it recovers", "work queue: pulling again"
        )
        self._closed = False
        self.duplicates_total = 0
        """Items ``put`` that the stream held already (within its duplicate window)."""
        self.stream: api.StreamInfo | None = None
        """The stream's info as ``depth`` last read it (its fill and limits)."""

    @property
    def lease_s(self) -> float:
        return self._config.ack_wait_s

    async def put(self, items: Sequence[WorkItem]) -> None:
        check_owned(items)
        for item in items:
            _check_token(item.batch_id)
        if not items:
            return
        await self._connected()
        for start in range(0, len(items), self._publish_window):
            await self._publish(items[start : start + self._publish_window])
        for key, count in Counter(tenant_token(item.tenant_id) for item in items).items():
            self._counts[key] = self._counts.get(key, 0) + count  # this process's pulls see them

    async def pull(self, max_items: int, wait_s: float, room: Room = ANY_ROOM) -> list[Delivery]:
        if max_items < 1:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        interval = self._poll_s
        while True:
            got = await self._pull_once(max_items, room, deadline)
            remaining = deadline - loop.time()
            if got or remaining <= 0:
                return got
            await asyncio.sleep(min(interval, remaining))  # the poll interval (docstring)
            interval = min(interval * 2, self._max_poll_s)

    async def drop(self, batch_id: str) -> int:
        _check_token(batch_id)
        await self._connected()
        subject = self._config.subject
        purged = 0
        for filter_ in (f"{subject}.*.{batch_id}", f"{subject}.{batch_id}"):
            purged += await self._purge(filter_, batch_id)
        return purged

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
        self.stream = info
        return int(info.state.messages)

    async def close(self) -> None:
        self._closed = True
        await self._setup.close(*_NATS_ERRORS)
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()

    async def _pull_once(self, max_items: int, room: Room, deadline: float) -> list[Delivery]:
        """One look: the shares of the tenants with items, fetched at once."""
        loop = asyncio.get_running_loop()
        remaining = max(deadline - loop.time(), 0.0)
        timeout_s = min(self._config.request_timeout_s, max(remaining, ATTEMPT_S))
        try:
            await self._connected(remaining)
            fresh_s = COUNTS_FRESH_S if any(self._counts.values()) else self._poll_s
            if loop.time() - self._counted_at > fresh_s:
                await self._count(timeout_s)
        except WorkQueueUnavailable:
            return []
        except APIError as exc:  # the stream is gone: set it up again
            self._setup.reset()
            self._streak.failed(f"stream info answered {exc}")
            return []
        except _NATS_ERRORS as exc:
            self._streak.failed(f"stream info failed: {exc!r}")
            return []
        order = round_robin(self._offers(max_items, room), max_items)
        if not order:
            self._streak.recovered()
            return []
        self._after = order[-1]
        shares = Counter(order)
        fetched = await asyncio.gather(
            *(self._fetch(key, count, timeout_s) for key, count in shares.items()),
            return_exceptions=True,
        )
        deliveries: list[Delivery] = []
        failed: BaseException | None = None
        for (key, count), messages in zip(shares.items(), fetched, strict=True):
            if isinstance(messages, BaseException):
                if not isinstance(messages, Exception):
                    raise messages
                failed = messages
                continue
            # Short of the share: that is all this key has to give now (the rest is leased
            # or delayed), so it is not asked again until the counts are read again.
            left = self._counts.get(key, 0) - count if len(messages) == count else 0
            self._counts[key] = max(left, 0)
            for message in messages:
                if (delivery := await self._delivery(message)) is not None:
                    deliveries.append(delivery)
        if failed is None:
            self._streak.recovered()
        else:
            self._streak.failed(f"fetch failed: {failed!r}")
        return deliveries

    def _offers(self, max_items: int, room: Room) -> list[tuple[str, int]]:
        """(key, items it may give) of each key with messages, in rotation order (a key
        of the previous version's layout has ``room.per_tenant``)."""
        rooms = {tenant_token(tenant_id): count for tenant_id, count in room.tenants.items()}
        offers: list[tuple[str, int]] = []
        for key in rotation((k for k, n in self._counts.items() if n > 0), self._after):
            may = room.per_tenant if key == LEGACY else rooms.get(key, room.per_tenant)
            want = min(self._counts[key], max_items, max_items if may is None else may)
            if want > 0:
                offers.append((key, want))
        return offers

    async def _count(self, timeout_s: float) -> None:
        """Read how many messages each key's subjects hold."""
        assert self._nc is not None
        prefix = self._config.subject + "."
        answer = await self._nc.request(
            f"{api.DEFAULT_PREFIX}.STREAM.INFO.{self._config.stream}",
            json.dumps({"subjects_filter": prefix + ">"}).encode(),
            timeout=timeout_s,
        )
        reply = json.loads(answer.data)
        if "error" in reply:
            raise APIError.from_error(reply["error"])
        info = api.StreamInfo.from_response(reply)
        counts: dict[str, int] = {}
        for subject, count in (info.state.subjects or {}).items():
            tokens = subject[len(prefix) :].split(".")
            key = LEGACY if len(tokens) == 1 else tokens[0]
            counts[key] = counts.get(key, 0) + int(count)
        self._counts = counts
        self._counted_at = asyncio.get_running_loop().time()

    async def _fetch(self, key: str, count: int, timeout_s: float) -> list[Msg]:
        """Up to ``count`` of ``key``'s messages that its consumer can deliver now."""
        assert self._js is not None and self._nc is not None
        config = consumer_config(self._config, key)
        if key not in self._consumers:
            try:
                await self._js.add_consumer(self._config.stream, config, timeout=timeout_s)
            except BadRequestError as exc:
                if exc.err_code == OVERLAPPING_FILTER:  # an older executor widened the old one
                    self._setup.reset()
                raise
            self._consumers.add(key)
        inbox = self._nc.new_inbox()
        subscription = await self._nc.subscribe(inbox)
        messages: list[Msg] = []
        try:
            request = json.dumps({"batch": count, "no_wait": True}).encode()
            await self._nc.publish(
                f"{api.DEFAULT_PREFIX}.CONSUMER.MSG.NEXT.{self._config.stream}.{config.name}",
                request,
                reply=inbox,
            )
            while len(messages) < count:
                try:
                    message = await subscription.next_msg(timeout=timeout_s)
                except nats.errors.TimeoutError:
                    if messages:
                        break
                    raise
                status = (message.headers or {}).get("Status")
                if status is None:
                    messages.append(message)
                    continue
                if status == "503":  # no responders: the consumer is gone (idle, removed)
                    self._consumers.discard(key)
                break  # 404: no more now; 408/409: the request ended
        finally:
            with contextlib.suppress(*_NATS_ERRORS):
                await subscription.unsubscribe()
        return messages

    async def _purge(self, subjects: str, batch_id: str) -> int:
        assert self._nc is not None
        try:
            answer = await self._nc.request(
                f"{api.DEFAULT_PREFIX}.STREAM.PURGE.{self._config.stream}",
                json.dumps({"filter": subjects}).encode(),
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

    async def _publish(self, items: Sequence[WorkItem]) -> None:
        """Publish one window, then wait for its PubAcks; raises unless all came."""
        assert self._js is not None
        subject = self._config.subject
        sent: list[asyncio.Future[api.PubAck]] = []
        try:
            for item in items:
                sent.append(
                    await self._js.publish_async(
                        f"{subject}.{tenant_token(item.tenant_id)}.{item.batch_id}",
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
            self._setup.reset()  # the stream is gone: the next call sets it up again
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
            item = _decoded(message.data)
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

    async def _connected(self, timeout_s: float | None = None) -> None:
        """Set up and connected now: a call while NATS is away fails at once rather than
        waiting in nats-py's reconnect buffer."""
        await self._ready(self._config.request_timeout_s if timeout_s is None else timeout_s)
        if self._nc is None or not self._nc.is_connected:
            raise WorkQueueUnavailable(
                f"not connected to NATS at {', '.join(self._config.servers)} (reconnecting)"
            )

    async def _ready(self, timeout_s: float) -> None:
        """Set up, in its own task if need be, waiting at most ``timeout_s``;
        ``WorkQueueUnavailable`` if it is not done by then."""
        if self._closed:
            raise WorkQueueError(f"the work queue on stream {self._config.stream} is closed")
        try:
            done = await self._setup.ready(timeout_s)
        except _NATS_ERRORS as exc:
            self._last_failure = f"; last: {exc!r}"
            self._streak.failed(f"cannot set up the stream and consumer: {exc!r}")
            raise WorkQueueUnavailable(f"cannot set up the work queue: {exc!r}") from exc
        if not done:
            raise WorkQueueUnavailable(
                f"NATS at {', '.join(self._config.servers)} not reachable yet "
                f"(still trying){self._last_failure}"
            )

    async def _set_up(self) -> None:
        if self._nc is None or self._js is None:
            self._nc, self._js = await connect(self._config)
        await ensure_work_stream(self._js, self._config, self._probe)
        await self._js.add_consumer(self._config.stream, consumer_config(self._config, LEGACY))
        self._consumers = {LEGACY}


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
