"""SIGTERM on a standalone gateway: it stops accepting new connections at once,
finishes the requests in flight, and exits 0.

Standalone processes, not ``headway up``: the supervisor would restart the gateway
(and it holds the listening socket too), hiding whether the gateway stopped accepting.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from headway.registry.sqlite import Registry
from headway_tools.testing.server import free_port
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e

ADMIN = {"authorization": "Bearer demo-admin-key"}
AUTH = {"authorization": "Bearer demo-key-search-app"}
HEADWAY = (sys.executable, "-m", "headway")
IN_FLIGHT, TEXTS = 4, 2


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A headway process whose stderr goes to ``log`` (the parent keeps no handle open)."""
    with log.open("w") as stderr:
        return subprocess.Popen([*HEADWAY, *args], env=env, stderr=stderr)


def embed(gateway: str, tag: str) -> httpx.Response:
    body = {"model": "synthetic", "input": [f"{tag} text {i}" for i in range(TEXTS)]}
    return httpx.post(gateway + "/v1/embeddings", headers=AUTH, json=body, timeout=30)


def test_sigterm_stops_accepting_finishes_in_flight_and_exits_0(tmp_path):
    Registry(tmp_path / "registry.sqlite3").seed_demo()
    env = os.environ | {
        "HEADWAY_WORKER__SYNTHETIC__CALL_MS": "2000",  # every request stays in flight 2 s
        "HEADWAY_WORKER__SYNTHETIC__TEXT_MS": "0",
        "HEADWAY_GATEWAY__QUOTA__ENABLED": "false",
        "HEADWAY_GATEWAY__DRAIN_DELAY_S": "0",  # close at once on SIGTERM, no unready period
        "HEADWAY_GATEWAY__REGISTRY_REFRESH_S": "0.2",
    }
    worker_port, port = free_port(), free_port()
    gateway, worker_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{worker_port}"
    common = ("--data-dir", str(tmp_path))
    log = tmp_path / "gateway.log"
    worker = spawn(
        ["run", "worker", "--backend", "synthetic", "--port", str(worker_port), *common],
        env,
        tmp_path / "worker.log",
    )
    process = spawn(
        [
            "run",
            "gateway",
            "--port",
            str(port),
            "--ops-port",
            "0",
            "--embed-urls",
            worker_url,
            *common,
        ],
        env,
        log,
    )

    def ready() -> bool:
        try:
            return httpx.get(gateway + "/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    def outstanding_texts() -> int:
        replicas = httpx.get(gateway + "/admin/replicas", headers=ADMIN).json()["pools"]
        return sum(replica["outstanding_texts"] for replica in replicas["embed"])

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        return False

    with ThreadPoolExecutor(IN_FLIGHT) as threads:
        try:
            wait_for(ready, 30, "the gateway to be ready")
            # The worker registers "synthetic" as it starts; the gateway sees it on refresh.
            wait_for(lambda: embed(gateway, "first").status_code == 200, 30, "a first embedding")

            in_flight = [threads.submit(embed, gateway, f"in flight {i}") for i in range(IN_FLIGHT)]
            wait_for(lambda: outstanding_texts() == IN_FLIGHT * TEXTS, 10, "requests in flight")
            process.send_signal(signal.SIGTERM)

            wait_for(refused, 5, "new connections to be refused")
            still_draining = process.poll() is None and not any(f.done() for f in in_flight)
            assert still_draining, "refused only once the gateway had exited:\n" + log.read_text()

            for future in in_flight:
                response = future.result(timeout=30)
                assert response.status_code == 200, response.text
                assert len(response.json()["data"]) == TEXTS
            assert process.wait(30) == 0, log.read_text()
        finally:
            for child in (process, worker):
                if child.poll() is None:
                    child.kill()
                child.wait(30)
