"""headway billing: invoices, the provider export and whom it bills, legacy usage given
to a tenant, and backups of the embedded ledger (the consumer: headway run billing).

Every command but ``restore`` reads an existing data dir, unless the ledger and registry
are on Postgres (``postgres_url``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from headway.cli.datadir import existing_settings, registry_of
from headway.cli.options import (
    ConfigOpt,
    DataDirOpt,
    FdOpt,
    LogLevelOpt,
    NatsOpt,
    PostgresOpt,
    UpdateStreamsOpt,
    settings_from,
)
from headway.cli.output import JsonOpt, YesOpt, alias_of, confirm, emit_json
from headway.settings import Settings

if TYPE_CHECKING:
    from headway.billing.export import ExportReport
    from headway.billing.ledger.base import HourlyUsage
    from headway.billing.prices import PriceBook

billing_app = typer.Typer(
    no_args_is_help=True,
    help="Invoices, the provider export and its customers, ledger backups and restores.",
)


def run(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    host: Annotated[str | None, typer.Option(help="Address for /metrics.")] = None,
    port: Annotated[int | None, typer.Option(help="Port for /metrics (default 9300).")] = None,
    fd: FdOpt = None,
    nats_url: NatsOpt = None,
    postgres_url: PostgresOpt = None,
    log_level: LogLevelOpt = None,
    update_streams: UpdateStreamsOpt = False,
) -> None:
    """Run the billing consumer: usage events → the ledger, exactly once per request."""
    settings = settings_from(
        config,
        data_dir=data_dir,
        log_level=log_level,
        update_streams=update_streams,
        nats_url=nats_url,
        postgres_url=postgres_url,
        billing={"host": host, "port": port},
    )
    from headway.billing.service import BillingService, build_billing_app
    from headway.serve import serve

    service = BillingService(settings)
    billing = settings.billing
    serve(
        build_billing_app(service),
        host=billing.host,
        port=billing.port,
        fd=fd,
        log_level=settings.log_level,
    )


billing_app.command("run", hidden=True)(alias_of(run, "billing run", "run billing"))

TenantIdOpt = Annotated[
    int | None,
    typer.Option(
        "--tenant-id", min=1, help="A tenant by its id (a deleted tenant's too), not its name."
    ),
]


@billing_app.command()
def prices(config: ConfigOpt = None) -> None:
    """Print the price book in use (billing.price_book, else the packaged example), as
    TOML: a copy to add your own models' prices to.

    Examples:

      headway billing prices > prices.toml    # then add a [[price]] per alias
      headway billing invoice --month 2025-05 --prices prices.toml
    """
    from headway.billing.prices import PriceBookError, default_prices_text, load_prices

    path = settings_from(config, log_level="warning").billing.price_book
    if path is None:
        typer.echo(default_prices_text(), nl=False)
        return
    try:
        load_prices(path)  # the book it prints is one invoices can read
    except PriceBookError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(path.read_text(encoding="utf-8"), nl=False)


@billing_app.command()
def invoice(
    month: Annotated[str, typer.Option(help="The UTC month, YYYY-MM.")],
    tenant: Annotated[
        str | None, typer.Option(help="One tenant, the registry's of that name (default: all).")
    ] = None,
    tenant_id: TenantIdOpt = None,
    output_format: Annotated[str, typer.Option("--format", help="json or csv.")] = "json",
    prices: Annotated[
        Path | None, typer.Option(help="Price book TOML (default: billing.price_book).")
    ] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    postgres_url: PostgresOpt = None,
) -> None:
    """Print the month's invoices from the ledger, in exact decimals: one per tenant id,
    its name beside it.

    Examples:

      headway billing invoice --month 2025-05                     # every tenant, JSON
      headway billing invoice --month 2025-05 --tenant acme --format csv
      headway billing invoice --month 2025-05 --tenant-id 7       # a deleted tenant too
    """
    if output_format not in ("json", "csv"):
        raise typer.BadParameter("expected json or csv", param_hint="--format")
    if tenant is not None and tenant_id is not None:
        raise typer.BadParameter("give --tenant or --tenant-id, not both", param_hint="--tenant")
    settings = existing_settings(
        config,
        data_dir,
        postgres_url=postgres_url,
        billing={"price_book": prices},
        log_level="warning",
    )
    from headway.billing.invoice import (
        InvoiceError,
        build_invoices,
        month_range,
        render_csv,
        render_json,
    )
    from headway.billing.prices import PriceBookError

    try:
        book = _price_book(settings)
        start, end = month_range(month)
        if tenant is not None:
            tenant_id = _tenant_id(settings, tenant)
        hours = asyncio.run(_hours(settings, start, end, tenant_id))
        invoices = build_invoices(hours, book, month, tenant_id, name=tenant or "")
    except (InvoiceError, PriceBookError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(render_json(invoices) if output_format == "json" else render_csv(invoices), nl=False)


@billing_app.command()
def export(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    postgres_url: PostgresOpt = None,
    url: Annotated[
        str | None, typer.Option("--url", help="Provider base URL (default billing.export_url).")
    ] = None,
) -> None:
    """Report every closed hour not yet reported to the billing provider, once per
    (tenant, hour, meter), with an idempotency key; safe to run again at any time."""
    settings = existing_settings(
        config, data_dir, postgres_url=postgres_url, billing={"export_url": url}
    )
    if not settings.billing.export_url:
        typer.echo("error: no provider: give --url or set billing.export_url", err=True)
        raise typer.Exit(2)
    report = asyncio.run(_export(settings))
    typer.echo(
        f"intents {report.planned}: sent {report.sent}, already recorded "
        f"{report.already_sent}, failed {report.failed}, rejected {report.rejected}, "
        f"deferred {report.deferred}, no billing customer {report.unmapped}"
    )
    for problem in report.problems:
        typer.echo(f"  {problem}", err=True)
    raise typer.Exit(
        0 if not (report.failed or report.rejected or report.deferred or report.unmapped) else 1
    )


@billing_app.command()
def customers(
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    postgres_url: PostgresOpt = None,
) -> None:
    """Each tenant's customer at the billing provider, as the export reads it; a tenant
    without one is refused by the export (set it with headway tenants set NAME
    --billing-customer ID). Exits 1 if any tenant has none and billing.export_unmapped
    is refuse."""
    settings = existing_settings(config, data_dir, postgres_url=postgres_url)
    registry = registry_of(settings)
    try:
        tenants, mapping = registry.tenants(), registry.billing_customers()
    finally:
        registry.close()
    fallback = settings.billing.export_unmapped == "tenant_name"
    missing = sum(1 for tenant in tenants if tenant.id not in mapping)
    if as_json:
        emit_json(
            {
                "data": [
                    {"id": t.id, "name": t.name, "billing_customer": mapping.get(t.id)}
                    for t in tenants
                ],
                "export_unmapped": settings.billing.export_unmapped,
            }
        )
    for tenant in [] if as_json else tenants:
        customer = mapping.get(tenant.id)
        if customer is None:
            customer = "none: exported under its name" if fallback else "none: exports refused"
        typer.echo(f"{tenant.id}  {tenant.name}  {customer}")
    raise typer.Exit(1 if missing and not fallback else 0)


@billing_app.command("adopt-legacy")
def adopt_legacy(
    tenant: Annotated[str, typer.Option(help="The name the legacy usage was recorded under.")],
    tenant_id: TenantIdOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    postgres_url: PostgresOpt = None,
) -> None:
    """Give the usage recorded under a name before usage carried tenant ids (the ledger's
    legacy rows) to a tenant id: by default the registry's tenant of that name. Run it
    once every gateway writes tenant ids; it is refused when the registry's audit log
    shows the name was deleted, as the rows may then be an earlier tenant's (give
    --tenant-id to decide)."""
    settings = existing_settings(config, data_dir, postgres_url=postgres_url)
    if tenant_id is None:
        tenant_id = _tenant_id(settings, tenant, refuse_reused=True)
    moved = asyncio.run(_adopt(settings, tenant, tenant_id))
    typer.echo(f"{moved} usage events recorded as {tenant!r} now belong to tenant id {tenant_id}")


@billing_app.command()
def backup(
    to: Annotated[
        Path | None,
        typer.Option(help="The backup file (default: <data-dir>/backups/ledger-<time>.sqlite3)."),
    ] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Back up the embedded ledger while the consumer runs (SQLite's online backup: one
    consistent copy, checked before it gets its name). A Postgres ledger is backed up
    with pg_dump (docs/billing.md)."""
    settings = existing_settings(config, data_dir, log_level="warning")
    _refuse_postgres(settings, "backup")
    from headway.billing.ledger.backup import BackupError, default_target
    from headway.billing.ledger.backup import backup as back_up

    target = to or default_target(settings.data_dir / "backups")
    try:
        summary = back_up(settings.ledger_path, target)
    except BackupError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(
        f"backed up {settings.ledger_path} to {summary.path}: {summary.processed} events, "
        f"{summary.intents} export intents ({summary.sent} sent), schema "
        f"{max(summary.versions)}; integrity checked"
    )


