"""headway db migrate and roles: the owner's work on a shared Postgres (docs/security.md).

Both run with the owner's postgres_url (the role that owns the tables and may create
roles); every component then connects with its own role's URL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from headway.cli.options import ConfigOpt, PostgresOpt, settings_from

db_app = typer.Typer(no_args_is_help=True, help=__doc__)

PrefixOpt = Annotated[
    str | None, typer.Option("--prefix", help="The roles' prefix (postgres_roles.prefix).")
]


def _owner_url(
    config: Path | None, postgres_url: str | None, prefix: str | None
) -> tuple[str, str]:
    sections: dict[str, object] = {"postgres_url": postgres_url}
    if prefix is not None:
        sections["postgres_roles"] = {"prefix": prefix}
    settings = settings_from(config, **sections)
    if not settings.postgres_url:
        typer.echo("set postgres_url (or --postgres-url) to the owner's URL", err=True)
        raise typer.Exit(2)
    return settings.postgres_url, settings.postgres_roles.prefix


@db_app.command()
def migrate(config: ConfigOpt = None, postgres_url: PostgresOpt = None) -> None:
    """Apply every missing migration: registry, ledger, batch store, quality references."""
    from headway.db_setup import DbSetupError, migrate_all

    url, _ = _owner_url(config, postgres_url, None)
    try:
        migrate_all(url)
    except DbSetupError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    typer.echo("migrated")


@db_app.command()
def roles(
    config: ConfigOpt = None,
    postgres_url: PostgresOpt = None,
    prefix: PrefixOpt = None,
    passwords_dir: Annotated[
        Path | None,
        typer.Option(
            "--passwords-dir",
            help="A folder of files named gateway, worker, billing, executor, each holding "
            "that role's password (a mounted Secret); a role without one keeps its own.",
        ),
    ] = None,
    sql: Annotated[
        bool, typer.Option("--sql", help="Print the statements instead of running them.")
    ] = False,
) -> None:
    """Migrate, then make every component's role with exactly its grants (idempotent)."""
    from headway.db_setup import DbSetupError, apply_roles, migrate_all
    from headway.privileges import COMPONENTS, Component, all_statements

    if sql:
        settings = settings_from(config, postgres_roles={"prefix": prefix} if prefix else None)
        for statement in all_statements(settings.postgres_roles.prefix):
            typer.echo(statement + ";")
        return
    url, role_prefix = _owner_url(config, postgres_url, prefix)
    passwords: dict[Component, str] = {}
    if passwords_dir is not None:
        for component in COMPONENTS:
            path = passwords_dir / component
            if path.is_file():
                password = path.read_text(encoding="utf-8").strip()
                if not password:
                    typer.echo(f"{path} is empty", err=True)
                    raise typer.Exit(2)
                passwords[component] = password
    try:
        migrate_all(url)
        made = apply_roles(url, role_prefix, passwords)
    except DbSetupError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    for component, role in made.items():
        note = "password set" if component in passwords else "password unchanged"
        typer.echo(f"{component}: {role} ({note})")
