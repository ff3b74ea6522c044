"""A tenant is its id, through the gateway app: a tenant created with a deleted tenant's
name, at once, starts with no usage, files, batches, queued lines, cache entries or quota
spent, and a deletion that fails part-way is finished later, the new tenant untouched;
rows from before ids go to their tenant, never to a later tenant of the name."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from headway.batches.inputs import Inputs
from headway.batches.model import FileObject
from headway.batches.mover import Mover
from headway.batches.open import sqlite_batch_store
from headway.batches.sqlite_queue import SqliteWorkQueue
from headway.billing.consumer import Consumer
from headway.billing.ledger.memory import MemoryLedger
from headway.billing.sources.base import Delivery, MemorySource
from headway.cache.memory import MemoryCache
from headway.cache.metrics import CacheMetrics
from headway.cache.results import ResultsCache
from headway.cache.scopes import tenant_scope
from headway.control.tenants import TenantData
from headway.metering.event import encode
from headway.metering.sink import MemorySink
from headway.registry.errors import RegistryUnavailable
from headway.registry.model import SYSTEM
from headway.settings import CacheSettings
from tests.fakes import until
from tests.registry.conftest import sqlite_sql
from tests.service.batch_helpers import BATCHES, create, embed_line, jsonl, running, upload
from tests.service.conftest import TEST_LIMITS, Stack, auth, make_stack

ADMIN = auth("demo-admin-key")
SEARCH_APP = auth("demo-key-search-app")


async def new_tenant(client: httpx.AsyncClient, name: str) -> dict[str, str]:
    """Its key's headers."""
    created = await client.post("/admin/tenants", headers=ADMIN, json={"name": name})
    assert created.status_code == 201, created.text
    return auth(created.json()["key"])


async def embed(client: httpx.AsyncClient, key: dict[str, str], text: str) -> int:
    response = await client.post(
        "/v1/embeddings", headers=key, json={"model": "synthetic", "input": [text]}
    )
    return response.status_code


async def bill(sink: MemorySink, ledger: MemoryLedger) -> None:
    """What the billing consumer does with the gateway's events (encoded, decoded, once)."""
    deliveries = [Delivery(encode(e), f"test #{i}", None, i) for i, e in enumerate(sink.events)]
    sink.events.clear()
    await Consumer(MemorySource(deliveries), ledger).step()


def today() -> dict[str, str]:
    now = dt.datetime.now(dt.UTC)
    return {"start": (now - dt.timedelta(days=1)).date().isoformat(), "group_by": "day"}


async def usage(client: httpx.AsyncClient, key: dict[str, str], **params: str) -> list[Any]:
    path = "/admin/usage" if key is ADMIN else "/v1/usage"
    response = await client.get(path, headers=key, params=today() | params)
    assert response.status_code == 200, response.text
    return [(r["tenant_id"], r["tenant"], r["requests"]) for r in response.json()["data"]]


