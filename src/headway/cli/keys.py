"""headway keys: tenants' API keys and the admin keys, listed by id, rotated, revoked.

A key is printed once, when it is made (the registry keeps only its digest); listings
show ids and dates, never keys. Every write is audited as ``cli:<user>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from headway.cli.failures import CliError
from headway.cli.options import ConfigOpt, DataDirOpt
from headway.cli.output import JsonOpt, YesOpt, confirm, emit_json
from headway.cli.writes import open_for_cli, refusals_exit

if TYPE_CHECKING:
    from headway.registry.model import ApiKey

keys_app = typer.Typer(
    no_args_is_help=True, help="API keys: list, rotate and revoke them; add an admin key."
)

AdminOpt = Annotated[bool, typer.Option("--admin", help="The admin keys, not a tenant's.")]


def key_line(key: ApiKey) -> str:
    from headway.utc import rfc3339

    state = "live"
    if key.revoked_at is not None:
        state = f"revoked {rfc3339(key.revoked_at)}"
    elif key.expires_at is not None:
        state = f"expires {rfc3339(key.expires_at)}"
    return f"{key.key_id}  {key.role}  created {rfc3339(key.created_at)}  {state}"


def key_document(key: ApiKey) -> dict[str, Any]:
    from headway.utc import rfc3339

    def when(at: float | None) -> str | None:
        return None if at is None else rfc3339(at)

    return {
        "key_id": key.key_id,
        "tenant": key.tenant,
        "role": key.role,
        "created_at": rfc3339(key.created_at),
        "expires_at": when(key.expires_at),
        "revoked_at": when(key.revoked_at),
    }


def _whose(tenant: str | None, admin: bool) -> str | None:
    if admin == (tenant is not None):
        raise CliError("whose keys?", "give a TENANT, or --admin for the admin keys", 2)
    return tenant


@keys_app.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Argument(help="The tenant whose keys to list.")] = None,
    admin: AdminOpt = False,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """A tenant's keys (or the admin keys), newest first: ids and dates, never the keys."""
    from headway.registry.demo import DEMO_ADMIN_KEY_ID

    whose = _whose(tenant, admin)
    registry, _ = open_for_cli(config, data_dir)
    with refusals_exit():
        keys = registry.keys(whose)
    if as_json:
        emit_json({"data": [key_document(key) for key in keys]})
        return
    for key in keys:
        demo = "  (the README's demo-admin-key)" if key.key_id == DEMO_ADMIN_KEY_ID else ""
        typer.echo(key_line(key) + demo)


@keys_app.command("rotate")
def keys_rotate(
    tenant: Annotated[str, typer.Argument(help="The tenant to give a new key.")],
    overlap: Annotated[
        float, typer.Option(min=0, help="Seconds the tenant's other keys keep working.")
    ] = 3600,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Print a new API key for the tenant (shown once); its other keys expire after
    --overlap seconds (0: at once).

    Examples:

      headway keys rotate acme                 # the old keys work one more hour
      headway keys rotate acme --overlap 0     # the old keys are refused at once
      headway keys rotate acme --overlap 86400 # a day for every client to move over
    """
    registry, actor = open_for_cli(config, data_dir)
    with refusals_exit():
        record, key = registry.rotate_key(tenant, actor=actor, overlap_s=overlap)
    typer.echo(f"new key {record.key_id} for {tenant} (shown once); the others work {overlap:g}s:")
    typer.echo(key)


def revoke(key_id: str, tenant: str | None, config: Path | None, data_dir: Path | None) -> None:
    """Revoke ``key_id`` now; with ``tenant`` (None: the admin keys, or any key for the old
    command's caller, ``tenants revoke-key``), only if it is that tenant's."""
    registry, actor = open_for_cli(config, data_dir)
    with refusals_exit():
        if tenant is not None and key_id not in {k.key_id for k in registry.keys(tenant)}:
            raise CliError(
                f"tenant {tenant} has no key {key_id!r}", f"headway keys list {tenant} lists them"
            )
        key = registry.revoke_key(key_id, actor=actor)
    typer.echo(f"key {key.key_id} revoked")


@keys_app.command("revoke")
def keys_revoke(
    first: Annotated[str, typer.Argument(metavar="TENANT", help="The key's tenant.")],
    key_id: Annotated[
        str | None, typer.Argument(metavar="KEY_ID", help="The key's id (keys list shows it).")
    ] = None,
    admin: Annotated[
        bool, typer.Option("--admin", help="Revoke an admin key: give only its KEY_ID.")
    ] = False,
    yes: YesOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Revoke a key now, by its id: TENANT KEY_ID, or --admin KEY_ID."""
    if admin:
        if key_id is not None:
            raise CliError("--admin takes one KEY_ID", "give headway keys revoke --admin KEY_ID", 2)
        tenant, key_id = None, first
        registry, _ = open_for_cli(config, data_dir)
        if key_id not in {key.key_id for key in registry.keys(None)}:
            raise CliError(f"no admin key {key_id!r}", "headway keys list --admin lists them")
    elif key_id is None:
        raise CliError("no KEY_ID", "give headway keys revoke TENANT KEY_ID", 2)
    else:
        tenant = first
    whose = "admin key" if tenant is None else f"{tenant}'s key"
    confirm(f"Revoke {whose} {key_id} now?", yes)
    revoke(key_id, tenant, config, data_dir)


@keys_app.command("add-admin")
def keys_add_admin(config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Print a new admin key (shown once): a second one lets a second person approve a
    rollout that its starter may not."""
    registry, actor = open_for_cli(config, data_dir)
    with refusals_exit():
        record, key = registry.add_admin_key(actor=actor)
    typer.echo(f"admin key {record.key_id} created (shown once):")
    typer.echo(key)
