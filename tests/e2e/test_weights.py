"""A weights store across machines, with real processes and the real model.

One ``headway up`` (data dir A, the registry on a throw-away Postgres as in shared mode)
serves its model store. ``headway models fetch`` brings the default model into data dir
B over HTTP; a ``headway worker`` on an empty data dir C with ``weights.url`` fetches it
by itself and answers the very embeddings A's workers do; and a byte changed in B's copy
makes ``headway models verify`` and ``headway worker`` refuse it, naming the file.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path

import httpx
import numpy as np
import pytest

from headway import wire
from headway.catalog import DEFAULT_ALIASES, register
from headway.models.store import ModelStore
from headway.registry.postgres import PostgresRegistry
from headway_tools.testing.postgres_server import PostgresServer
from headway_tools.testing.server import free_port
from tests.e2e.conftest import start_up, wait_for
from tests.e2e.lifecycle import TENANT, fresh_database
from tests.weights_builders import tamper

pytestmark = pytest.mark.e2e

TOKEN = "worker-credential-e2e"
HEADWAY = (sys.executable, "-m", "headway")
TEXTS = ["a weights store for many machines", "verified before it loads", "hi"]


def headway(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HEADWAY, *args], capture_output=True, text=True, timeout=60, env=env)


def embed_directly(worker_url: str, version: str) -> np.ndarray:
    chunk = wire.EmbedChunk(uuid.uuid4().hex, TEXTS, 30_000, model_version=version)
    answer = httpx.post(
        worker_url + wire.EmbedChunk.path,
        content=wire.encode(chunk),
        headers={"content-type": wire.CONTENT_TYPE},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return wire.result_decoder.decode(answer.content).array()


def start_worker(data_dir: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [*HEADWAY, "run", "worker", "--data-dir", str(data_dir), "--port", str(port)]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    return process, f"http://127.0.0.1:{port}"


def ready(url: str) -> bool:
    try:
        return httpx.get(url + "/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_a_worker_elsewhere_fetches_verifies_and_serves_the_same_model(
    model_data_dir: Path, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    postgres_url = fresh_database(postgres_server)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    shutil.copytree(model_data_dir / "models", a / "models")  # never change the shared one
    stored = ModelStore(a / "models").list()[0]
    version = stored.version
    with closing(PostgresRegistry(postgres_url)) as registry:
        registry.seed_demo()
        register(registry, stored, DEFAULT_ALIASES)
    env = os.environ | {"HEADWAY_POSTGRES_URL": postgres_url}
    up = start_up(
        a,
        "--embed-replicas",
        "1",
        "--rerank-replicas",
        "0",
        env={"HEADWAY_POSTGRES_URL": postgres_url, "HEADWAY_WEIGHTS__TOKEN": TOKEN},
    )
    workers: list[subprocess.Popen] = []
    try:
        # An init container's fetch, into a data dir of its own.
        fetch = headway(env, "models", "fetch", version, "--from", up.url, "--token", TOKEN,
                        "--data-dir", str(b))  # fmt: skip
        assert fetch.returncode == 0, fetch.stderr
        assert fetch.stdout.split() == [version, str(b / "models" / version)]
        assert ModelStore(b / "models").verify(version).version == version
        refused = headway(env, "models", "fetch", version, "--from", up.url, "--token", "wrong",
                          "--data-dir", str(tmp_path / "d"))  # fmt: skip
        assert refused.returncode == 1 and "answered 401" in refused.stderr

        # A worker on an empty data dir fetches the version it is told to serve.
        worker_env = env | {"HEADWAY_WEIGHTS__URL": up.url, "HEADWAY_WEIGHTS__TOKEN": TOKEN}
        fetching, fetching_url = start_worker(c, worker_env, tmp_path / "c.log")
        workers.append(fetching)
        wait_for(lambda: ready(fetching_url) or fetching.poll() is not None, 60, "worker C")
        log = (tmp_path / "c.log").read_text()
        assert fetching.poll() is None, log[-3000:]
        assert f"model {version[:12]} fetched from {up.url} and verified" in log
        assert ModelStore(c / "models").verify(version).version == version
        with httpx.Client(base_url=up.url, timeout=30) as client:
            answer = client.post(
                "/v1/embeddings", headers=TENANT, json={"model": "minilm", "input": TEXTS}
            )
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-model-version"] == version
        first = np.array([row["embedding"] for row in answer.json()["data"]], dtype=np.float32)
        assert np.allclose(embed_directly(fetching_url, version), first, atol=1e-6)

        # A byte changed in B's copy: verify says which file, and a worker refuses it.
        tamper(b / "models" / version / "tokenizer.json", at=100)
        verify = headway(env, "models", "verify", version, "--data-dir", str(b))
        assert verify.returncode == 1
        assert "tokenizer.json has sha256" in verify.stderr
        tampered, _ = start_worker(b, env, tmp_path / "b.log")
        workers.append(tampered)
        code = tampered.wait(60)
        log = (tmp_path / "b.log").read_text()
        assert code != 0, log[-3000:]
        assert f"model version {version[:12]} refused" in log
        assert "tokenizer.json has sha256" in log
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGKILL)
                worker.wait(30)
        up.stop(signal.SIGTERM)
