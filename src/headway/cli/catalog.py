"""``headway models …`` and ``headway tenants …``: what the registry holds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from headway.cli.options import ConfigOpt, DataDirOpt, settings_from

if TYPE_CHECKING:
    from headway.registry.model import Tenant

models_app = typer.Typer(no_args_is_help=True, help="Import and list model versions.")
tenants_app = typer.Typer(no_args_is_help=True, help="Manage tenants and their API keys.")

RateOpt = Annotated[float | None, typer.Option(help="Quota refill, texts per second.")]
BurstOpt = Annotated[float | None, typer.Option(help="Quota bucket size, texts.")]


@models_app.command("import")
def models_import(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    quantize: Annotated[
        bool, typer.Option("--int8", help="Also store an int8 (per-channel) version.")
    ] = False,
    cross_encoder: Annotated[
        Path | None,
        typer.Option(help="Import a BERT cross-encoder checkpoint directory instead.", exists=True),
    ] = None,
    alias: Annotated[
        list[str] | None, typer.Option(help="Alias(es) for the imported version.")
    ] = None,
) -> None:
    """Build ONNX artifacts from packaged weights into the content-addressed store."""
    settings = settings_from(config, data_dir=data_dir)
    from headway.catalog import DEFAULT_ALIASES, register
    from headway.models.errors import ModelError
    from headway.models.importer import import_default, import_hf_bert, quantize_int8
    from headway.models.store import ModelStore
    from headway.registry.sqlite import Registry

    store = ModelStore(settings.model_root)
    registry = Registry(settings.registry_path)
    try:
        if cross_encoder is not None:
            stored = import_hf_bert(
                store,
                cross_encoder,
                kind="cross-encoder",
                name=cross_encoder.name,
                source=str(cross_encoder),
            )
            aliases = tuple(alias or [settings.rerank_model])
        else:
            stored = import_default(store)
            aliases = tuple(alias or DEFAULT_ALIASES)
        register(registry, stored, aliases)
        typer.echo(f"{stored.version}  {stored.manifest.name}  aliases: {', '.join(aliases)}")
        if quantize:
            quantized = quantize_int8(store, stored)
            int8_aliases = tuple(f"{a}-int8" for a in aliases)
            register(registry, quantized, int8_aliases)
            names = ", ".join(int8_aliases)
            typer.echo(f"{quantized.version}  {quantized.manifest.name}  aliases: {names}")
    except ModelError as exc:
        typer.echo(f"import failed: {exc}", err=True)
        raise typer.Exit(1) from exc


@models_app.command("list")
def models_list(config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Model versions in the registry, with their aliases."""
    settings = settings_from(config, data_dir=data_dir)
    from headway.registry.sqlite import Registry

    for record, aliases in Registry(settings.registry_path).models():
        typer.echo(
            f"{record.version}  {record.name}  {record.kind}  dims={record.dimensions}  "
            f"{record.quantization}  aliases: {', '.join(aliases) or '-'}"
        )


@contextmanager
def _refusals_exit() -> Iterator[None]:
    """The registry's refusal of a write exits: 2 for a bad --tier, --rate or --burst (a bad
    argument), 1 for the rest (a duplicate or unknown tenant, a key in use)."""
    from headway.registry.errors import InvalidQuota, RegistryError, UnknownTier
    from headway.registry.model import TIERS

    try:
        yield
    except UnknownTier as exc:
        typer.echo(f"--tier must be one of {', '.join(TIERS)}", err=True)
        raise typer.Exit(2) from exc
    except InvalidQuota as exc:
        typer.echo("--rate and --burst must be positive", err=True)
        raise typer.Exit(2) from exc
    except RegistryError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc


def _line(tenant: Tenant) -> str:
    return (
        f"{tenant.name}  {tenant.tier}  rate={tenant.rate_texts_per_s:g}/s  "
        f"burst={tenant.burst_texts:g}"
    )


@tenants_app.command("add")
def tenants_add(
    name: str,
    tier: Annotated[str, typer.Option(help="interactive or batch.")] = "interactive",
    rate: RateOpt = None,
    burst: BurstOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Create a tenant and print its API key (shown once, stored only as a hash)."""
    settings = settings_from(config, data_dir=data_dir)
    from headway.registry.sqlite import Registry

    with _refusals_exit():
        tenant, key = Registry(settings.registry_path).add_tenant(
            name, tier, rate_texts_per_s=rate, burst_texts=burst
        )
    typer.echo(f"tenant {tenant.name} ({tenant.tier}) created; API key (shown once):")
    typer.echo(key)


@tenants_app.command("set")
def tenants_set(
    name: str,
    tier: Annotated[str | None, typer.Option(help="interactive or batch.")] = None,
    rate: RateOpt = None,
    burst: BurstOpt = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Change a tenant's tier or quota (running gateways pick it up within seconds)."""
    settings = settings_from(config, data_dir=data_dir)
    from headway.registry.sqlite import Registry

    with _refusals_exit():
        tenant = Registry(settings.registry_path).update_tenant(
            name, tier=tier, rate_texts_per_s=rate, burst_texts=burst
        )
    typer.echo(_line(tenant))


@tenants_app.command("list")
def tenants_list(config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Tenants with their tier and quota."""
    settings = settings_from(config, data_dir=data_dir)
    from headway.registry.sqlite import Registry

    for tenant in Registry(settings.registry_path).tenants():
        typer.echo(_line(tenant))
