"""A replica SIGKILLed or drained (SIGTERM) under load: no client-visible error, and
`up` brings it back."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import children_of, start_up, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.alone]  # its figures need the machine alone

ADMIN = {"authorization": "Bearer demo-admin-key"}


def worker_pids(supervisor_pid: int) -> list[int]:
    return [
        pid
        for pid in children_of(supervisor_pid)
        if b"worker" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    ]


async def steady_load(url: str, seconds: float, kill_at: float, victim: int, sig: int) -> list[int]:
    statuses: list[int] = []
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:

        async def loop(i: int) -> None:
            while time.monotonic() - started < seconds:
                response = await client.post(
                    "/v1/embeddings",
                    headers={"authorization": "Bearer demo-key-search-app"},
                    json={"model": "synthetic", "input": [f"load {i} {len(statuses)}"] * 2},
                )
                statuses.append(response.status_code)

        async def kill() -> None:
            await asyncio.sleep(kill_at)
            os.kill(victim, sig)

        await asyncio.gather(kill(), *(loop(i) for i in range(6)))
    return statuses


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "drained"])
def test_losing_a_replica_under_load_costs_no_request(tmp_path, monkeypatch, sig):
    monkeypatch.setenv("HEADWAY_WORKER__SYNTHETIC__CALL_MS", "20")
    monkeypatch.setenv("HEADWAY_WORKER__SYNTHETIC__TEXT_MS", "1")
    monkeypatch.setenv("HEADWAY_GATEWAY__QUOTA__ENABLED", "false")
    up = start_up(
        tmp_path, "--backend", "synthetic", "--embed-replicas", "2", "--rerank-replicas", "0"
    )
    try:
        before = worker_pids(up.process.pid)
        assert len(before) == 2
        statuses = asyncio.run(
            steady_load(up.url, seconds=4.0, kill_at=1.5, victim=before[0], sig=sig)
        )
        assert len(statuses) > 50
        assert set(statuses) == {200}, {s: statuses.count(s) for s in set(statuses)}

        def back_and_ready() -> bool:
            pids = worker_pids(up.process.pid)
            replicas = httpx.get(up.url + "/admin/replicas", headers=ADMIN).json()["pools"]
            return (
                len(pids) == 2
                and before[0] not in pids
                and all(r["state"] == "ready" for r in replicas["embed"])
            )

        wait_for(back_and_ready, timeout_s=30, what="the killed worker to be restarted and ready")
    finally:
        assert up.stop(signal.SIGTERM) == 0
