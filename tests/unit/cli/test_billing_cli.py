"""``headway billing adopt-legacy`` and ``invoice`` by tenant, on a temporary data dir."""

import asyncio
import json

import pytest
from typer.testing import CliRunner

from headway.billing.ledger.sqlite import SQLiteLedger
from headway.cli import app
from headway.cli.options import settings_from
from headway.metering.event import decode
from headway.registry.sqlite import Registry
from tests.builders import schema_1, usage_event


@pytest.fixture
def settings(tmp_path):
    return settings_from(None, data_dir=tmp_path)


@pytest.fixture
def cli(tmp_path):
    def invoke(*args: str):
        return CliRunner().invoke(app, ["billing", *args, "--data-dir", str(tmp_path)])

    return invoke


def ledger_holds(settings, *events) -> None:
    async def write() -> None:
        ledger = await SQLiteLedger.open(settings.ledger_path)
        try:
            await ledger.apply(list(events), [])
        finally:
            await ledger.close()

    asyncio.run(write())


def hours(settings, tenant_id):
    async def read():
        ledger = await SQLiteLedger.open(settings.ledger_path)
        try:
            return await ledger.hours(0, 2**33, tenant_id)
        finally:
            await ledger.close()

    return asyncio.run(read())


def legacy(request_id: str, tenant: str):
    return decode(schema_1(usage_event(request_id, tenant=tenant, tenant_id=1)))


def test_legacy_usage_goes_to_the_registrys_tenant_of_its_name(cli, settings):
    acme, _ = Registry(settings.registry_path).add_tenant("acme", "interactive")
    ledger_holds(settings, legacy("old-1", "acme"), legacy("old-2", "acme"))
    adopted = cli("adopt-legacy", "--tenant", "acme")
    assert adopted.exit_code == 0, adopted.output
    assert f"2 usage events recorded as 'acme' now belong to tenant id {acme.id}" in adopted.output
    assert [(row.tenant_id, row.requests) for row in hours(settings, acme.id)] == [(acme.id, 2)]
    assert hours(settings, 0) == []
    invoice = cli("invoice", "--month", "2026-11", "--tenant", "acme")
    assert invoice.exit_code == 0, invoice.output
    [printed] = json.loads(invoice.output)["invoices"]
    assert (printed["tenant_id"], printed["tenant"]) == (acme.id, "acme")


def test_a_name_deleted_before_needs_the_operator_to_say_whose_the_usage_is(cli, settings):
    registry = Registry(settings.registry_path)
    first, _ = registry.add_tenant("acme", "interactive")
    registry.delete_tenant("acme")
    registry.finish_deletion(first.id)
    again, _ = registry.add_tenant("acme", "interactive")
    ledger_holds(settings, legacy("old-1", "acme"))
    refused = cli("adopt-legacy", "--tenant", "acme")
    assert refused.exit_code == 1 and "was deleted before" in refused.output
    assert hours(settings, again.id) == []
    adopted = cli("adopt-legacy", "--tenant", "acme", "--tenant-id", str(first.id))
    assert adopted.exit_code == 0, adopted.output
    assert [row.tenant_id for row in hours(settings, None)] == [first.id]
    deleted = cli("invoice", "--month", "2026-11", "--tenant-id", str(first.id))
    assert json.loads(deleted.output)["invoices"][0]["tenant_id"] == first.id
    assert cli("invoice", "--month", "2026-11", "--tenant", "nobody").exit_code == 1
