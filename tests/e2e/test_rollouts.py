"""Rollouts that decide by themselves, on real processes and a throw-away Postgres registry.

- A candidate no one sends traffic to halts (it is never passed on no data).
- A candidate that fails 20% of its calls (the synthetic backend's ``fail_share``) is
  rolled back by itself, within two analysis intervals of its first watched step.
- The int8 variant of the real model passes its shadow step on agreement with fp32
  and reaches 100%: the alias then serves it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from headway.catalog import ensure_default_model, register
from headway.models.importer import quantize_int8
from headway.models.store import ModelStore
from headway.registry.open import open_registry
from headway.settings import Settings
from headway_tools.testing.postgres_server import PostgresServer
from tests.e2e.conftest import wait_for
from tests.e2e.lifecycle import (
    ADMIN,
    TENANT,
    fresh_database,
    lifecycle_settings,
    lifecycle_stack,
    synthetic_version,
)

pytestmark = pytest.mark.e2e

INTERVAL_S = 2.0


@pytest.fixture(scope="module")
def postgres() -> PostgresServer:
    with PostgresServer(fsync=False) as server:
        yield server


def rollout_cli(settings: Settings, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "headway", "rollouts", *args, "--data-dir", str(settings.data_dir)],
        capture_output=True,
        text=True,
        env=os.environ | {"HEADWAY_POSTGRES_URL": settings.postgres_url or ""},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def rollout_state(client: httpx.Client, rollout_id: int) -> dict:
    reply = client.get(f"/admin/rollouts/{rollout_id}", headers=ADMIN)
    assert reply.status_code == 200, reply.text
    return reply.json()


def ended(client: httpx.Client, rollout_id: int, states: set[str]) -> dict | None:
    rollout = rollout_state(client, rollout_id)
    return rollout if rollout["state"] in states else None


async def load(url: str, model: str, stop: asyncio.Event, texts: int = 2) -> Counter[int]:
    statuses: Counter[int] = Counter()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def loop(i: int) -> None:
            n = 0
            while not stop.is_set():
                n += 1
                body = {"model": model, "input": [f"load {i} {n} {k}" for k in range(texts)]}
                reply = await client.post("/v1/embeddings", json=body, headers=TENANT)
                statuses[reply.status_code] += 1

        await asyncio.gather(*(loop(i) for i in range(4)))
    return statuses


def under_load(url: str, model: str, until) -> tuple[Counter[int], object]:
    """Run ``until()`` (in a thread) while load runs; its value and the statuses seen."""

    async def run() -> tuple[Counter[int], object]:
        stop = asyncio.Event()
        traffic = asyncio.create_task(load(url, model, stop))
        try:
            value = await asyncio.to_thread(until)
        finally:
            stop.set()
        return await traffic, value

    return asyncio.run(run())


def test_no_traffic_halts_and_a_failing_canary_rolls_back(tmp_path, postgres):
    settings = lifecycle_settings(tmp_path, fresh_database(postgres), embed_replicas=2)
    failing = {"HEADWAY_WORKER__SYNTHETIC__FAIL_SHARE": "0.2"}
    candidate = synthetic_version(fail_share=0.2)
    with lifecycle_stack(settings, {"embed-worker-1": failing}) as stack, stack.client() as client:
        plan = {"steps": [10, 50, 100], "interval_s": INTERVAL_S, "min_requests": 10}
        body = {"alias": "synthetic", "to": candidate, **plan}
        started = client.post("/admin/rollouts", json=body, headers=ADMIN)
        assert started.status_code == 201, started.text
        idle = started.json()["id"]
        halted = wait_for(lambda: ended(client, idle, {"halted"}), 6 * INTERVAL_S, "a halt")
        assert "fewer than" in halted["reason"], halted
        assert client.post(f"/admin/rollouts/{idle}/abort", headers=ADMIN).status_code == 200

        out = rollout_cli(
            settings,
            "start",
            "synthetic",
            "--to",
            candidate,
            "--steps",
            "10,50,100",
            "--interval",
            str(INTERVAL_S),
            "--min-requests",
            "10",
        )
        bad = int(out.splitlines()[1].split()[0])  # the table's first row, its id
        begun = time.monotonic()
        statuses, rolled_back = under_load(
            stack.url,
            "synthetic",
            lambda: wait_for(
                lambda: ended(client, bad, {"rolled_back", "succeeded", "halted"}),
                8 * INTERVAL_S,
                "the failing canary to be judged",
            ),
        )
        took_s = time.monotonic() - begun
        assert rolled_back["state"] == "rolled_back", rolled_back
        assert "failed" in rolled_back["reason"] and "of its requests" in rolled_back["reason"]
        assert took_s <= 2 * INTERVAL_S + 3.0  # watched at once: one interval and ticks
        split = client.get("/admin/splits/synthetic", headers=ADMIN)
        weights = split.json()["weights"] if split.status_code == 200 else {}
        assert candidate not in weights
        total = sum(statuses.values())
        # Only the canary's share (10%) can fail, and of that only a fifth: well under 10%.
        assert statuses[200] >= 0.9 * total, statuses
        assert set(statuses) <= {200, 502}, statuses

        audit = client.get(
            "/admin/audit", params={"target": f"rollout:{bad}"}, headers=ADMIN
        ).json()["data"]
        actions = [entry["action"] for entry in reversed(audit)]
        assert actions[0] == "rollout.start" and actions[-1] == "rollout.rollback", actions


@pytest.fixture
def int8_settings(tmp_path: Path, model_data_dir: Path, postgres) -> Settings:
    """The session's model store (fp32 imported once), a fresh Postgres registry holding
    fp32 (the alias) and its int8 variant."""
    (tmp_path / "models").symlink_to(model_data_dir / "models")
    settings = lifecycle_settings(tmp_path, fresh_database(postgres), embed_replicas=1)
    onnx = settings.model_copy(
        update={"worker": settings.worker.model_copy(update={"backend": "onnx"})}
    )
    with closing(open_registry(onnx)) as registry:
        fp32 = ensure_default_model(onnx, registry)
        store = ModelStore(onnx.model_root)
        register(registry, quantize_int8(store, store.get(fp32.version)), ())
    return onnx


def test_the_int8_model_passes_shadow_agreement_and_reaches_100_percent(int8_settings):
    with closing(open_registry(int8_settings)) as registry:
        int8 = next(r for r, _ in registry.models() if r.quantization == "int8")
    with lifecycle_stack(int8_settings) as stack, stack.client() as client:
        body = {
            "alias": "all-MiniLM-L6-v2",
            "to": int8.version,
            "steps": ["shadow", 50, 100],
            "interval_s": 3.0,
            "min_requests": 10,
            "min_agreement": 0.97,
        }
        started = client.post("/admin/rollouts", json=body, headers=ADMIN)
        assert started.status_code == 201, started.text
        rollout_id = started.json()["id"]
        statuses, done = under_load(
            stack.url,
            "all-MiniLM-L6-v2",
            lambda: wait_for(
                lambda: ended(client, rollout_id, {"succeeded", "rolled_back", "halted"}),
                90,
                "the int8 rollout to finish",
            ),
        )
        assert done["state"] == "succeeded", done
        assert set(statuses) == {200}, statuses
        aliases = client.get("/admin/aliases", headers=ADMIN).json()["data"]
        assert {a["alias"]: a["version"] for a in aliases}["all-MiniLM-L6-v2"] == int8.version
        reply = client.post(
            "/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": "hi"}, headers=TENANT
        )
        assert reply.headers["x-model-version"] == int8.version
        metrics = stack.metrics()
        assert "headway_shadow_agreement_count" in metrics
