"""Each component's Postgres role (``headway db roles``) can do what its code does and is
refused by the database everywhere else: the owner migrates and makes the roles on a
throw-away Postgres, then each component's real code path runs as its own role."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import psycopg
import pytest
from typer.testing import CliRunner

from headway.app.process import wait_for_stores
from headway.batches.model import Batch, FileObject, LineResult
from headway.batches.open import postgres_batch_store
from headway.billing.ledger.base import UsageQuery
from headway.billing.ledger.postgres import PostgresLedger
from headway.cli import app
from headway.db_setup import apply_roles, component_url, migrate_all
from headway.dependency_link import Backoff, DependencyLink
from headway.privileges import COMPONENTS, TABLES, Component, all_statements, role_name
from headway.quality.references import Reference, postgres_reference_store
from headway.registry.model import ModelRecord
from headway.registry.postgres import PostgresRegistry
from headway.settings import Settings
from headway.storage.schema import SchemaNotMigrated
from headway_tools.testing.postgres_server import PostgresServer
from tests.billing.conftest import usage_event

DAY0 = 1_700_006_400.0


@dataclass
class Stack:
    owner_libpq: str
    owner_asyncpg: str
    libpq: dict[Component, str]
    """Each component's URL for psycopg (the registry, the batch and quality stores)."""
    asyncpg: dict[Component, str]
    """The same for asyncpg (the ledger)."""

    def sql(self, component: Component, statement: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.libpq[component], autocommit=True) as conn:
            cursor = conn.execute(statement.encode())
            return cursor.fetchall() if cursor.description else []


def refused(call: Callable[[], object]) -> None:
    """``call`` fails because the database refused this role (not for another reason)."""
    try:
        call()
    except Exception as exc:
        error: BaseException | None = exc
        while error is not None:
            if isinstance(
                error, psycopg.errors.InsufficientPrivilege | asyncpg.InsufficientPrivilegeError
            ):
                return
            error = error.__cause__ or error.__context__
        raise AssertionError(f"refused for another reason: {exc!r}") from exc
    raise AssertionError("the database allowed it")


@pytest.fixture
def stack(
    postgres_server: PostgresServer, postgres_schema: str, libpq_url: str, postgres_url: str
) -> Iterator[Stack]:
    prefix = postgres_schema  # roles are the cluster's: one set per test
    migrate_all(libpq_url)
    passwords = {component: secrets.token_hex(8) for component in COMPONENTS}
    roles = apply_roles(libpq_url, prefix, passwords)
    try:
        yield Stack(
            libpq_url,
            postgres_url,
            {c: component_url(libpq_url, role, passwords[c]) for c, role in roles.items()},
            {c: component_url(postgres_url, role, passwords[c]) for c, role in roles.items()},
        )
    finally:
        names = ", ".join(roles.values())
        postgres_server.psql(f"DROP OWNED BY {names}; DROP ROLE {names}")


def ledger_call(url: str, work: Callable[[PostgresLedger], Any]) -> Any:
    async def go() -> Any:
        ledger = await PostgresLedger.open(url)
        try:
            return await work(ledger)
        finally:
            await ledger.close()

    return asyncio.run(go())


def a_file(file_id: str, tenant_id: int, purpose: str = "batch") -> FileObject:
    return FileObject(
        file_id, tenant_id, "acme", purpose, "in.jsonl", 10, "a" * 64, 100, None, lines=1
    )


def a_batch(batch_id: str, tenant_id: int) -> Batch:
    return Batch(
        batch_id,
        tenant_id,
        "acme",
        "0123456789abcdef",
        "/v1/embeddings",
        "file-in",
        "24h",
        "validating",
        100,
        100 + 86400,
    )


MODEL = ModelRecord("v" * 64, "mini", "embedding", 4, "fp32")


