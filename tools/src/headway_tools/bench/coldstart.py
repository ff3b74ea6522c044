"""``headway bench coldstart``: how long a pool at zero makes its first request wait.

Each trial runs ``headway up`` itself (the CLI, in a process of its own) with the real
model, one embed worker, no rerank pool, ``--no-prewarm`` and ``--idle-stop-s``. Once
it says it is ready (no worker runs yet), it sends the first request with a deadline of
30 s (``X-Timeout-Ms``) and times its answer: the gateway holds it while the supervisor,
woken, starts the worker, which loads and warms the model. Then a warm request, for
comparison. Then it waits for the idle stop (no worker process left) and does both
again: a pool started again after an idle stop. Also read, after each first request,
how long the gateway held it (``headway_cold_start_wait_seconds``) and, from the
worker's own log line, how much of that it spent loading and warming the model (the
rest is the process starting: the interpreter and its imports).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from headway.catalog import ensure_default_model
from headway.registry.sqlite import DEMO_ADMIN_KEY
from headway.settings import load_settings
from headway.up.supervisor import METRICS_PREFIX
from headway_tools.bench.errors import ServingFailed
from headway_tools.bench.served import API_KEY, demo_registry

DEADLINE_MS = 30_000
READY_PREFIX = "headway is ready on "
UP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
POLL_S = 0.05  # the condition polls' interval
TEXTS = ["a pool at zero replicas", "wakes up when its first request comes"]
WORKER_READY = re.compile(r"worker ready: pool=embed versions=\S+ in ([0-9.]+)s")


@dataclass(slots=True)
class Trial:
    """One ``headway up``: each time in seconds, as the client saw it."""

    cold_s: float = 0.0
    warm_s: float = 0.0
    held_s: float = 0.0
    """Of the first request's time, how long the gateway held it for a replica."""
    load_s: float = 0.0
    """Of the hold, the worker's loading and warming its model (its log, to 0.1 s)."""
    again_cold_s: float = 0.0
    again_warm_s: float = 0.0
    again_held_s: float = 0.0
    again_load_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ColdStartResults:
    trials: Sequence[Trial]
    idle_stop_s: float
    model_version: str


@dataclass(slots=True)
class _Up:
    """A running ``headway up`` and what it printed."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    url: str = ""
    metrics_url: str = ""
    """The gateway's operations listener (printed before the ready line)."""
    ready: threading.Event = field(default_factory=threading.Event)

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith(METRICS_PREFIX):
                self.metrics_url = line[len(METRICS_PREFIX) :].split()[0].removesuffix("/metrics")
            if line.startswith(READY_PREFIX):
                self.url = line[len(READY_PREFIX) :].split()[0]
                self.ready.set()


@contextmanager
def _headway_up(data_dir: Path, idle_stop_s: float) -> Iterator[_Up]:
    command = [sys.executable, "-m", "headway", "up", "--data-dir", str(data_dir), "--port", "0"]
    command += ["--embed-replicas", "1", "--rerank-replicas", "0", "--no-prewarm"]
    command += ["--idle-stop-s", str(idle_stop_s), "--log-level", "info"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    up = _Up(process)
    reader = threading.Thread(target=up.read, daemon=True)
    reader.start()
    try:
        if not up.ready.wait(UP_TIMEOUT_S):
            raise ServingFailed("headway up was not ready:\n" + "".join(up.lines[-30:]))
        yield up
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(STOP_TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()


def _post(url: str) -> float:
    """One embeddings request; the seconds to its answer (which must be a 200)."""
    body = json.dumps({"model": "all-MiniLM-L6-v2", "input": TEXTS}).encode()
    request = urllib.request.Request(
        url + "/v1/embeddings",
        body,
        {
            "authorization": f"Bearer {API_KEY}",
            "content-type": "application/json",
            "x-timeout-ms": str(DEADLINE_MS),
        },
    )
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE_MS / 1000 + 5) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        raise ServingFailed(f"the request was answered {exc.code}: {exc.read()[:300]!r}") from exc
    return time.perf_counter() - started


def _held_s(metrics_url: str) -> float:
    """Seconds the gateway has held requests for the embed pool, in all."""
    with urllib.request.urlopen(metrics_url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith('headway_cold_start_wait_seconds_sum{pool="embed"}'):
            return float(line.split()[-1])
    raise ServingFailed("the gateway has no headway_cold_start_wait_seconds for embed")


def _embed_states(url: str) -> list[str]:
    request = urllib.request.Request(
        url + "/admin/replicas", headers={"authorization": f"Bearer {DEMO_ADMIN_KEY}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        replicas = json.loads(response.read())
    return [replica["state"] for replica in replicas["pools"]["embed"]]


def _workers_of(pid: int) -> set[int]:
    """The worker processes ``pid`` started that are still running (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        if int(parent) == pid and state != "Z" and b"worker" in command:
            found.add(int(entry.name))
    return found


def _until(condition: Callable[[], bool], what: str, timeout_s: float = UP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise ServingFailed(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(POLL_S)


def _loads(up: _Up) -> list[float]:
    """The worker's model load times so far, from its ``worker ready`` lines."""
    return [float(m.group(1)) for line in list(up.lines) if (m := WORKER_READY.search(line))]


def _cold_then_warm(up: _Up, start: int) -> tuple[float, float, float, float]:
    """The first request's time, the warm one's, the hold, and the worker's model load
    (its ``start``-th since ``up`` began, counting from 1)."""
    held_before = _held_s(up.metrics_url)
    cold_s = _post(up.url)
    held_s = _held_s(up.metrics_url) - held_before
    warm_s = _post(up.url)
    _until(lambda: len(_loads(up)) >= start, "the worker's ready line", STOP_TIMEOUT_S)
    return cold_s, warm_s, held_s, _loads(up)[start - 1]


def _trial(data_dir: Path, idle_stop_s: float) -> Trial:
    with _headway_up(data_dir, idle_stop_s) as up:
        pid = up.process.pid
        if _workers_of(pid):
            raise ServingFailed("a worker runs before the first request: prewarm is not off")
        trial = Trial()
        trial.cold_s, trial.warm_s, trial.held_s, trial.load_s = _cold_then_warm(up, 1)
        _until(lambda: _embed_states(up.url) == ["unready"], "the idle stop")
        _until(lambda: not _workers_of(pid), "the idle worker to exit")
        again = _cold_then_warm(up, 2)
        trial.again_cold_s, trial.again_warm_s, trial.again_held_s, trial.again_load_s = again
        return trial


def run_coldstart_bench(data_dir: Path, *, trials: int, idle_stop_s: float) -> ColdStartResults:
    if trials < 1:
        raise ValueError(f"trials must be at least 1, not {trials}")
    settings = load_settings(flags={"data_dir": str(data_dir)})
    registry = demo_registry(settings)
    record = ensure_default_model(settings, registry)
    results = [_trial(settings.data_dir, idle_stop_s) for _ in range(trials)]
    return ColdStartResults(results, idle_stop_s, record.version)