async def test_a_tenant_created_with_a_deleted_ones_name_sees_none_of_its_usage(tmp_path):
    sink, ledger = MemorySink(), MemoryLedger()
    stack = await make_stack(tmp_path, metering=sink, ledger=ledger)
    client = stack.client
    try:
        first_key = await new_tenant(client, "acme")
        old_id = stack.registry.tenant("acme").id
        assert await embed(client, first_key, "the first acme's text") == 200
        assert await embed(client, first_key, "and another") == 200
        await bill(sink, ledger)
        assert await usage(client, first_key) == [(old_id, "acme", 2)]

        deleted = await client.delete("/admin/tenants/acme", headers=ADMIN)
        assert deleted.status_code == 200 and deleted.json()["data_deleted"] is True
        second_key = await new_tenant(client, "acme")
        new_id = stack.registry.tenant("acme").id
        assert new_id > old_id
        assert await usage(client, second_key) == []
        assert await usage(client, ADMIN, tenant="acme") == []  # the acme there is now
        assert await usage(client, ADMIN, tenant_id=str(old_id)) == [(old_id, "acme", 2)]

        assert await embed(client, second_key, "the second acme's text") == 200
        [event] = sink.events
        assert (event.tenant_id, event.tenant) == (new_id, "acme")
        await bill(sink, ledger)
        assert await usage(client, second_key) == [(new_id, "acme", 1)]
        assert await usage(client, ADMIN, tenant="acme") == [(new_id, "acme", 1)]
        refused = await client.get("/v1/usage", headers=first_key, params=today())
        assert refused.status_code == 401  # the first acme's key died with it
    finally:
        await stack.close()


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"tenant": "nobody"}, "no tenant is named 'nobody' now"),
        ({"tenant": "acme", "tenant_id": "1"}, "not both"),
        ({"tenant_id": "²"}, "is not a whole number"),
        ({"tenant_id": "-1"}, "is not a whole number"),
        ({"tenant_id": "1" * 20}, "is not a whole number"),
        ({"tenant_id": "9223372036854775808"}, "at most"),
    ],
)
async def test_the_operator_names_a_tenant_by_a_current_name_or_any_id(tmp_path, params, says):
    stack = await make_stack(tmp_path, ledger=MemoryLedger())
    try:
        response = await stack.client.get("/admin/usage", headers=ADMIN, params=today() | params)
        assert response.status_code == 422, response.text
        assert says in response.json()["error"]["message"]
    finally:
        await stack.close()


def _raise(error: Exception) -> Callable[..., Any]:
    def broken(*args: object, **kwargs: object) -> Any:
        raise error

    return broken


STEPS: dict[str, Callable[[Stack], tuple[object, str, Exception]]] = {
    # where a deletion stops: the object, its method, and what it raises
    "listing its files": lambda s: (s.batches.store, "files", OSError("disk gone")),
    "deleting its records": lambda s: (s.batches.store, "delete_tenant", OSError("disk gone")),
    "deleting its contents": lambda s: (s.batches.files, "delete", OSError("disk gone")),
    "marking it finished": lambda s: (
        s.registry,
        "finish_deletion",
        RegistryUnavailable("the registry is away"),
    ),
}


@pytest.mark.parametrize("step", STEPS)
async def test_a_deletion_that_fails_part_way_is_finished_later_and_the_name_is_free_meanwhile(
    tmp_path, monkeypatch, step
):
    stack = await make_stack(tmp_path, batches=BATCHES)
    client = stack.client
    assert stack.batches is not None
    store, files = stack.batches.store, stack.batches.files
    try:
        acme = await new_tenant(client, "acme")
        old_id = stack.registry.tenant("acme").id
        own, shared = jsonl(embed_line("a", "acme's own")), jsonl(embed_line("s", "everyone's"))
        own_file = (await upload(client, own, acme)).json()
        (await upload(client, shared, acme)).json()
        theirs = (await upload(client, shared, SEARCH_APP)).json()  # the same content
        batch = (await create(client, own_file["id"], acme)).json()
        own_digest = store.file(old_id, own_file["id"]).sha256  # type: ignore[union-attr]
        assert files.exists(own_digest)

        owner, method, error = STEPS[step](stack)
        monkeypatch.setattr(owner, method, _raise(error))
        deleted = await client.delete("/admin/tenants/acme", headers=ADMIN)
        assert deleted.status_code == 200 and deleted.json()["data_deleted"] is False
        assert await embed(client, acme, "x") == 401  # the registry's part is done
        acme_again = await new_tenant(client, "acme")  # at once: what is left is old_id's
        monkeypatch.undo()
        for path in ("/v1/files", "/v1/batches"):
            listed = await client.get(path, headers=acme_again)
            assert listed.status_code == 200 and listed.json()["data"] == [], path
        for path in (f"/v1/files/{own_file['id']}", f"/v1/batches/{batch['id']}"):
            assert (await client.get(path, headers=acme_again)).status_code == 404, path
        if step in ("listing its files", "deleting its records"):
            assert store.batch_by_id(batch["id"]) is not None  # still there, the old id's
        new_own = jsonl(embed_line("n", "the new acme's own"))
        kept = (await upload(client, new_own, acme_again)).json()

        # Another process (a gateway's tenant_deletions loop, or the CLI) finishes it.
        later = TenantData(stack.registry, store, files, stack.gateway.cache.forget_tenant)
        assert await later.finish_pending() == 1
        assert await later.finish_pending() == 0
        assert not files.exists(own_digest)
        assert store.batch_by_id(batch["id"]) is None
        content = await client.get(f"/v1/files/{theirs['id']}/content", headers=SEARCH_APP)
        assert content.content == shared  # another tenant's file of the same content stays
        mine = await client.get(f"/v1/files/{kept['id']}/content", headers=acme_again)
        assert mine.content == new_own  # the new acme's, untouched by the old one's deletion
    finally:
        await stack.close()


