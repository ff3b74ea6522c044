"""Many clients hammering one tenant through one Redis: never over, barely under."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event, Semaphore

import redis.asyncio as aioredis

from headway.gateway.quota.redis_store import RedisQuotaStore
from headway.gateway.quota.store import Quota
from headway.testing.redis_server import RedisServer

ACME = 1  # the tenant's id: what its bucket is keyed by
QUOTA = Quota(ACME, rate=500.0, burst=50.0)
KEY = "headway:quota:id:1"


async def redis_now_s(client: aioredis.Redis) -> float:
    seconds, micros = await client.time()
    return seconds + micros / 1e6


async def last_take_s(client: aioredis.Redis) -> float:
    """The Redis time of the last script run on the bucket, as the script wrote it."""
    return int(await client.hget(KEY, "updated")) / 1e6


def assert_admitted_what_the_bucket_allows(granted: float, elapsed_s: float) -> None:
    allowed = QUOTA.burst + QUOTA.rate * elapsed_s
    assert granted <= allowed
    assert granted >= 0.95 * allowed, f"granted {granted} of {allowed:.1f}"


async def hammer(url: str, stop_at: float) -> int:
    store = RedisQuotaStore(url)
    granted = 0
    try:
        while time.monotonic() < stop_at:
            if (await store.take(QUOTA, 1)).granted:
                granted += 1
    finally:
        await store.close()
    return granted


async def test_concurrent_clients_share_one_bucket(redis_server: RedisServer) -> None:
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        start = await redis_now_s(client)
        stop_at = time.monotonic() + 2.0
        counts = await asyncio.gather(*(hammer(redis_server.url, stop_at) for _ in range(8)))
        elapsed = await last_take_s(client) - start
    finally:
        await client.aclose()
    assert elapsed > 1.9
    assert_admitted_what_the_bucket_allows(sum(counts), elapsed)


def hammer_in_process(
    url: str, ready: Semaphore, go: Event, stop: Event, granted: Synchronized[int]
) -> None:
    async def run() -> None:
        store = RedisQuotaStore(url)
        try:
            await store.take(Quota(999, 1, 1), 0)  # connect before the start line
            ready.release()
            go.wait(30)
            count = 0
            while not stop.is_set():
                if (await store.take(QUOTA, 1)).granted:
                    count += 1
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
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        for worker in workers:
            worker.start()
        for _ in workers:  # every worker connected and waiting at the start line
            assert await asyncio.to_thread(ready.acquire, True, 30)
        start = await redis_now_s(client)
        go.set()
        await asyncio.sleep(2.0)  # the length of the load, not a wait for a condition
        stop.set()
        for worker in workers:
            await asyncio.to_thread(worker.join, 30)
        elapsed = await last_take_s(client) - start
    finally:
        stop.set()
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join()
        await client.aclose()
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert all(count.value > 0 for count in counts)
    assert_admitted_what_the_bucket_allows(sum(count.value for count in counts), elapsed)
