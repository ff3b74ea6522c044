"""Real processes: ``headway up`` (supervisor, gateway, workers) on free ports, real model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from headway.catalog import ensure_default_model
from headway.registry.sqlite import Registry
from headway.settings import load_settings
from headway.up.supervisor import METRICS_PREFIX

READY_PREFIX = "headway is ready on "


def wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def children_of(pid: int) -> set[int]:
    """All descendants of ``pid``, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Up:
    """A running ``headway up`` and what it printed."""

    process: subprocess.Popen[str]
    url: str = ""
    urls: list[str] = field(default_factory=list)  # every gateway, the first is ``url``
    metrics_urls: list[str] = field(default_factory=list)
    """Each gateway's operations listener (its /metrics), in the order of ``urls``."""
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60)

    def metrics(self, index: int = 0) -> str:
        """A gateway's /metrics, from its operations listener."""
        answer = httpx.get(self.metrics_urls[index] + "/metrics", timeout=60)
        answer.raise_for_status()
        return answer.text

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout_s)
        if self.reader is not None:
            self.reader.join(timeout_s)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code


def start_up(
    data_dir: Path, *args: str, timeout_s: float = 120, env: dict[str, str] | None = None
) -> Up:
    command = [sys.executable, "-m", "headway", "up", "--port", "0", "--data-dir", str(data_dir)]
    process = subprocess.Popen(
        [*command, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"HEADWAY_GATEWAY__REGISTRY_REFRESH_S": "0.2"} | (env or {}),
    )
    up = Up(process)
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            up.lines.append(line)
            if line.startswith(METRICS_PREFIX):  # printed before the ready line
                words = line[len(METRICS_PREFIX) :].split()
                up.metrics_urls = [w.removesuffix("/metrics") for w in words]
            if line.startswith(READY_PREFIX):
                up.urls = [w for w in line[len(READY_PREFIX) :].split() if w.startswith("http")]
                up.url = up.urls[0]
                ready.set()

    up.reader = threading.Thread(target=read, daemon=True)
    up.reader.start()
    if not ready.wait(timeout_s):
        up.stop(signal.SIGKILL)
        raise AssertionError("headway up never became ready:\n" + "".join(up.lines[-40:]))
    return up


@pytest.fixture(scope="session")
def model_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory with the default model imported once for the whole session."""
    data_dir = tmp_path_factory.mktemp("headway-data")
    settings = load_settings(flags={"data_dir": str(data_dir)})
    ensure_default_model(settings, Registry(settings.registry_path))
    return data_dir


@pytest.fixture
def running(model_data_dir: Path) -> Iterator[Up]:
    up = start_up(model_data_dir, "--embed-replicas", "2", "--rerank-replicas", "1")
    yield up
    up.stop(signal.SIGKILL)
