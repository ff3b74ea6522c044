"""Usage events from NATS JetStream: the billing consumer's source in shared mode.

A durable pull consumer (``config.durable``): explicit acks, every event from the first,
redelivery of what is not acknowledged within ``ack_wait_s``, at most ``max_ack_pending``
out at once. Its position lives in the server, so a restarted consumer carries on where the
last one acknowledged.

``ack`` publishes an ack for every delivery but the last without waiting, and waits for the
server's answer to the last (``ack_sync``). The server handles one connection's messages,
and a consumer's acks, in order, so once the last is answered all are recorded: a consumer
killed right after ``ack`` returned gets none of those events again (``tests/metering``).

NATS away: ``fetch`` never raises for an outage but returns no events once ``timeout_s`` has
passed, as if the stream were empty, while the connection reconnects on its own. ``ack``
raises ``JetStreamUnavailable``: the ledger has committed, the events come again after
``ack_wait_s``, and its primary key drops them. ``pending`` answers None. Set-up (connect,
stream, consumer, bind) runs in a task of its own, which a fetch waits for at most its own
timeout; a fetch or ``pending`` that finds the consumer lost (a new store) starts it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import nats.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import APIError

from headway.billing.sources.base import Delivery
from headway.cancellation import raise_if_cancel_requested
from headway.metering.stream import StreamConfig, connect, ensure_stream, sync_probe
from headway.metering.stream_link import FailureStreak, StreamSetup

log = logging.getLogger(__name__)

_NATS_ERRORS = (nats.errors.Error, TimeoutError, OSError)


class JetStreamUnavailable(RuntimeError):
    """JetStream did not confirm the acks in time; the events will be delivered again."""


async def ensure_consumer(js: JetStreamContext, config: StreamConfig) -> api.ConsumerInfo:
    """Create the durable consumer, or bring an existing one to ``config``; idempotent."""
    wanted = api.ConsumerConfig(
        name=config.durable,
        durable_name=config.durable,
        filter_subject=config.subject,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=config.ack_wait_s,
        max_ack_pending=config.max_ack_pending,
    )
    return await js.add_consumer(config.stream, wanted)


class JetStreamSource:
    """An ``EventSource`` over the durable consumer (see the module docstring)."""

    def __init__(self, config: StreamConfig, *, ack_timeout_s: float = 5.0) -> None:
        self._config = config
        self._probe = sync_probe(config)
        self._ack_timeout_s = ack_timeout_s
        self._nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._subscription: JetStreamContext.PullSubscription | None = None
        self._setup = StreamSetup(self._set_up, "jetstream-source setup")
        self._streak = FailureStreak(
            log,
            "JetStream source: %s; logged again when fetching recovers",
            "JetStream source: fetching again",
        )

    async def fetch(self, max_events: int, timeout_s: float) -> Sequence[Delivery]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        subscription = await self._ready(timeout_s)
        if subscription is None:
            return []
        wait_s = max(deadline - loop.time(), 0.001)
        try:
            messages = await subscription.fetch(batch=max_events, timeout=wait_s)
        except TimeoutError:  # nats.errors.TimeoutError too: no events in time
            return []
        except APIError as exc:  # the consumer or the stream is gone: set them up again
            self._lost()
            self._streak.failed(f"fetch answered {exc}")
            return []
        except _NATS_ERRORS as exc:
            self._streak.failed(f"fetch failed: {exc!r}")
            return []
        finally:
            # nats-py's fetch may swallow a stop (headway/cancellation.py): it takes effect
            # here, the fetched events unacked, so redelivered to the next consumer.
            raise_if_cancel_requested()
        self._streak.recovered()
        return [self._delivery(message) for message in messages]

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        if not deliveries:
            return
        if self._nc is None:
            raise JetStreamUnavailable("not connected to NATS")
        replies = [_reply_of(delivery) for delivery in deliveries]
        try:
            for reply in replies[:-1]:
                await self._nc.publish(reply, b"")  # an empty ack payload is +ACK
            await self._nc.request(replies[-1], b"", timeout=self._ack_timeout_s)
        except _NATS_ERRORS as exc:
            raise JetStreamUnavailable(
                f"JetStream did not confirm the acks of {len(replies)} events: {exc!r}"
            ) from exc

    async def pending(self) -> int | None:
        if self._nc is None or self._js is None or not self._nc.is_connected:
            return None
        try:
            info = await self._js.consumer_info(
                self._config.stream, self._config.durable, timeout=self._ack_timeout_s
            )
        except APIError:
            self._lost()
            return None
        except _NATS_ERRORS:
            return None
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    async def stream_info(self) -> api.StreamInfo | None:
        """The usage stream's fill and limits; None while NATS is away or not set up."""
        if self._nc is None or self._js is None or not self._nc.is_connected:
            return None
        try:
            return await self._js.stream_info(self._config.stream)
        except _NATS_ERRORS:
            return None

    async def close(self) -> None:
        await self._setup.close(*_NATS_ERRORS)
        nc, self._nc, self._js, self._subscription = self._nc, None, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()

    async def _ready(self, timeout_s: float) -> JetStreamContext.PullSubscription | None:
        """The subscription, set up in its own task if need be, waiting at most ``timeout_s``."""
        try:
            if not await self._setup.ready(timeout_s):
                return None
        except _NATS_ERRORS as exc:
            self._streak.failed(f"cannot set up the consumer: {exc!r}")
            return None
        return self._subscription

    def _lost(self) -> None:
        self._subscription = None
        self._setup.reset()

    async def _set_up(self) -> None:
        if self._nc is None or self._js is None:
            self._nc, self._js = await connect(self._config)
        await ensure_stream(self._js, self._config, self._probe)
        await ensure_consumer(self._js, self._config)
        self._subscription = await self._js.pull_subscribe_bind(
            durable=self._config.durable, stream=self._config.stream
        )

    def _delivery(self, message: Msg) -> Delivery:
        metadata = message.metadata
        return Delivery(
            data=message.data,
            source=f"{self._config.stream} #{metadata.sequence.stream}",
            published_at=metadata.timestamp.timestamp(),
            token=message,
        )


def _reply_of(delivery: Delivery) -> str:
    message = delivery.token
    if not isinstance(message, Msg) or not message.reply:
        raise TypeError(f"{delivery.source}: not a delivery of a JetStreamSource")
    return message.reply
