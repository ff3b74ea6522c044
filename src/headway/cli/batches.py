"""``headway batches run``: the executor of OpenAI-compatible batches."""

from __future__ import annotations

from typing import Annotated

import typer

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

batches_app = typer.Typer(no_args_is_help=True, help=__doc__)


@batches_app.command()
def run(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    gateway_urls: Annotated[
        str | None, typer.Option(help="Comma-separated gateway URLs the lines go to.")
    ] = None,
    host: Annotated[str, typer.Option(help="Address for /metrics.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port for /metrics.")] = 9400,
    fd: FdOpt = None,
    nats_url: NatsOpt = None,
    postgres_url: PostgresOpt = None,
    log_level: LogLevelOpt = None,
    update_streams: UpdateStreamsOpt = False,
) -> None:
    """Run a batch executor: validate batches, run their lines as batch-tier work, write
    their output files. Any number may run on one set of stores."""
    urls = tuple(u.strip() for u in gateway_urls.split(",") if u.strip()) if gateway_urls else None
    settings = settings_from(
        config,
        data_dir=data_dir,
        log_level=log_level,
        update_streams=update_streams,
        nats_url=nats_url,
        postgres_url=postgres_url,
        batches={"executor": {"gateway_urls": urls}} if urls else None,
    )
    from headway.batches.service import ExecutorService, build_executor_app
    from headway.serve import serve
    from headway.tls.contexts import TlsFilesInvalid

    try:
        service = ExecutorService(settings)
    except (ValueError, TlsFilesInvalid) as exc:
        raise typer.BadParameter(str(exc)) from exc
    serve(build_executor_app(service), host=host, port=port, fd=fd, log_level=settings.log_level)
