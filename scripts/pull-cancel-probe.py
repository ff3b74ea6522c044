#!/usr/bin/env python3
"""How often a cancelled JetStream pull returns instead of raising (the shared-mode hang).

    PYTHONPATH=src .venv/bin/python scripts/pull-cancel-probe.py [CANCELS]

On a throw-away nats-server, a ``JetStreamWorkQueue`` with 200 lines queued is pulled
``CANCELS`` times (default 600), each pull cancelled after a varying number of loop turns,
each reading the tenants' counts first (``STREAM.INFO``, through nats-py's ``request``).
Under Python 3.11 a cancel that comes in the turn an answer arrives is swallowed by
``asyncio.wait_for`` inside nats-py (``headway/cancellation.py``): the pull returns lines.
An executor's loop must then stop by itself; before issue 26 it pulled on for ever. Lines
a swallowed pull returned are naked back. Prints the count of each outcome.
"""

from __future__ import annotations

import asyncio
import random
import sys

from headway.batches.jetstream_queue import JetStreamWorkQueue
from headway.batches.queue import WorkItem
from headway.metering.stream import StreamConfig
from headway_tools.testing.nats_server import NatsServer


async def probe(server: NatsServer, cancels: int) -> tuple[int, int]:
    queue = JetStreamWorkQueue(
        StreamConfig(
            servers=(server.url,),
            stream="BATCH_WORK",
            subject="batches.work",
            durable="executors",
            ack_wait_s=30.0,
        )
    )
    await queue.put([WorkItem("batch_probe", n, 7, "probe") for n in range(1, 201)])
    await queue.pull(1, 1.0)  # connected, the tenant's consumer made
    turns = random.Random(1)
    raised = swallowed = 0
    for _ in range(cancels):
        queue._counted_at = float("-inf")  # this pull reads the counts first
        pull = asyncio.ensure_future(queue.pull(4, 0.0))
        for _ in range(turns.randrange(0, 40)):
            await asyncio.sleep(0)
        pull.cancel()
        try:
            lines = await pull
        except asyncio.CancelledError:
            raised += 1
            continue
        swallowed += 1
        await asyncio.gather(*(line.nak(0.0) for line in lines))
    await queue.close()
    return raised, swallowed


def main() -> None:
    cancels = int(sys.argv[1]) if len(sys.argv) > 1 else 600
    server = NatsServer()
    server.start()
    try:
        raised, swallowed = asyncio.run(probe(server, cancels))
    finally:
        server.close()
    print(
        f"python {sys.version.split()[0]}: {cancels} cancelled pulls, {raised} raised "
        f"CancelledError, {swallowed} returned (the cancel swallowed)"
    )


if __name__ == "__main__":
    main()
