"""A real Prometheus scrapes a real ``headway up``: every dashboard panel and every rule
returns data.

``headway up`` (synthetic backend: overload is cheap to cause on two cores; two gateways,
each with its /metrics on an operations port of its own) writes its scrape targets file;
a ``prometheus`` in a temp dir reads it through the example config
(deploy/prometheus/prometheus.yml, intervals cut to 1 s) with deploy/prometheus/rules.yml.
Load makes every outcome the panels show: served, shed (a batch tenant flooding a small
admission limit), over quota (a tenant with a tiny bucket), refused (a bad key, a bad
body), embeddings and rerank. Then each panel's expr (template variables filled in) and
each rule's expr is asked of Prometheus's HTTP API; an alert's comparisons get the
``bool`` modifier, so a quiet alert still returns its series. A metric the code renamed,
or one a panel reads that nothing exports, shows up as an empty expression.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from headway.registry.sqlite import Registry
from tests.e2e.conftest import Up, alive, children_of, start_up, wait_for

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
EXAMPLE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "headway.json"

TINY_KEY = "key-prometheus-tiny-quota"
FLOOD_KEY = "key-prometheus-flood"
ENV = {
    # 2 embed replicas at 100 ms a call behind a limit of 64 texts: easy to flood.
    "HEADWAY_WORKER__SYNTHETIC__CALL_MS": "100",
    "HEADWAY_WORKER__SYNTHETIC__TEXT_MS": "2",
    "HEADWAY_GATEWAY__ADMISSION__STATIC_LIMIT_TEXTS": "64",
    # Drift gauges appear once a version has a full reference: make that quick.
    "HEADWAY_OBSERVABILITY__QUALITY__REFERENCE_SIZE": "16",
    "HEADWAY_OBSERVABILITY__QUALITY__WINDOW_SIZE": "16",
    "HEADWAY_OBSERVABILITY__QUALITY__SAMPLE_SHARE": "1",
    "HEADWAY_OBSERVABILITY__QUALITY__INTERVAL_S": "1",
}
SHARED_MODE_ONLY = re.compile(r"\bheadway_stream_\w+")
"""Metrics that only the shared mode exports (JetStream streams' fill and limits): this
embedded ``headway up`` has no stream. tests/unit/metering/test_stream_metric_names.py checks that
each one read is one ``metering/stream_metrics.py`` exports."""
TEMPLATE_VALUES = {"$tenant": ".*", "$pool": ".*", "$__rate_interval": "1m"}
CHILDREN = 6  # 2 embed workers, billing, 2 gateways, batch executor; the rerank worker
# waits for a cross-encoder (none here: rerank is scored on the embed pool)


def with_bool(expr: str) -> str:
    """``expr`` with every comparison outside label matchers and strings made ``bool``:
    ``x > 3`` keeps only the series above 3, ``x > bool 3`` answers 0 or 1 for all."""
    out: list[str] = []
    depth, quote, i = 0, "", 0
    while i < len(expr):
        char = expr[i]
        if quote:
            out.append(char)
            if char == "\\":
                out.append(expr[i + 1])
                i += 1
            elif char == quote:
                quote = ""
            i += 1
            continue
        if char in "\"'`":
            quote = char
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif depth == 0 and (match := re.match(r"==|!=|>=|<=|>|<", expr[i:])):
            operator = match.group(0)
            out.append(operator)
            i += len(operator)
            if not re.match(r"\s*bool\b", expr[i:]):
                out.append(" bool")
            continue
        out.append(char)
        i += 1
    return "".join(out)


def test_with_bool_leaves_label_matchers_alone() -> None:
    assert with_bool('up{job!="gateway"} == 0') == 'up{job!="gateway"} == bool 0'
    assert with_bool("a > 1 and b >= bool 2") == "a > bool 1 and b >= bool 2"
    assert with_bool('x{le="0.5"} < (6 * 0.01)') == 'x{le="0.5"} < bool (6 * 0.01)'


def expressions() -> dict[str, str]:
    """Every expr to ask, by where it comes from."""
    found: dict[str, str] = {}
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in TEMPLATE_VALUES.items():
                expr = expr.replace(variable, value)
            found[f"panel {panel['title']!r} {target['refId']}"] = expr
    for group in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                found[f"record {rule['record']}"] = rule["expr"]
            else:
                found[f"alert {rule['alert']}"] = with_bool(rule["expr"])
    return found


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def get(self, path: str, **params: str) -> Any:
        response = httpx.get(self.url + path, params=params, timeout=10)
        assert response.status_code == 200, f"{path} {params}: {response.text}"
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    def series(self, expr: str) -> int:
        data = self.get("/api/v1/query", query=expr)
        return len(data["result"]) if data["resultType"] in ("vector", "matrix") else 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def headway(tmp_path: Path) -> Iterator[Up]:
    data_dir = tmp_path / "data"
    registry = Registry(data_dir / "registry.sqlite3")
    registry.seed_demo()  # before `up` would, so these tenants join the demo ones
    registry.add_tenant(
        "tiny-quota", "interactive", rate_texts_per_s=0.01, burst_texts=4, key=TINY_KEY
    )
    registry.add_tenant("flood", "batch", rate_texts_per_s=1e6, burst_texts=1e6, key=FLOOD_KEY)
    up = start_up(
        data_dir,
        "--backend",
        "synthetic",
        "--embed-replicas",
        "2",
        "--rerank-replicas",
        "1",
        "--gateways",
        "2",
        env=ENV,
    )
    children = children_of(up.process.pid)
    try:
        yield up
    finally:
        try:
            up.stop(signal.SIGTERM, timeout_s=60)
        except subprocess.TimeoutExpired:
            up.stop(signal.SIGKILL)
        wait_for(lambda: not any(alive(pid) for pid in children), 30, "headway's children to exit")


@pytest.fixture
def prometheus(tmp_path: Path, headway: Up) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            "prometheus is not installed (Debian package prometheus): run `make prerequisites`"
        )
    targets = tmp_path / "data" / "run" / "prometheus-targets.json"
    assert targets.exists(), "headway up writes its scrape targets"
    home = tmp_path / "prometheus"
    home.mkdir()
    shutil.copy(RULES, home / "rules.yml")
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text(encoding="utf-8"))
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    (scrape,) = config["scrape_configs"]
    scrape["file_sd_configs"] = [{"files": [str(targets)], "refresh_interval": "1s"}]
    (home / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    log = home / "prometheus.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={home / 'prometheus.yml'}",
                f"--storage.tsdb.path={home / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=home,
        )
    server = Prometheus(process, f"http://127.0.0.1:{port}", log)
    try:

        def ready() -> bool:
            assert process.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                return httpx.get(server.url + "/-/ready", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, 30, "prometheus to be ready")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def drive(url: str) -> list[int]:
    """Answers that make every outcome the panels show; their status codes."""
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def embed(key: str, texts: int, i: int, timeout_ms: int = 20000) -> int:
            response = await client.post(
                "/v1/embeddings",
                headers={"authorization": f"Bearer {key}", "x-timeout-ms": str(timeout_ms)},
                json={"model": "synthetic", "input": [f"text {i} word {j}" for j in range(texts)]},
            )
            return response.status_code

        async def rerank(i: int) -> int:
            response = await client.post(
                "/v1/rerank",
                headers={"authorization": "Bearer demo-key-support-bot"},
                json={
                    "model": "synthetic",
                    "query": f"query {i}",
                    "documents": [f"document {i} {j}" for j in range(4)],
                },
            )
            return response.status_code

        served = [await embed("demo-key-search-app", 4, i) for i in range(10)]
        served += [await rerank(i) for i in range(10)]
        over_quota = [await embed(TINY_KEY, 4, i) for i in range(4)]
        # 320 texts at once against a limit of 64, of which batch work may fill 70%.
        flood = await asyncio.gather(*(embed(FLOOD_KEY, 8, i) for i in range(40)))
        refused = [
            (
                await client.post(
                    "/v1/embeddings",
                    headers={"authorization": "Bearer nope"},
                    json={"model": "synthetic", "input": ["x"]},
                )
            ).status_code,
            (
                await client.post(
                    "/v1/embeddings",
                    headers={"authorization": "Bearer demo-key-search-app"},
                    json={"model": "synthetic", "input": False},
                )
            ).status_code,
        ]
        more = [await embed("demo-key-search-app", 4, i) for i in range(10, 20)]
        return [*served, *over_quota, *flood, *refused, *more]


def test_every_panel_and_rule_returns_data_from_a_real_prometheus(
    headway: Up, prometheus: Prometheus
) -> None:
    def targets_up() -> bool:
        active = prometheus.get("/api/v1/targets", state="active")["activeTargets"]
        return len(active) == CHILDREN and all(t["health"] == "up" for t in active)

    wait_for(targets_up, 30, f"all {CHILDREN} targets scraped and up", interval_s=0.5)
    active = prometheus.get("/api/v1/targets", state="active")["activeTargets"]
    jobs = sorted(target["labels"]["job"] for target in active)
    assert jobs == ["billing", "executor", "gateway", "gateway", "worker", "worker"]
    # Each gateway scraped on its operations port; its client port serves no /metrics.
    scraped = {t["scrapeUrl"] for t in active if t["labels"]["job"] == "gateway"}
    assert scraped == {url + "/metrics" for url in headway.metrics_urls}, scraped
    assert len(headway.metrics_urls) == len(headway.urls) == 2
    for url in headway.urls:
        assert url + "/metrics" not in scraped
        assert httpx.get(url + "/metrics", timeout=10).status_code == 404
    pools = sorted(t["labels"]["pool"] for t in active if t["labels"]["job"] == "worker")
    assert pools == ["embed", "embed"]

    statuses = asyncio.run(drive(headway.url))
    for status in (200, 401, 429, 503):
        assert status in statuses, f"load made no {status}: {sorted(set(statuses))}"

    def rules_ok() -> bool:
        groups = prometheus.get("/api/v1/rules")["groups"]
        return bool(groups) and all(r["health"] == "ok" for g in groups for r in g["rules"])

    wait_for(rules_ok, 30, "every rule evaluated with health ok", interval_s=0.5)
    groups = prometheus.get("/api/v1/rules")["groups"]
    loaded = sum(len(group["rules"]) for group in groups)
    wanted = expressions()
    assert loaded == sum(1 for where in wanted if not where.startswith("panel")), groups

    # Scrapes and rule evaluations come every second: give each expression a few rounds.
    shared_only = [where for where, expr in wanted.items() if SHARED_MODE_ONLY.search(expr)]
    assert shared_only, "no expression reads the streams' metrics: drop SHARED_MODE_ONLY"
    empty = [where for where in wanted if where not in shared_only]
    deadline = time.monotonic() + 30
    while empty and time.monotonic() < deadline:
        empty = [where for where in empty if prometheus.series(wanted[where]) == 0]
        if empty:
            time.sleep(1)
    assert not empty, "expressions that returned no series:\n" + "\n".join(
        f"  {where}: {wanted[where]}" for where in empty
    )
    assert targets_up(), "a target went down during the test"
