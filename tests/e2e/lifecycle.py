"""What the model-lifecycle proofs share: a stack on a throw-away Postgres registry,
synthetic versions that differ in their outputs or their failures, and the admin API."""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from headway.catalog import synthetic_record
from headway.registry.open import open_registry
from headway.registry.sqlite import DEMO_ADMIN_KEY
from headway.settings import Settings, SyntheticSettings
from headway.up.supervisor import Supervisor
from headway.worker.backends.synthetic import SyntheticBackend
from headway_tools.bench.served import bench_settings, supervised
from headway_tools.testing.postgres_server import PostgresServer

ADMIN = {"authorization": f"Bearer {DEMO_ADMIN_KEY}"}
TENANT = {"authorization": "Bearer demo-key-search-app"}
CHEAP = {"call_ms": 2.0, "text_ms": 0.1}


def fresh_database(server: PostgresServer) -> str:
    name = f"t_{secrets.token_hex(6)}"
    server.psql(f"CREATE DATABASE {name}")
    return server.url_of(name)


def synthetic_version(**options: Any) -> str:
    return synthetic_record(SyntheticSettings(**(CHEAP | options))).version


def synthetic_rows(texts: list[str], seed: int = 0) -> np.ndarray:
    """What a synthetic version with ``seed`` answers for ``texts`` (its own output)."""
    backend = SyntheticBackend(call_ms=0, text_ms=0, seed=seed, sleep=lambda s: None)
    return backend.run(backend.encode_texts(texts))


def lifecycle_settings(
    data_dir: Path, postgres_url: str, gateway: Mapping[str, Any] | None = None, **up: Any
) -> Settings:
    settings = bench_settings(
        data_dir,
        {"backend": "synthetic", "synthetic": CHEAP, "registry_poll_s": 0.2},
        {"registry_poll_s": 0.2, "rollout_tick_s": 0.2, **(gateway or {})},
        **up,
    )
    return settings.model_copy(update={"postgres_url": postgres_url})


@dataclass
class Stack:
    supervisor: Supervisor
    url: str

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def metrics(self) -> str:
        """The first gateway's /metrics, from its operations listener."""
        url = self.supervisor.gateways[0].metrics_url + "/metrics"
        return httpx.get(url, timeout=30).text


@contextmanager
def lifecycle_stack(
    settings: Settings, worker_env: Mapping[str, Mapping[str, str]] | None = None
) -> Iterator[Stack]:
    """Seeded with the demo tenants, every process reading the Postgres registry."""
    with closing(open_registry(settings)) as registry:
        registry.seed_demo()
    with supervised(settings, worker_env) as supervisor:
        yield Stack(supervisor, supervisor.gateways[0].url)