def test_every_table_a_migration_makes_is_in_the_grant_table(stack: Stack) -> None:
    """A new table no role was granted (or revoked) on would fail closed for the
    components, or be forgotten by the revocation: list it in privileges.py."""
    with psycopg.connect(stack.owner_libpq, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    assert {name for (name,) in rows} == set(TABLES)


def test_the_gateway_runs_its_admin_writes_but_mints_no_admin_key(stack: Stack) -> None:
    registry = PostgresRegistry(stack.libpq["gateway"])
    try:
        registry.add_tenant("acme", "interactive")
        registry.rotate_key("acme", overlap_s=0)
        registry.add_model(MODEL, ("mini",))
        assert registry.resolve_model("mini") == registry.resolve_model(MODEL.version)
        refused(registry.add_admin_key)
    finally:
        registry.close()
    refused(
        lambda: stack.sql(
            "gateway",
            "INSERT INTO api_keys (key_digest, key_id, tenant_id, role, created_at)"
            " VALUES ('\\x00', 'forged', NULL, 'admin', 0)",
        )
    )
    live = "WHERE revoked_at IS NULL"
    promote = f"UPDATE api_keys SET role = 'admin', tenant_id = NULL {live}"
    refused(lambda: stack.sql("gateway", promote))
    # Admin keys stay readable (it authenticates them) and revocable (its admin API), but
    # a revoked one cannot be brought back.
    owner = PostgresRegistry(stack.owner_libpq)
    try:
        first, _ = owner.add_admin_key()
        owner.add_admin_key()
    finally:
        owner.close()
    assert stack.sql("gateway", "SELECT count(*) FROM api_keys WHERE role = 'admin'") == [(2,)]
    registry = PostgresRegistry(stack.libpq["gateway"])
    try:
        assert registry.revoke_key(first.key_id).revoked_at is not None
    finally:
        registry.close()
    revoked = f"SELECT revoked_at IS NOT NULL FROM api_keys WHERE key_id = '{first.key_id}'"
    assert stack.sql("gateway", revoked) == [(True,)]
    refused(
        lambda: stack.sql(
            "gateway", f"UPDATE api_keys SET revoked_at = NULL WHERE key_id = '{first.key_id}'"
        )
    )


def test_the_gateway_reads_the_ledger_and_cannot_write_it(stack: Stack) -> None:
    query = UsageQuery(DAY0, DAY0 + 3600, "hour", None)
    assert ledger_call(stack.asyncpg["gateway"], lambda ledger: ledger.usage(query)) == []
    event = usage_event("r-1", DAY0 + 10)
    refused(lambda: ledger_call(stack.asyncpg["gateway"], lambda ledger: ledger.apply([event], [])))
    refused(lambda: stack.sql("gateway", "DELETE FROM processed_requests"))


def test_the_gateway_keeps_batches_and_quality_references(stack: Stack) -> None:
    store = postgres_batch_store(stack.libpq["gateway"])
    try:
        assert store.add_file(a_file("file-in", 1)) is None
        assert store.add_batch(a_batch("batch-1", 1)) is None
        assert store.delete_tenant(1) == ["a" * 64]  # the blobs left to delete
    finally:
        store.close()
    references = postgres_reference_store(stack.libpq["gateway"])
    try:
        sample = np.ones((2, 4), dtype=np.float32)
        kept = references.save_if_absent(Reference(MODEL.version, "embedding", time.time(), sample))
        assert kept.version == MODEL.version
    finally:
        references.close()


def test_billing_writes_the_ledger_and_reads_only_customers_of_the_registry(stack: Stack) -> None:
    events = [usage_event("r-1", DAY0 + 10), usage_event("r-2", DAY0 + 20)]
    applied = ledger_call(stack.asyncpg["billing"], lambda ledger: ledger.apply(events, []))
    assert applied.new == 2
    # Its exporter plans each closed hour and marks it sent.
    planned = ledger_call(stack.asyncpg["billing"], lambda ledger: ledger.plan_exports(DAY0 + 7200))
    assert planned
    ledger_call(stack.asyncpg["billing"], lambda ledger: ledger.mark_sent(planned[0].key, DAY0))
    # Of the registry it reads the export's customers alone.
    registry = PostgresRegistry(stack.libpq["billing"])
    try:
        assert registry.billing_customers() == {}
        refused(registry.tenants)
    finally:
        registry.close()
    refused(
        lambda: stack.sql(
            "billing",
            "INSERT INTO tenants (name, tier, rate_texts_per_s, burst_texts, created_at)"
            " VALUES ('x', 'batch', 1, 1, 0)",
        )
    )
    refused(lambda: stack.sql("billing", "SELECT * FROM api_keys"))
    refused(lambda: postgres_batch_store(stack.libpq["billing"]))


def test_the_executor_records_lines_and_touches_no_key_nor_the_ledger(stack: Stack) -> None:
    owner = PostgresRegistry(stack.owner_libpq)
    owner_store = postgres_batch_store(stack.owner_libpq)
    try:
        tenant, _ = owner.add_tenant("acme", "batch")
        owner_store.add_file(a_file("file-in", tenant.id))
        owner_store.add_batch(a_batch("batch-1", tenant.id))
    finally:
        owner.close()
        owner_store.close()
    store = postgres_batch_store(stack.libpq["executor"])
    registry = PostgresRegistry(stack.libpq["executor"])
    try:
        assert registry.tenant_by_id(tenant.id).name == "acme"
        moved = store.move("batch-1", ("validating",), "in_progress", 200, total=1)
        assert moved is not None and moved.status == "in_progress"
        assert store.record_many("batch-1", [LineResult(0, True, b'{"line": 0}')]) == 1
        assert store.add_file(a_file("file-out", tenant.id, "batch_output")) is None
        refused(lambda: registry.add_tenant("mallory", "batch"))
    finally:
        store.close()
        registry.close()
    refused(lambda: stack.sql("executor", "SELECT * FROM api_keys"))
    refused(lambda: stack.sql("executor", "DELETE FROM batches"))
    refused(
        lambda: ledger_call(
            stack.asyncpg["executor"], lambda ledger: ledger.apply([usage_event("r-9")], [])
        )
    )


def test_the_worker_reads_its_models_and_nothing_else(stack: Stack) -> None:
    owner = PostgresRegistry(stack.owner_libpq)
    try:
        owner.add_model(MODEL, ("mini",))
        owner.add_tenant("acme", "interactive")
    finally:
        owner.close()
    registry = PostgresRegistry(stack.libpq["worker"])
    try:
        resolved = registry.resolve_model("mini")
        assert resolved is not None and resolved.version == MODEL.version
        # What its model source reads (worker/sources.py): models, never keys.
        assert registry.model_snapshot().resolve_model("mini") == resolved
        refused(registry.snapshot)
        refused(lambda: registry.add_model(replace_version(MODEL), ("mini",)))
    finally:
        registry.close()
    for statement in (
        "SELECT * FROM api_keys",
        "SELECT * FROM tenants",
        "SELECT * FROM hourly_usage",
        "SELECT * FROM batch_files",
        "DELETE FROM models",
        "CREATE TABLE mine (x int)",
    ):
        refused(lambda statement=statement: stack.sql("worker", statement))  # type: ignore[misc]


def replace_version(record: ModelRecord) -> ModelRecord:
    return ModelRecord("w" * 64, record.name, record.kind, record.dimensions, record.quantization)


def test_a_role_opening_an_unmigrated_database_names_the_owners_command(
    postgres_server: PostgresServer, postgres_schema: str, libpq_url: str
) -> None:
    """Roles made, then a migration missing (a newer release not yet migrated): the
    gateway does not try DDL it may not run; it says who must."""
    migrate_all(libpq_url)
    roles = apply_roles(libpq_url, postgres_schema)
    try:
        with psycopg.connect(libpq_url, autocommit=True) as conn:
            conn.execute("DELETE FROM registry_migrations WHERE version = 8")
        with pytest.raises(SchemaNotMigrated, match="headway db migrate"):
            PostgresRegistry(component_url(libpq_url, roles["gateway"]))
    finally:
        names = ", ".join(roles.values())
        postgres_server.psql(f"DROP OWNED BY {names}; DROP ROLE {names}")


def test_the_roles_sql_is_idempotent_and_names_every_component() -> None:
    statements = all_statements("headway")
    for component in COMPONENTS:
        assert any(f"CREATE ROLE headway_{component} LOGIN" in s for s in statements)
    assert all_statements("headway") == statements


def test_headway_db_roles_sets_the_passwords_it_is_given(
    postgres_server: PostgresServer, postgres_schema: str, libpq_url: str, tmp_path: Path
) -> None:
    """The command the manifests' init Job runs: migrate, make the roles, set each
    password from its mounted file; the gateway then logs in with its own."""
    (tmp_path / "gateway").write_text("s3cret-gw\n", encoding="utf-8")
    runner = CliRunner()
    try:
        done = runner.invoke(
            app,
            [
                "db",
                "roles",
                "--postgres-url",
                libpq_url,
                "--prefix",
                postgres_schema,
                "--passwords-dir",
                str(tmp_path),
            ],
        )
        assert done.exit_code == 0, done.output
        assert f"gateway: {postgres_schema}_gateway (password set)" in done.output
        assert f"billing: {postgres_schema}_billing (password unchanged)" in done.output
        gateway_url = component_url(libpq_url, f"{postgres_schema}_gateway", "s3cret-gw")
        PostgresRegistry(gateway_url).close()
        printed = runner.invoke(app, ["db", "roles", "--sql", "--prefix", postgres_schema])
        assert printed.exit_code == 0 and "CREATE POLICY" in printed.output
    finally:
        names = ", ".join(f"{postgres_schema}_{c}" for c in COMPONENTS)
        postgres_server.psql(f"DROP OWNED BY {names}; DROP ROLE IF EXISTS {names}")


def test_headway_db_migrate_as_a_component_is_refused_with_the_reason(stack: Stack) -> None:
    """A component's URL given to the owner's command: a clear refusal, exit 1."""
    runner = CliRunner()
    migrated = runner.invoke(app, ["db", "migrate", "--postgres-url", stack.owner_libpq])
    assert migrated.exit_code == 0 and "migrated" in migrated.output
    with psycopg.connect(stack.owner_libpq, autocommit=True) as conn:
        conn.execute("DELETE FROM batch_migrations WHERE version = 3")  # a release behind
    done = runner.invoke(app, ["db", "migrate", "--postgres-url", stack.libpq["executor"]])
    assert done.exit_code == 1
    assert "lacks schema versions [3]" in done.output and "owner" in done.output


def test_a_gateway_started_before_its_role_exists_waits_then_opens_its_stores(
    postgres_server: PostgresServer, postgres_schema: str, libpq_url: str, tmp_path: Path
) -> None:
    """Compose's components and the dev overlay's pods may start before ``headway db
    roles`` has made their role: the gateway's stores wait (refused connections are the
    database away) instead of the process exiting, and open as the role once it exists."""
    prefix = postgres_schema
    passwords = {component: secrets.token_hex(8) for component in COMPONENTS}
    url = component_url(libpq_url, role_name(prefix, "gateway"), passwords["gateway"])
    settings = Settings(postgres_url=url, data_dir=tmp_path)
    waits: list[float] = []

    async def roles_made_during_the_first_wait(delay_s: float) -> None:
        if not waits:  # as the owner: `headway db roles`
            await asyncio.to_thread(migrate_all, libpq_url)
            await asyncio.to_thread(apply_roles, libpq_url, prefix, passwords)
        waits.append(delay_s)

    link = DependencyLink(
        "gateway database", sleep=roles_made_during_the_first_wait, backoff=Backoff(0.01, 0.01)
    )
    try:
        stores = wait_for_stores(settings, link)
        try:
            assert len(waits) == 1 and link.up is True and link.changes == 2  # down, then up
            assert stores.registry.tenants() == []  # read as the gateway's own role
            assert stores.batches.batches(1) == []
        finally:
            stores.registry.close()
            stores.batches.close()
            stores.quality.close()
    finally:
        names = ", ".join(role_name(prefix, c) for c in COMPONENTS)
        postgres_server.psql(f"DROP OWNED BY {names}; DROP ROLE IF EXISTS {names}")
