"""A cross-encoder imported with the CLI serves /v1/rerank through real processes; without
one, no rerank worker runs until one is imported."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from headway.registry.sqlite import Registry
from tests.builders import TINY_MAX_POSITIONS, build_tiny_transformer
from tests.e2e.conftest import Up, children_of, start_up, wait_for
from tests.e2e.test_up import HEADWAY, SUPPORT_BOT

pytestmark = pytest.mark.e2e

QUERY = "how do batching and admission control keep latency predictable?"
DOCUMENTS = [
    "Admission control refuses work that cannot finish before its deadline.",
    "Dynamic batching groups requests to amortise the cost of each model call.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "Paris is the capital of France.",
    "Latency stays flat when the queue is bounded and overload is shed early.",
]


def test_rerank_uses_the_cross_encoder_when_one_is_imported(model_data_dir, tmp_path):
    from sentence_transformers import CrossEncoder

    data_dir = tmp_path / "data"
    shutil.copytree(model_data_dir, data_dir)
    checkpoint, version = import_cross_encoder(tmp_path, data_dir)
    reference = CrossEncoder(str(checkpoint), device="cpu", max_length=TINY_MAX_POSITIONS)
    expected = reference.predict([(QUERY, d) for d in DOCUMENTS], activation_fn=_sigmoid())

    up = start_up(data_dir, "--embed-replicas", "1", "--rerank-replicas", "1")
    try:
        with up.client() as client:
            response = client.post(
                "/v1/rerank", headers=SUPPORT_BOT, json={"query": QUERY, "documents": DOCUMENTS}
            )
            assert response.status_code == 200, response.text
            assert response.headers["x-model-version"] == version
            results = response.json()["results"]
            assert [r["index"] for r in results] == list(np.argsort(-expected, kind="stable"))
            served = np.asarray([r["relevance_score"] for r in results])
            np.testing.assert_allclose(served, np.sort(expected)[::-1], atol=1e-4)
    finally:
        assert up.stop(signal.SIGTERM) == 0


def test_without_a_cross_encoder_no_rerank_worker_runs_until_one_is_imported(
    model_data_dir, tmp_path
):
    data_dir = tmp_path / "data"
    shutil.copytree(model_data_dir, data_dir)
    minilm = Registry(data_dir / "registry.sqlite3").resolve_model("all-MiniLM-L6-v2")
    assert minilm is not None
    up = start_up(data_dir, "--embed-replicas", "1", "--rerank-replicas", "1")
    try:
        assert any("started by a first cross-encoder request" in line for line in up.lines)
        with up.client() as client:
            body = {"query": QUERY, "documents": DOCUMENTS}
            cosine = client.post("/v1/rerank", headers=SUPPORT_BOT, json=body)
            assert cosine.status_code == 200, cosine.text
            assert cosine.headers["x-model-version"] == minilm.version  # on the embed pool
            assert client.get("/readyz").json()["pools"]["rerank"]["ready"] == 0
            assert rerank_workers(up) == []

            _, version = import_cross_encoder(tmp_path, data_dir)
            # Once the gateway has read the alias (within its registry poll), a rerank
            # request wakes the pool, waits for its worker (within its deadline) and is
            # served by the cross-encoder; before, the embed pool serves it.
            waking = {**SUPPORT_BOT, "x-timeout-ms": "60000"}

            def by_the_cross_encoder() -> bool:
                ranked = client.post("/v1/rerank", headers=waking, json=body)
                assert ranked.status_code == 200, ranked.text
                return ranked.headers["x-model-version"] == version

            wait_for(by_the_cross_encoder, 120, "rerank by the imported cross-encoder", 0.2)
            assert len(rerank_workers(up)) == 1
    finally:
        assert up.stop(signal.SIGTERM) == 0


def import_cross_encoder(tmp_path: Path, data_dir: Path) -> tuple[Path, str]:
    """A tiny BERT cross-encoder, imported with the CLI under the ``rerank`` alias: its
    checkpoint and its version."""
    checkpoint = build_tiny_transformer(tmp_path / "tiny-ce", "bert", cross_encoder=True)
    command = ["models", "import", "--cross-encoder", str(checkpoint), "--alias", "rerank"]
    imported = subprocess.run(
        [*HEADWAY, *command, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    return checkpoint, imported.stdout.split()[0]


def rerank_workers(up: Up) -> list[int]:
    """The processes of ``up`` serving the rerank pool."""
    found = []
    for pid in children_of(up.process.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--pool" in argv and argv[argv.index(b"--pool") + 1 :][:1] == [b"rerank"]:
            found.append(pid)
    return found


def _sigmoid():
    import torch

    return torch.nn.Sigmoid()
