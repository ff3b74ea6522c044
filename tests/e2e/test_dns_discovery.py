"""Replicas found through DNS: a real dnsmasq on a loopback port, replicas on 127.0.0.x.

As with a Kubernetes headless service, every replica listens on the same port at
its own address; dnsmasq serves their A records from a hosts file it re-reads on
SIGHUP, and the gateway follows additions and removals.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import dns.exception
import dns.resolver
import httpx
import pytest

from headway.registry.sqlite import Registry
from headway_tools.testing.server import free_port
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e

NAME = "embed.headway.test"
ADMIN = {"authorization": "Bearer demo-admin-key"}
HEADWAY = (sys.executable, "-m", "headway")


def free_port_on(hosts: list[str]) -> int:
    """A port free on every one of ``hosts``."""
    for _ in range(50):
        port = free_port()
        try:
            for host in hosts:
                with socket.socket() as probe:
                    probe.bind((host, port))
        except OSError:
            continue
        return port
    raise AssertionError("no common free port")


class Dnsmasq:
    """dnsmasq on a free loopback port, answering from a hosts file it re-reads on SIGHUP."""

    def __init__(self, directory: Path) -> None:
        dnsmasq = shutil.which("dnsmasq", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        assert dnsmasq, "dnsmasq is missing (scripts/test-prerequisites installs dnsmasq-base)"
        self.hosts = directory / "hosts"
        self.hosts.write_text("")
        for _ in range(5):  # a port free for TCP may still be taken for UDP: try another
            self.port = free_port()
            self.process = subprocess.Popen(
                [
                    dnsmasq,
                    "--keep-in-foreground",
                    "--no-resolv",
                    "--no-hosts",
                    f"--addn-hosts={self.hosts}",
                    f"--port={self.port}",
                    "--listen-address=127.0.0.1",
                    "--bind-interfaces",
                    "--cache-size=0",
                    "--local-ttl=0",
                    f"--pid-file={directory / 'dnsmasq.pid'}",
                    "--user=root",
                ],
                stderr=subprocess.DEVNULL,
            )
            if self._answers():
                return
            self.stop()
        raise AssertionError("dnsmasq did not start")

    def _answers(self) -> bool:
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers, resolver.port, resolver.lifetime = ["127.0.0.1"], self.port, 0.5
        for _ in range(10):
            if self.process.poll() is not None:
                return False
            try:
                resolver.resolve(NAME, "A")
                return True
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.resolver.NoNameservers):
                return True  # an answer, even "no such name", means it is serving
            except dns.exception.Timeout:
                continue
        return False

    def serve(self, addresses: list[str]) -> None:
        self.hosts.write_text("".join(f"{address} {NAME}\n" for address in addresses))
        self.process.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


def spawn(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A headway process whose stderr goes to ``log`` (the parent keeps no handle open)."""
    with log.open("w") as stderr:
        return subprocess.Popen([*HEADWAY, *args], env=env, stderr=stderr)


def replicas(gateway: str) -> dict[str, str]:
    answer = httpx.get(gateway + "/admin/replicas", headers=ADMIN).json()
    return {r["url"]: r["state"] for r in answer["pools"]["embed"]}


def test_the_gateway_follows_dns_as_replicas_join_and_leave(tmp_path):
    Registry(tmp_path / "registry.sqlite3").seed_demo()
    env = os.environ | {
        "HEADWAY_WORKER__SYNTHETIC__CALL_MS": "0",
        "HEADWAY_WORKER__SYNTHETIC__TEXT_MS": "0",
    }
    dns = Dnsmasq(tmp_path)
    port = str(free_port_on(["127.0.0.2", "127.0.0.3"]))
    gateway_port = free_port()
    common = ("--data-dir", str(tmp_path))
    processes = [
        spawn(
            ["run", "worker", "--backend", "synthetic", "--host", host, *common, "--port", port],
            env,
            tmp_path / f"worker-{host}.log",
        )
        for host in ("127.0.0.2", "127.0.0.3")
    ]
    try:
        dns.serve(["127.0.0.2"])
        discovery = ("--embed-dns", f"{NAME}:{port}", "--dns-server", f"127.0.0.1:{dns.port}")
        gateway_env = env | {
            "HEADWAY_GATEWAY__DNS_INTERVAL_S": "0.2",
            "HEADWAY_GATEWAY__REGISTRY_REFRESH_S": "0.2",
        }
        processes.append(
            spawn(
                [
                    "run",
                    "gateway",
                    "--port",
                    str(gateway_port),
                    "--ops-port",
                    "0",
                    *common,
                    *discovery,
                ],
                gateway_env,
                tmp_path / "gateway.log",
            )
        )
        gateway = f"http://127.0.0.1:{gateway_port}"
        first, second = f"http://127.0.0.2:{port}", f"http://127.0.0.3:{port}"
        wait_for(lambda: _answers(gateway) and replicas(gateway) == {first: "ready"}, 30, "one")

        dns.serve(["127.0.0.2", "127.0.0.3"])
        both = {first: "ready", second: "ready"}
        wait_for(lambda: replicas(gateway) == both, 10, "the second replica to be found")
        body = {"model": "synthetic", "input": [f"t{i}" for i in range(64)]}  # 4 chunks
        auth = {"authorization": "Bearer demo-key-search-app"}

        def embedded() -> bool:  # the workers register "synthetic" as they start
            return (
                httpx.post(gateway + "/v1/embeddings", headers=auth, json=body).status_code == 200
            )

        wait_for(embedded, 10, "the model to be served")
        served = {url: _chunks_served(url) for url in (first, second)}
        assert all(count > 0 for count in served.values()), served

        dns.serve(["127.0.0.3"])
        wait_for(lambda: replicas(gateway) == {second: "ready"}, 10, "the first to be dropped")
        assert httpx.post(gateway + "/v1/embeddings", headers=auth, json=body).status_code == 200
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
        dns.stop()


def _answers(gateway: str) -> bool:
    try:
        return httpx.get(gateway + "/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def _chunks_served(worker: str) -> float:
    prefix = 'headway_worker_chunks_total{outcome="ok"'
    metrics = httpx.get(worker + "/metrics").text
    lines = [line for line in metrics.splitlines() if line.startswith(prefix)]
    return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0
