"""headway certs init and issue: the internal CA and each role's certificate (docs/tls.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

certs_app = typer.Typer(no_args_is_help=True, help=__doc__)

DirOpt = Annotated[Path, typer.Option("--dir", help="The certificates folder.")]
DaysOpt = Annotated[int, typer.Option("--days", min=1, help="Days each certificate is valid.")]


def _hosts(value: str | None) -> tuple[str, ...] | None:
    from headway.tls.certs import parse_hosts

    if value is None:
        return None
    hosts = parse_hosts(value)
    if not hosts:
        raise typer.BadParameter("name at least one host", param_hint="--hosts")
    return hosts


@certs_app.command()
def init(
    directory: DirOpt,
    hosts: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated DNS names and IPs the gateway and workers are reached by "
            "(default: localhost,127.0.0.1,::1)."
        ),
    ] = None,
    days: DaysOpt = 365,
    ca_days: Annotated[int, typer.Option(min=1, help="Days the CA is valid.")] = 3650,
    force: Annotated[bool, typer.Option(help="Replace an existing CA.")] = False,
) -> None:
    """A new internal CA, and a certificate for every role: gateway, worker, executor, and
    public (the gateway's HTTPS to clients). Keys are written readable by this user only."""
    from headway.tls.certs import DEFAULT_HOSTS
    from headway.tls.folder import CertsFolderError
    from headway.tls.folder import init as init_folder

    try:
        written = init_folder(
            directory, hosts=_hosts(hosts) or DEFAULT_HOSTS, days=days, ca_days=ca_days, force=force
        )
    except CertsFolderError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    for path in written:
        typer.echo(str(path))


@certs_app.command()
def issue(
    directory: DirOpt,
    role: Annotated[str, typer.Option(help="gateway, worker, executor or public.")],
    hosts: Annotated[
        str | None,
        typer.Option(help="Comma-separated DNS names and IPs (default: the replaced one's)."),
    ] = None,
    days: DaysOpt = 365,
) -> None:
    """A fresh certificate and key for one role, signed by the folder's CA: rotation. Running
    processes pick it up within tls.reload_interval_s, for new connections."""
    from headway.tls.folder import CertsFolderError, certificate_path, issue_role

    try:
        leaf = issue_role(directory, role, hosts=_hosts(hosts), days=days)
    except CertsFolderError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    serial = format(leaf.certificate.serial_number, "x")
    typer.echo(f"{certificate_path(directory, role)} serial {serial}")
