"""headway batches list, and headway run batches: the executor of OpenAI-compatible
batches."""

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
from headway.cli.output import JsonOpt, alias_of, emit_json

batches_app = typer.Typer(no_args_is_help=True, help="Batches (the Batch API's): list them.")


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


batches_app.command("run", hidden=True)(alias_of(run, "batches run", "run batches"))


@batches_app.command("list")
def batches_list(
    tenant: Annotated[
        str | None, typer.Argument(help="Only this tenant's batches, newest first.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 20,
    as_json: JsonOpt = False,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Batches (every tenant's, oldest first; or one tenant's, newest first): id, status,
    line counts and when each was made."""
    from typing import get_args

    from headway.batches.model import BatchStatus
    from headway.batches.open import open_batch_store
    from headway.cli.datadir import existing_settings, registry_of
    from headway.cli.writes import refusals_exit
    from headway.utc import rfc3339

    settings = existing_settings(config, data_dir)
    tenant_id = None
    if tenant is not None:
        with refusals_exit():
            tenant_id = registry_of(settings).tenant(tenant).id
    store = open_batch_store(settings)
    try:
        if tenant_id is None:
            found = store.batches_in(get_args(BatchStatus), limit)
        else:
            found = store.batches(tenant_id, limit=limit)
    finally:
        store.close()
    documents = [
        {
            "id": batch.id,
            "tenant": batch.tenant,
            "endpoint": batch.endpoint,
            "status": batch.status,
            "created_at": rfc3339(batch.created_at),
            "total": batch.counts.total,
            "completed": batch.counts.completed,
            "failed": batch.counts.failed,
            "output_file_id": batch.output_file_id,
        }
        for batch in found
    ]
    if as_json:
        emit_json({"data": documents})
        return
    for d in documents:
        typer.echo(
            f"{d['id']}  {d['status']}  {d['endpoint']}  created {d['created_at']}  "
            f"{d['completed']}/{d['total']} done, {d['failed']} failed"
        )