async def test_every_gateway_runs_the_loop_that_finishes_deletions_left_unfinished(tmp_path):
    stack = await make_stack(tmp_path)
    try:
        failures = 'headway_background_failures_total{loop="tenant_deletions"} 0.0'
        assert failures in stack.metrics()
    finally:
        await stack.close()


async def quota_tenant(stack: Stack, name: str, burst: float) -> dict[str, str]:
    """A tenant whose bucket refills too slowly to matter in a test; its key's headers."""
    _, key = stack.registry.add_tenant(
        name, "interactive", actor=SYSTEM, rate_texts_per_s=0.001, burst_texts=burst
    )
    await stack.gateway.snapshots.refresh()
    return auth(key)


async def embed_texts(client: httpx.AsyncClient, key: dict[str, str], texts: list[str]) -> int:
    response = await client.post(
        "/v1/embeddings", headers=key, json={"model": "synthetic", "input": texts}
    )
    return response.status_code


async def test_a_tenant_created_with_a_deleted_ones_name_at_once_starts_empty(
    tmp_path, monkeypatch
):
    """The first acme leaves everything behind (its deletion cannot finish yet): a file, a
    batch with a line queued, cache entries and an empty bucket. The acme created at once
    finds none of it, and the old line never runs (nor is billed) as the new acme."""
    sink = MemorySink()
    cache = ResultsCache(MemoryCache(1 << 20), None, CacheMetrics(), CacheSettings())
    stack = await make_stack(tmp_path, batches=BATCHES, cache=cache, metering=sink)
    client = stack.client
    assert stack.batches is not None
    store, files = stack.batches.store, stack.batches.files
    try:
        first = await quota_tenant(stack, "acme", burst=4)
        old_id = stack.registry.tenant("acme").id
        old_file = (await upload(client, jsonl(embed_line("a", "queued")), first)).json()
        old_batch = (await create(client, old_file["id"], first)).json()
        queue = SqliteWorkQueue(tmp_path / "queue.sqlite3", lease_s=5)
        inputs = Inputs(store, files, TEST_LIMITS, BATCHES.max_inputs)
        await Mover(store, queue, files, inputs, 3600, time.time).tick()
        assert await queue.depth() == 1  # the old acme's line, queued
        assert await embed_texts(client, first, ["secret", "a", "b", "c"]) == 200
        await until(lambda: cache.memory.entries == 4)
        assert await embed_texts(client, first, ["one more"]) == 429  # its bucket is empty

        monkeypatch.setattr(store, "delete_tenant", _raise(OSError("disk gone")))
        deleted = await client.delete("/admin/tenants/acme", headers=ADMIN)
        assert deleted.json()["data_deleted"] is False  # everything above is still there
        second = await quota_tenant(stack, "acme", burst=4)
        new_id = stack.registry.tenant("acme").id
        assert new_id != old_id

        for path in ("/v1/files", "/v1/batches"):
            assert (await client.get(path, headers=second)).json()["data"] == [], path
        for path in (f"/v1/files/{old_file['id']}", f"/v1/batches/{old_batch['id']}"):
            assert (await client.get(path, headers=second)).status_code == 404, path
        assert await embed_texts(client, second, ["secret", "a", "b", "c"]) == 200  # a full bucket
        await until(lambda: cache.memory.entries == 8)  # all four missed: computed, kept apart
        assert cache.memory.scope_held(tenant_scope(new_id)) > 0
        async with running(
            stack.batches, client, tmp_path, limits=TEST_LIMITS, queue=queue
        ) as runner:
            await until(lambda: store.batch_by_id(old_batch["id"]).counts.failed == 1, 10)
            assert runner.submitter.sent == [(old_batch["id"], 1)]
        [line] = list(store.results(old_batch["id"]))
        assert b"tenant %d does not exist (deleted)" % old_id in line.data
        assert [e.tenant_id for e in sink.events if e.tenant == "acme"] == [old_id, new_id]
        assert not [e for e in sink.events if e.tier == "batch"]  # the old line billed no one
    finally:
        await stack.close()