@billing_app.command()
def restore(
    source: Annotated[Path, typer.Argument(help="A file `headway billing backup` wrote.")],
    force: Annotated[
        bool,
        typer.Option(help="Restore over a ledger with writes newer than the backup."),
    ] = False,
    yes: YesOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Make the embedded ledger the backup's. Refused while the ledger is open in another
    process (stop the consumer first) and, unless --force, when the ledger holds writes
    newer than the backup; what it replaces is backed up first, to
    <data-dir>/backups/ledger-replaced-<time>.sqlite3."""
    settings = settings_from(config, data_dir=data_dir, log_level="warning")
    _refuse_postgres(settings, "restore")
    confirm(f"Replace the ledger {settings.ledger_path} with {source}?", yes)
    from headway.billing.ledger.backup import BackupError
    from headway.billing.ledger.backup import restore as restore_from

    try:
        restored, kept = restore_from(
            source, settings.ledger_path, keep_dir=settings.data_dir / "backups", force=force
        )
    except BackupError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    if kept is not None:
        typer.echo(f"the ledger it replaced is kept in {kept.path} ({kept.processed} events)")
    typer.echo(
        f"restored {settings.ledger_path} from {source}: {restored.processed} events, "
        f"{restored.intents} export intents ({restored.sent} sent); integrity checked"
    )


def _refuse_postgres(settings: Settings, what: str) -> None:
    if settings.postgres_url:
        typer.echo(
            f"error: the ledger is on Postgres: {what} it with pg_dump / pg_restore"
            " (docs/billing.md); this command is for the embedded SQLite ledger",
            err=True,
        )
        raise typer.Exit(2)


def _tenant_id(settings: Settings, name: str, *, refuse_reused: bool = False) -> int:
    """The registry's tenant of that name; exits 1 if there is none (or, with
    ``refuse_reused``, if the audit log holds a deletion of that name)."""
    from headway.registry.errors import UnknownTenant
    from headway.registry.model import AuditQuery

    registry = registry_of(settings)
    try:
        found = registry.tenant(name)
        deleted = registry.audit(
            AuditQuery(action="tenant.delete", target=f"tenant:{name}", limit=1)
        )
    except UnknownTenant as exc:
        typer.echo(f"error: {exc}; a deleted tenant is named by --tenant-id", err=True)
        raise typer.Exit(1) from exc
    finally:
        registry.close()
    if refuse_reused and deleted:
        typer.echo(
            f"error: a tenant named {name!r} was deleted before (audit entry {deleted[0].id}):"
            " its legacy usage may be that tenant's; give --tenant-id to say whose it is",
            err=True,
        )
        raise typer.Exit(1)
    return found.id


async def _adopt(settings: Settings, tenant: str, tenant_id: int) -> int:
    from headway.billing.ledger.open import open_ledger

    ledger = await open_ledger(settings.postgres_url, settings.ledger_path)
    try:
        return await ledger.adopt_legacy(tenant, tenant_id)
    finally:
        await ledger.close()


def _price_book(settings: Settings) -> PriceBook:
    from headway.billing.prices import configured_prices

    return configured_prices(settings.billing.price_book)


async def _hours(
    settings: Settings, start: float, end: float, tenant_id: int | None
) -> list[HourlyUsage]:
    from headway.billing.ledger.open import open_ledger

    ledger = await open_ledger(settings.postgres_url, settings.ledger_path)
    try:
        return await ledger.hours(start, end, tenant_id)
    finally:
        await ledger.close()


async def _export(settings: Settings) -> ExportReport:
    import aiohttp

    from headway.billing.customers import customers_of
    from headway.billing.export import HttpMeterClient, export_closed_hours
    from headway.billing.ledger.open import open_ledger

    billing = settings.billing
    assert billing.export_url
    ledger = await open_ledger(settings.postgres_url, settings.ledger_path)
    try:
        async with aiohttp.ClientSession() as session:
            client = HttpMeterClient(billing.export_url, billing.export_api_key, session)
            return await export_closed_hours(
                ledger,
                client,
                time.time(),
                billing.export_grace_s,
                customers=await customers_of(settings),
            )
    finally:
        await ledger.close()
