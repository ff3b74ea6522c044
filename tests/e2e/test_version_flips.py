"""A request is served by the version it was admitted with, even while its alias flips.

Two synthetic versions that differ only in their outputs (seed 0 and seed 1), one
replica each, behind one gateway on a throw-away Postgres registry. While requests of
128 texts (8 chunks each) run, the alias's split flips between the two versions every
100 ms through the admin API; every answer's vectors must all be the output of the one
version its ``X-Model-Version`` names, checked against each version's own output.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import pytest

from headway_tools.testing.postgres_server import PostgresServer
from tests.e2e.lifecycle import (
    ADMIN,
    TENANT,
    fresh_database,
    lifecycle_settings,
    lifecycle_stack,
    synthetic_rows,
    synthetic_version,
)

pytestmark = pytest.mark.e2e

TEXTS = [f"text number {i} of a long request" for i in range(128)]
FLIP_S = 0.1


@pytest.fixture(scope="module")
def postgres() -> PostgresServer:
    with PostgresServer(fsync=False) as server:
        yield server


async def flip_and_load(
    url: str, versions: tuple[str, str], seconds: float
) -> list[tuple[str, list]]:
    answers: list[tuple[str, list]] = []
    stop_at = time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def flip() -> int:
            flips, next_at = 0, time.monotonic()
            while time.monotonic() < stop_at:
                body = {"weights": {versions[flips % 2]: 1}}
                reply = await client.put("/admin/splits/synthetic", json=body, headers=ADMIN)
                assert reply.status_code == 200, reply.text
                flips += 1
                next_at += FLIP_S  # a flip every 100 ms, however long the write took
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            return flips

        async def load() -> None:
            while time.monotonic() < stop_at:
                reply = await client.post(
                    "/v1/embeddings", json={"model": "synthetic", "input": TEXTS}, headers=TENANT
                )
                assert reply.status_code == 200, reply.text
                rows = [item["embedding"] for item in reply.json()["data"]]
                answers.append((reply.headers["x-model-version"], rows))

        flips, *_ = await asyncio.gather(flip(), *(load() for _ in range(4)))
    assert flips >= seconds / FLIP_S / 2
    return answers


def test_every_answer_comes_from_the_one_version_it_names(tmp_path, postgres):
    # Admission would shed some of the 4 x 128 texts outstanding: not what is tested here.
    settings = lifecycle_settings(
        tmp_path, fresh_database(postgres), {"admission": {"enabled": False}}, embed_replicas=2
    )
    seeded = {"HEADWAY_WORKER__SYNTHETIC__SEED": "1"}
    versions = (synthetic_version(), synthetic_version(seed=1))
    with lifecycle_stack(settings, {"embed-worker-1": seeded}) as stack:
        with stack.client() as client:
            replicas = client.get("/admin/replicas", headers=ADMIN).json()["pools"]["embed"]
        assert {v for r in replicas for v in r["versions"]} == set(versions)
        answers = asyncio.run(flip_and_load(stack.url, versions, seconds=4.0))
    expected = {versions[0]: synthetic_rows(TEXTS, 0), versions[1]: synthetic_rows(TEXTS, 1)}
    assert not np.allclose(expected[versions[0]], expected[versions[1]], atol=1e-3)
    served = {version for version, _ in answers}
    assert served == set(versions), "the flips never reached the answers"
    for version, rows in answers:
        np.testing.assert_allclose(np.asarray(rows, dtype=np.float32), expected[version], atol=1e-6)
