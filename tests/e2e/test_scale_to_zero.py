"""A pool at zero in ``headway up``: the first request waits while its worker starts, an
idle pool's workers stop, and the next request starts them again."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from headway.registry.sqlite import DEMO_ADMIN_KEY
from tests.e2e.conftest import Up, alive, start_up, wait_for

pytestmark = pytest.mark.e2e

SEARCH_APP = {"authorization": "Bearer demo-key-search-app", "x-timeout-ms": "30000"}
ADMIN = {"authorization": f"Bearer {DEMO_ADMIN_KEY}"}
BODY = {"model": "synthetic", "input": ["a pump at zero replicas", "wakes up"]}


def worker_pids(up: Up) -> set[int]:
    """The supervisor's worker processes, from /proc."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == up.process.pid and b"worker" in command and alive(int(entry.name)):
            pids.add(int(entry.name))
    return pids


def embed_states(client: httpx.Client) -> list[str]:
    replicas = client.get("/admin/replicas", headers=ADMIN).json()
    return [replica["state"] for replica in replicas["pools"]["embed"]]


def waiting(up: Up) -> float:
    for line in up.metrics().splitlines():
        if line.startswith('headway_pool_waiting_requests{pool="embed"}'):
            return float(line.split()[-1])
    raise AssertionError("no headway_pool_waiting_requests for the embed pool")


def timed_embed(client: httpx.Client) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = client.post("/v1/embeddings", headers=SEARCH_APP, json=BODY)
    return response, time.perf_counter() - started


def cold_then_warm(up: Up, client: httpx.Client) -> tuple[float, float]:
    """A request to the pool at zero, held (the gauge at 1) until its worker is ready, and
    then a warm one; their times, side by side."""
    answered: list[tuple[httpx.Response, float]] = []
    sender = threading.Thread(target=lambda: answered.append(timed_embed(client)))
    sender.start()
    wait_for(lambda: waiting(up) == 1, 30, "the request to be held for the pool")
    sender.join(60)
    ((cold, cold_s),) = answered
    assert cold.status_code == 200, cold.text
    assert len(cold.json()["data"]) == 2
    assert waiting(up) == 0
    warm, warm_s = timed_embed(client)
    assert warm.status_code == 200, warm.text
    return cold_s, warm_s


def test_a_pool_at_zero_starts_on_demand_and_stops_when_idle(tmp_path: Path) -> None:
    up = start_up(
        tmp_path,
        "--backend",
        "synthetic",
        "--rerank-replicas",
        "0",
        "--no-prewarm",
        "--idle-stop-s",
        "2",
    )
    try:
        with up.client() as client:
            assert client.get("/readyz").status_code == 200  # ready at zero: requests wait
            assert embed_states(client) == ["unready"] and not worker_pids(up)

            cold_s, warm_s = cold_then_warm(up, client)
            assert cold_s > warm_s  # the first waited for its worker to start
            assert embed_states(client) == ["ready"] and len(worker_pids(up)) == 1

            wait_for(lambda: embed_states(client) == ["unready"], 30, "the idle stop")
            wait_for(lambda: not worker_pids(up), 30, "the idle worker to exit")
            assert any("had no traffic" in line for line in up.lines)
            assert not any("exited with status" in line for line in up.lines)  # not a death

            cold_s, warm_s = cold_then_warm(up, client)  # started again on demand
            assert cold_s > warm_s
            assert len(worker_pids(up)) == 1
    finally:
        code = up.stop(signal.SIGTERM)
    assert code == 0
