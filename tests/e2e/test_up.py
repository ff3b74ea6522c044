"""``headway up`` end to end: real supervisor, gateway and workers, the real model."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from headway.models.store import ModelStore
from headway.registry.sqlite import Registry
from headway.worker.backends.onnx import OnnxBackend
from tests.e2e.conftest import Up, alive, children_of, start_up, wait_for

pytestmark = pytest.mark.e2e

HEADWAY = (sys.executable, "-m", "headway")
SEARCH_APP = {"authorization": "Bearer demo-key-search-app"}
SUPPORT_BOT = {"authorization": "Bearer demo-key-support-bot"}
PUMP = "Pump vibration rises when the bearing wears out"
DOCUMENTS = ["Invoice 4471 is overdue", PUMP, "The compressor seal leaked"]


def reference_embeddings(data_dir, texts):
    record = Registry(data_dir / "registry.sqlite3").resolve_model("all-MiniLM-L6-v2")
    assert record is not None
    backend = OnnxBackend.load(ModelStore(data_dir / "models").get(record.version))
    return backend.run(backend.encode_texts(texts)), record.version


def test_quick_start_serves_the_real_model_and_stops_cleanly(running, model_data_dir):
    texts = [PUMP, *(f"maintenance log entry {i}: the seal at pump {i} leaked" for i in range(39))]
    expected, version = reference_embeddings(model_data_dir, texts)
    with running.client() as client:
        response = client.post(
            "/v1/embeddings", headers=SEARCH_APP, json={"model": "all-MiniLM-L6-v2", "input": texts}
        )
        assert response.status_code == 200, response.text
        assert response.headers["x-model-version"] == version
        served = np.asarray([d["embedding"] for d in response.json()["data"]], dtype=np.float32)
        cosines = np.sum(served * expected, axis=1)
        assert cosines.min() > 0.9999  # 40 texts: fanned out over both replicas, merged in order

        ranked = client.post(
            "/v1/rerank",
            headers=SUPPORT_BOT,
            json={"query": "why is the pump vibrating", "top_n": 2, "documents": DOCUMENTS},
        )
        assert ranked.status_code == 200, ranked.text
        results = ranked.json()["results"]
        assert next(r["index"] for r in results) == 1
        assert len(results) == 2 and results[0]["relevance_score"] > results[1]["relevance_score"]

        # /metrics: where `up` printed it (the operations port), not on the client port.
        assert client.get("/metrics", headers=SEARCH_APP).status_code == 404
    (metrics_url,) = running.metrics_urls
    assert metrics_url != running.url
    assert 'tenant="search-app"' in running.metrics()

    workers = children_of(running.process.pid)
    assert len(workers) >= 5  # 2 embed workers, the gateway, billing, the batch executor
    assert running.stop(signal.SIGTERM) == 0
    assert not [pid for pid in workers if alive(pid)]


def test_a_new_tenant_key_works_without_a_restart(running, model_data_dir):
    added = subprocess.run(
        [
            sys.executable,
            "-m",
            "headway",
            "tenants",
            "add",
            "acme",
            "--tier",
            "batch",
            "--data-dir",
            str(model_data_dir),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    key = added.stdout.strip().splitlines()[-1]
    assert key.startswith("hw_")
    body = {"model": "minilm", "input": ["hello"]}
    with running.client() as client:
        wait_for(
            lambda: (
                client.post(
                    "/v1/embeddings", headers={"authorization": f"Bearer {key}"}, json=body
                ).status_code
                == 200
            ),
            timeout_s=10,
            what="the gateway to pick up the new key",
        )


def test_killing_the_supervisor_takes_every_child_with_it(model_data_dir):
    up = start_up(model_data_dir, "--embed-replicas", "1", "--rerank-replicas", "0")
    workers = children_of(up.process.pid)
    assert len(workers) >= 2
    up.stop(signal.SIGKILL)
    wait_for(
        lambda: not [pid for pid in workers if alive(pid)], timeout_s=30, what="children to exit"
    )


def gateway_pids(up: Up) -> set[int]:
    """The supervisor's gateway children, from /proc."""
    found = set()
    for pid in children_of(up.process.pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"gateway" in command and alive(pid):
            found.add(pid)
    return found


def test_a_gateway_that_dies_comes_back_on_both_of_its_ports(tmp_path: Path) -> None:
    up = start_up(tmp_path, "--backend", "synthetic", "--rerank-replicas", "0")
    try:
        (killed,) = gateway_pids(up)
        os.kill(killed, signal.SIGKILL)

        def back() -> bool:
            pids = gateway_pids(up) - {killed}
            if not pids:
                return False
            try:
                ready = httpx.get(up.url + "/readyz", timeout=2).status_code == 200
                return ready and "headway_requests_total" in up.metrics()
            except httpx.HTTPError:
                return False

        wait_for(back, 60, "the gateway restarted on its client and operations ports")
        assert httpx.get(up.url + "/metrics", timeout=10).status_code == 404
        assert any("restarted gateway" in line for line in up.lines)
    finally:
        assert up.stop(signal.SIGTERM) == 0


def test_a_first_start_imports_the_model_in_a_process_of_its_own(tmp_path: Path) -> None:
    """The supervisor lives as long as the system: what importing the default model loads
    (the ONNX and tokenizer libraries, the buffers of the conversion) stays out of it."""
    up = start_up(tmp_path / "data", "--rerank-replicas", "0")  # no model stored yet
    try:
        imported = [line for line in up.lines if "model all-MiniLM-L6-v2 version" in line]
        assert len(imported) == 1, "".join(up.lines)
        assert f"[{up.process.pid}]" not in imported[0]  # logged by the importing process
        mapped = Path(f"/proc/{up.process.pid}/maps").read_text()
        assert "onnx" not in mapped and "tokenizers" not in mapped
        with httpx.Client(base_url=up.url, timeout=60) as client:
            served = client.post(
                "/v1/embeddings",
                headers=SEARCH_APP,
                json={"model": "all-MiniLM-L6-v2", "input": [PUMP]},
            )
            assert served.status_code == 200, served.text
    finally:
        assert up.stop(signal.SIGTERM) == 0
