"""``headway up`` in shared mode makes one Postgres role per component and starts each
process as its own: the gateway, the billing consumer, the batch executor and the worker
each connect as ``<prefix>_<component>``, and the work still flows (a request served,
then billed in the ledger by the billing role)."""

from __future__ import annotations

import signal
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from headway.registry.open import open_registry
from headway.settings import load_settings
from headway_tools.testing.postgres_server import PostgresServer
from tests.e2e.conftest import children_of, start_up, wait_for
from tests.e2e.lifecycle import TENANT, fresh_database

pytestmark = pytest.mark.e2e

PREFIX = "upe2e"


def test_each_process_of_up_connects_as_its_own_role(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    owner_url = fresh_database(postgres_server)
    database = owner_url.rsplit("/", 1)[1]
    settings = load_settings(flags={"data_dir": str(tmp_path), "postgres_url": owner_url})
    with closing(open_registry(settings)) as registry:
        registry.seed_demo()
    env = {"HEADWAY_POSTGRES_ROLES__PREFIX": PREFIX}
    up = start_up(
        tmp_path,
        "--backend",
        "synthetic",
        "--rerank-replicas",
        "0",
        "--postgres-url",
        owner_url,
        env=env,
    )
    try:
        served = httpx.post(
            up.url + "/v1/embeddings",
            json={"model": "synthetic", "input": ["a", "b"]},
            headers=TENANT,
            timeout=30,
        )
        assert served.status_code == 200, served.text

        seen: set[str] = set()

        def every_role_seen() -> bool:
            """Connections come and go (a worker's registry read at start): every role
            seen connected at some poll."""
            rows = postgres_server.psql(
                f"SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = '{database}'"
            )
            seen.update(row for row in rows.split() if row)
            return wanted_roles() <= seen

        try:
            wait_for(every_role_seen, 60, "every component connected as its own role")
        except AssertionError as exc:
            raise AssertionError(f"seen {sorted(seen)}:\n" + "".join(up.lines[-30:])) from exc

        # The worker reads the registry once at start (a connection gone by now): its
        # environment names its own role.
        (worker,) = [
            pid
            for pid in children_of(up.process.pid)
            if b"worker" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        ]
        environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
        urls = [v for v in environ if v.startswith(b"HEADWAY_POSTGRES_URL=")]
        assert len(urls) == 1 and f"//{PREFIX}_worker:".encode() in urls[0]

        def billed() -> bool:
            count = postgres_server.psql("SELECT count(*) FROM processed_requests", database)
            return int(count) >= 1

        wait_for(billed, 60, "the request billed by the billing role")
        grants = postgres_server.psql(
            f"SELECT has_table_privilege('{PREFIX}_gateway', 'processed_requests', 'INSERT')",
            database,
        )
        assert grants.strip() == "f"
    finally:
        assert up.stop(signal.SIGTERM) == 0
        names = ", ".join(sorted(wanted_roles() | {f"{PREFIX}_worker"}))
        postgres_server.psql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        postgres_server.psql(f"DROP ROLE IF EXISTS {names}")


def wanted_roles() -> set[str]:
    """The roles of the processes that hold a connection while they run."""
    return {f"{PREFIX}_{c}" for c in ("gateway", "billing", "executor")}
