"""Many clients hammering one tenant through one Redis: never over, never under.

Every figure comes from the store's own clock (Redis ``TIME``, as the Lua script wrote it
into the bucket), never from this process's: a loaded machine that delays the hammers
changes how many takes run, not whether the bucket's books balance. The bucket is emptied
at a Redis instant ``t0`` and its burst is larger than anything it can refill during the
run, so the cap never swallows refill: what the store granted plus what it still holds is
exactly ``rate x (t_last - t0)``, t_last being the last take's Redis time. A double spend
(two clients taking the same token) breaks that equality upwards; a refusal while a whole
token was there is caught by the refusal's own ``remaining``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event, Semaphore

import redis.asyncio as aioredis

from headway.gateway.quota.redis_store import RedisQuotaStore
from headway.gateway.quota.store import Quota
from headway_tools.testing.redis_server import RedisServer

ACME = 1  # the tenant's id: what its bucket is keyed by
LOAD_S = 2.0
# A burst the run cannot refill (rate x LOAD_S is 1,000 even if the hammers stall), so
# the bucket never reaches its cap and no refill is lost to it.
QUOTA = Quota(ACME, rate=500.0, burst=100_000.0)
KEY = "headway:quota:id:1"
# Far above the gateway's 0.25 s: on a loaded machine a reply can take longer, and this
# test is about the books, not about timeouts.
TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Ledger:
    """The bucket as the script last wrote it: its Redis time and what it holds."""

    last_take_s: float
    tokens_left: float


async def empty_the_bucket(url: str) -> float:
    """Take the whole (full, new) bucket through the store; answer the Redis time it did."""
    store = RedisQuotaStore(url, timeout_s=TIMEOUT_S)
    try:
        assert (await store.take(QUOTA, QUOTA.burst)).granted
    finally:
        await store.close()
    return (await read_ledger(url)).last_take_s


async def read_ledger(url: str) -> Ledger:
    client = aioredis.Redis.from_url(url)
    try:
        tokens, updated = await client.hmget(KEY, ["tokens", "updated"])
    finally:
        await client.aclose()
    return Ledger(int(updated) / 1e6, float(tokens))


def assert_books_balance(granted: int, emptied_s: float, ledger: Ledger) -> None:
    refilled = QUOTA.rate * (ledger.last_take_s - emptied_s)
    assert granted > 0
    assert refilled < QUOTA.burst, "the bucket could have reached its cap: the test is void"
    # Floats as the script stores them (%.17g): error far below one token.
    assert abs(granted + ledger.tokens_left - refilled) < 1e-3, (
        f"granted {granted} + left {ledger.tokens_left:.3f} != refilled {refilled:.3f}"
    )


async def hammer(store: RedisQuotaStore, stop_at: float) -> int:
    """Take one text at a time until ``stop_at``; every refusal must have been right."""
    granted = 0
    while time.monotonic() < stop_at:
        outcome = await store.take(QUOTA, 1)
        if outcome.granted:
            granted += 1
        else:
            assert outcome.remaining < 1, f"refused with {outcome.remaining} tokens there"
    return granted


async def test_concurrent_clients_share_one_bucket(redis_server: RedisServer) -> None:
    stores = [RedisQuotaStore(redis_server.url, timeout_s=TIMEOUT_S) for _ in range(8)]
    try:
        # Every client connected (and its script loaded) before the bucket is emptied.
        await asyncio.gather(*(store.take(Quota(999, 1, 1), 0) for store in stores))
        emptied_s = await empty_the_bucket(redis_server.url)
        stop_at = time.monotonic() + LOAD_S
        counts = await asyncio.gather(*(hammer(store, stop_at) for store in stores))
    finally:
        for store in stores:
            await store.close()
    assert all(count > 0 for count in counts)
    assert_books_balance(sum(counts), emptied_s, await read_ledger(redis_server.url))


def hammer_in_process(
    url: str, ready: Semaphore, go: Event, stop: Event, granted: Synchronized[int]
) -> None:
    async def run() -> None:
        store = RedisQuotaStore(url, timeout_s=TIMEOUT_S)
        try:
            await store.take(Quota(999, 1, 1), 0)  # connect before the start line
            ready.release()
            go.wait(30)
            count = 0
            while not stop.is_set():
                outcome = await store.take(QUOTA, 1)
                if outcome.granted:
                    count += 1
                elif outcome.remaining >= 1:
                    count = -1_000_000  # a wrong refusal: fails the sum below
                    break
            granted.value = count
        finally:
            await store.close()

    asyncio.run(run())


async def test_concurrent_processes_share_one_bucket(redis_server: RedisServer) -> None:
    context = multiprocessing.get_context("spawn")
    ready, go, stop = context.Semaphore(0), context.Event(), context.Event()
    counts = [context.Value("q", -1) for _ in range(3)]
    workers = [
        context.Process(target=hammer_in_process, args=(redis_server.url, ready, go, stop, count))
        for count in counts
    ]
    try:
        for worker in workers:
            worker.start()
        for _ in workers:  # every worker connected and waiting at the start line
            assert await asyncio.to_thread(ready.acquire, True, 30)
        emptied_s = await empty_the_bucket(redis_server.url)
        go.set()
        await asyncio.sleep(LOAD_S)  # the length of the load, not a wait for a condition
        stop.set()
        for worker in workers:
            await asyncio.to_thread(worker.join, 30)
    finally:
        stop.set()
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert all(count.value > 0 for count in counts)
    ledger = await read_ledger(redis_server.url)
    assert_books_balance(sum(count.value for count in counts), emptied_s, ledger)
