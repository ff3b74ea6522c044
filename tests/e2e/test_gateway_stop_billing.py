"""A gateway SIGTERMed under load (a rolling update's stop) gets every 200 it answered onto
JetStream exactly once before it exits: the relay's last flush (gateway.outbox_flush_s).

NATS is frozen (SIGSTOP) for the last second of load, so the relay's loop cannot keep up
and the outbox holds the latest events when the SIGTERM comes; it thaws just after. The
events can then reach the stream only through the stop's flush, not the loop that was
publishing as they came. Standalone processes, as in test_gateway_drain.py (the supervisor
of ``headway up`` would restart the gateway).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from headway.metering.build import stream_config
from headway.metering.event import decode
from headway.metering.stream import connect, ensure_stream
from headway.registry.sqlite import Registry
from headway.settings import Settings, StreamsSettings
from headway_tools.testing.nats_server import NatsServer
from headway_tools.testing.server import free_port
from tests.e2e.conftest import wait_for
from tests.metering.test_relay import stream_messages

pytestmark = pytest.mark.e2e

AUTH = {"authorization": "Bearer demo-key-search-app"}
HEADWAY = (sys.executable, "-m", "headway")
CLIENTS = 6
GATEWAY_ID = "headway-gateway-0"


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as stderr:
        return subprocess.Popen([*HEADWAY, *args], env=env, stderr=stderr)


class Load:
    """``CLIENTS`` closed-loop clients until ``stop``; the request ids answered 200."""

    def __init__(self, gateway: str) -> None:
        self._gateway = gateway
        self.stop = threading.Event()
        self.ok: list[str] = []
        self.errors = 0
        self._lock = threading.Lock()

    def client(self, index: int) -> None:
        with httpx.Client(base_url=self._gateway, headers=AUTH, timeout=10) as http:
            sent = 0
            while not self.stop.is_set():
                body = {"model": "synthetic", "input": [f"client {index} text {sent}"]}
                sent += 1
                try:
                    answer = http.post("/v1/embeddings", json=body)
                except httpx.HTTPError:
                    with self._lock:
                        self.errors += 1
                    time.sleep(0.01)  # a refused connect returns at once: do not spin
                    continue
                with self._lock:
                    if answer.status_code == 200:
                        self.ok.append(answer.headers["x-request-id"])
                    else:
                        self.errors += 1


async def stream_request_ids(server: NatsServer) -> list[str]:
    settings = Settings(  # the stream as the gateway made it
        nats_url=server.url, streams=StreamsSettings(monitor_urls=server.monitor_url)
    )
    config = dataclasses.replace(stream_config(settings), reconnect_wait_s=0.1)
    nc, js = await connect(config)
    try:
        await ensure_stream(js, config)
        return [decode(message.data).request_id for message in await stream_messages(js, config)]
    finally:
        await nc.close()


def outbox_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM outbox").fetchone()
    return int(count)


def test_sigterm_under_load_relays_every_200_exactly_once(tmp_path: Path) -> None:
    Registry(tmp_path / "registry.sqlite3").seed_demo()
    nats = NatsServer().start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEADWAY_")} | {
        "HEADWAY_WORKER__SYNTHETIC__CALL_MS": "5",
        "HEADWAY_WORKER__SYNTHETIC__TEXT_MS": "0",
        "HEADWAY_GATEWAY__QUOTA__ENABLED": "false",
        "HEADWAY_GATEWAY__DRAIN_DELAY_S": "0",
        "HEADWAY_GATEWAY__REGISTRY_REFRESH_S": "0.2",
        "HEADWAY_GATEWAY__OUTBOX_FLUSH_S": "20",
        "HEADWAY_STREAMS__MONITOR_URLS": nats.monitor_url,  # where its fsync setting is read
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
            *("run", "gateway", "--port", str(port), "--ops-port", "0", "--id", GATEWAY_ID),
            *("--embed-urls", worker_url, "--nats-url", nats.url, *common),
        ],
        env,
        log,
    )
    load = Load(gateway)
    frozen = False
    try:

        def first_embedding() -> bool:
            try:
                body = {"model": "synthetic", "input": ["first"]}
                return httpx.post(gateway + "/v1/embeddings", headers=AUTH, json=body).is_success
            except httpx.HTTPError:
                return False

        # Start-up is seconds alone; the long deadline is for a machine busy with others.
        wait_for(first_embedding, 120, "a first embedding")
        with ThreadPoolExecutor(CLIENTS) as threads:
            clients = [threads.submit(load.client, i) for i in range(CLIENTS)]
            wait_for(lambda: len(load.ok) >= 200, 20, "200 answers under load")
            assert nats.pid is not None
            os.kill(nats.pid, signal.SIGSTOP)
            frozen = True
            answered_before_freeze = len(load.ok)
            wait_for(
                lambda: len(load.ok) >= answered_before_freeze + 100, 20, "answers while frozen"
            )
            process.send_signal(signal.SIGTERM)
            # Frozen until the loop has been cancelled and the last flush begins: what
            # the flush relays, the loop could not have.
            wait_for(lambda: ": the last flush, " in log.read_text(), 60, "the last flush")
            os.kill(nats.pid, signal.SIGCONT)
            frozen = False
            status = process.wait(60)
            load.stop.set()
            for client in clients:
                client.result(timeout=30)
        text = log.read_text()
        assert status == 0, text
        assert load.errors > 0, "no client saw the gateway go away"

        stored = Counter(asyncio.run(stream_request_ids(nats)))
        answered = Counter(load.ok)
        assert max(answered.values()) == 1
        missing = [rid for rid in answered if rid not in stored]
        assert missing == [], f"{len(missing)} of {len(answered)} 200s not on the stream\n{text}"
        assert [rid for rid, count in stored.items() if count > 1] == []
        assert outbox_rows(tmp_path / "outbox" / f"{GATEWAY_ID}.sqlite3") == 0
        (line,) = [line for line in text.splitlines() if "on stop:" in line]
        assert ", 0 left" in line, line
        relayed = int(line.split(" events relayed")[0].rsplit(" ", 1)[1])
        assert relayed > 0, f"the flush had nothing to do: {line}"
        print(f"{len(answered)} answered 200; {line.split(': ', 1)[-1]}")
    finally:
        load.stop.set()
        if frozen and nats.pid is not None:
            os.kill(nats.pid, signal.SIGCONT)
        for child in (process, worker):
            if child.poll() is None:
                child.kill()
            child.wait(30)
        nats.close()