async def test_rows_from_before_ids_are_their_tenants_once_a_gateway_starts(tmp_path):
    """A batch store of the previous version, upgraded: its rows carry no id until the
    gateway's start gives them to the tenant of their name; a name no tenant has keeps
    them nobody's."""
    path = tmp_path / "batches.sqlite3"
    old = sqlite_batch_store(path)
    for name in ("search-app", "ghost"):
        old.add_file(FileObject(f"file-{name}", 1, name, "batch", "in.jsonl", 3, "d" * 64, 1, None))
    old.close()
    for table in ("batch_files", "batches"):
        sqlite_sql(path, f"UPDATE {table} SET tenant_id = 0")  # as the migration leaves them
    stack = await make_stack(tmp_path, batches=BATCHES)
    try:
        listed = (await stack.client.get("/v1/files", headers=SEARCH_APP)).json()["data"]
        assert [f["id"] for f in listed] == ["file-search-app"]
        assert stack.batches is not None
        assert stack.batches.store.legacy_tenants() == ["ghost"]
    finally:
        await stack.close()


async def test_a_deleted_tenants_rows_from_before_ids_go_with_it_not_to_the_next_of_its_name(
    tmp_path,
):
    """The first acme was deleted before the upgrade and its deletion did not finish; a new
    acme is created after it. The first acme's rows (no id) are its deletion's, deleted
    with it; the new acme never reads them, before adoption or after."""
    stack = await make_stack(tmp_path, batches=BATCHES)
    client = stack.client
    assert stack.batches is not None
    store, files = stack.batches.store, stack.batches.files
    try:
        first = await new_tenant(client, "acme")
        old_id = stack.registry.tenant("acme").id
        old_file = (await upload(client, jsonl(embed_line("a", "the first's")), first)).json()
        (await create(client, old_file["id"], first)).json()
        digest = store.file(old_id, old_file["id"]).sha256  # type: ignore[union-attr]
        theirs = (await upload(client, jsonl(embed_line("s", "theirs")), SEARCH_APP)).json()
        for table in ("batch_files", "batches"):  # the store as it was upgraded
            sqlite_sql(tmp_path / "batches.sqlite3", f"UPDATE {table} SET tenant_id = 0")
        stack.registry.delete_tenant("acme", actor=SYSTEM)  # unfinished: no TenantData ran
        second = await new_tenant(client, "acme")
        assert (await client.get("/v1/files", headers=second)).json()["data"] == []

        later = TenantData(stack.registry, store, files, stack.gateway.cache.forget_tenant)
        await later.adopt_legacy()  # a gateway starting: the first acme's are its deletion's
        assert (await client.get("/v1/files", headers=second)).json()["data"] == []
        assert [f.id for f in store.files(old_id)] == [old_file["id"]]
        assert await later.finish_pending() == 1
        assert store.files(old_id) == [] and store.batches(old_id) == []
        assert not files.exists(digest)
        assert store.legacy_tenants() == []
        kept = (await client.get("/v1/files", headers=SEARCH_APP)).json()["data"]
        assert [f["id"] for f in kept] == [theirs["id"]]  # adopted by search-app, kept
    finally:
        await stack.close()
