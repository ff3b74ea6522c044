"""A cross-encoder imported with the CLI serves /v1/rerank through real processes."""

from __future__ import annotations

import shutil
import signal
import subprocess

import numpy as np
import pytest

from tests.builders import TINY_MAX_POSITIONS, build_tiny_transformer
from tests.e2e.conftest import start_up
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
    checkpoint = build_tiny_transformer(tmp_path / "tiny-ce", "bert", cross_encoder=True)
    command = ["models", "import", "--cross-encoder", str(checkpoint), "--alias", "rerank"]
    imported = subprocess.run(
        [*HEADWAY, *command, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    version = imported.stdout.split()[0]
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


def _sigmoid():
    import torch

    return torch.nn.Sigmoid()
