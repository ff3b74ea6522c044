"""headway up, and headway run gateway and run worker: the system, or one of its processes."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from headway.cli.options import (
    AdmissionOpt,
    CacheRedisOpt,
    ConfigOpt,
    DataDirOpt,
    FdOpt,
    LogLevelOpt,
    NatsOpt,
    PostgresOpt,
    RedisOpt,
    UpdateStreamsOpt,
    debugging,
    given,
    settings_from,
)

if TYPE_CHECKING:
    from headway.privileges import Component
    from headway.registry.store import RegistryStore
    from headway.settings import Settings

log = logging.getLogger("headway")


@contextmanager
def tls_files_checked() -> Iterator[None]:
    """A certificate, key or CA file that cannot be loaded at start exits 2, naming it."""
    from headway.tls.contexts import TlsFilesInvalid

    try:
        yield
    except TlsFilesInvalid as exc:
        typer.echo(f"invalid TLS files: {exc}", err=True)
        raise typer.Exit(2) from exc


def _on_off(value: str | None) -> bool | None:
    if value is None:
        return None
    if value not in ("on", "off"):
        raise typer.BadParameter("expected on or off", param_hint="--admission")
    return value == "on"


def _urls(flag: str, value: str | None, old: str | None) -> tuple[str, ...] | None:
    """The comma-separated worker URLs of ``flag`` (or of its old name, with the notice);
    a value that is not an http(s) URL is refused, naming the flag."""
    from urllib.parse import urlsplit

    from headway.cli.failures import CliError
    from headway.cli.output import renamed

    if old is not None:
        renamed(f"run gateway {flag.replace('urls', 'replicas')}", f"run gateway {flag}")
        value = old if value is None else f"{value},{old}"
    if value is None:
        return None
    urls = tuple(u.strip() for u in value.split(",") if u.strip())
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError(
                f"{flag} takes worker URLs: {url[:80]!r} is not an http(s) URL",
                f"say e.g. {flag} http://10.0.0.5:9100,http://10.0.0.6:9100",
                2,
            )
    return urls


def up(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    host: Annotated[str | None, typer.Option(help="Gateway address.")] = None,
    port: Annotated[int | None, typer.Option(help="Gateway port (default 8080).")] = None,
    embed_replicas: Annotated[int | None, typer.Option(help="Embed workers (default 1).")] = None,
    rerank_replicas: Annotated[
        int | None, typer.Option(help="Rerank workers (default 1; 0: rerank on embed workers).")
    ] = None,
    backend: Annotated[str | None, typer.Option(help="onnx (default) or synthetic.")] = None,
    gateways: Annotated[
        int | None, typer.Option(help="Gateway processes (default 1), on port, port+1, ...")
    ] = None,
    admission: AdmissionOpt = None,
    prewarm: Annotated[
        bool | None,
        typer.Option(
            "--prewarm/--no-prewarm",
            help="Start every pool's workers now (default); off: a pool's first request "
            "starts them and waits for its first replica.",
        ),
    ] = None,
    idle_stop_s: Annotated[
        float | None,
        typer.Option(
            "--idle-stop-s",
            help="Stop a pool's workers after this many seconds without traffic; its next "
            "request starts them again (default: never).",
        ),
    ] = None,
    redis_url: RedisOpt = None,
    cache_redis_url: CacheRedisOpt = None,
    nats_url: NatsOpt = None,
    postgres_url: PostgresOpt = None,
    log_level: LogLevelOpt = None,
    model: Annotated[
        list[Path] | None,
        typer.Option(
            "--model",
            help="Also serve this model folder or .onnx graph (imported once: the same "
            "bytes are the same version), aliased by its name; repeat for each.",
            exists=True,
        ),
    ] = None,
) -> None:
    """Run the whole system on this machine: gateway + workers, embedded defaults.

    Examples:

      headway up                                      # port 8080, data in ./.headway
      headway up --embed-replicas 2 --port 9000       # two embed workers
      headway up --model ./bge-small-en-v1.5          # also serve this model folder
      headway up --backend synthetic                  # no model: a quick trial
    """
    settings = settings_from(
        config,
        data_dir=data_dir,
        log_level=log_level,
        redis_url=redis_url,
        redis={"cache_url": cache_redis_url},
        nats_url=nats_url,
        postgres_url=postgres_url,
        gateway={"host": host, "port": port, "admission": given(enabled=_on_off(admission))},
        worker={"backend": backend},
        up={
            "embed_replicas": embed_replicas,
            "rerank_replicas": rerank_replicas,
            "gateways": gateways,
            "prewarm": prewarm,
            "idle_stop_s": idle_stop_s,
        },
    )
    from headway.catalog import synthetic_aliases, synthetic_record
    from headway.registry.model import Actor
    from headway.registry.open import open_registry
    from headway.up.supervisor import Supervisor, with_executor_token, write_run_config

    settings = with_executor_token(settings)

    registry = open_registry(settings)
    # Demo keys only into a new embedded data dir: never into a shared registry, never
    # into one that held a tenant or key (``seed_demo``); gateways warn while they work.
    if not settings.postgres_url and registry.seed_demo():
        log.info("first start: created the README's demo tenants and keys")
    elif not registry.tenants():
        log.warning("the registry has no tenant yet: create one with `headway tenants add NAME`")
    if settings.worker.backend == "onnx":
        _import_models_apart(settings, registry, model or [])
    elif model:
        typer.echo("--model needs the onnx backend", err=True)
        raise typer.Exit(2)
    else:  # known before any worker runs: without prewarm, a pool's first request starts it
        synthetic = settings.worker.synthetic
        registry.add_model(
            synthetic_record(synthetic), synthetic_aliases(synthetic), actor=Actor("cli:up")
        )
    postgres_urls = None
    if settings.postgres_url and settings.postgres_roles.up:
        postgres_urls = _component_roles(settings.postgres_url, settings.postgres_roles.prefix)
        # The children's config names the least of the roles; each is given its own.
        settings = settings.model_copy(update={"postgres_url": postgres_urls["worker"]})
    with tls_files_checked():
        run_config = write_run_config(settings)
    try:
        with tls_files_checked():
            supervisor = Supervisor(settings, run_config, postgres_urls=postgres_urls)
        code = supervisor.run()
    finally:
        run_config.unlink(missing_ok=True)
    raise typer.Exit(code)


def _import_models_apart(settings: Settings, registry: RegistryStore, paths: list[Path]) -> None:
    """The default model (unless stored) and ``paths`` into the store and the registry, in
    a forked process of its own: ``up`` lives as long as the system, and would keep for
    good what an import allocates (docs/benchmarks.md, issue 30's first steps). Forked, not
    spawned: nothing to import again, and no resource tracker left running beside ``up``.
    Nothing to import: no process."""
    import multiprocessing

    from headway.catalog import stored_default_model

    stored = stored_default_model(settings, registry)
    if stored is not None and not paths:
        log.info("model %s version %s", stored.name, stored.version[:12])
        return
    child = multiprocessing.get_context("fork").Process(
        target=_import_models, args=(settings, paths, debugging()), name="headway-up-import"
    )
    child.start()
    child.join()
    if child.exitcode:
        raise typer.Exit(child.exitcode)


def _import_models(settings: Settings, paths: list[Path], debug: bool) -> None:
    """``_import_models_apart``'s child: a failure is one line, as the command's would be
    (``--debug``: its traceback)."""
    import sys

    from headway.catalog import ensure_default_model
    from headway.cli.failures import report
    from headway.registry.open import open_registry

    try:
        registry = open_registry(settings)
        try:
            record = ensure_default_model(settings, registry)
            log.info("model %s version %s", record.name, record.version[:12])
            _bring_models(settings, registry, paths)
        finally:
            registry.close()
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            raise
        sys.exit(report(exc))


def _bring_models(settings: Settings, registry: RegistryStore, paths: list[Path]) -> None:
    """Import each of ``paths`` (a no-op for bytes already stored) and alias it by its name;
    say which alias to ask for, and what it lacks to be invoiced."""
    from headway.catalog import register
    from headway.cli.catalog import warn_unpriced
    from headway.models.errors import ModelError
    from headway.models.intake import ImportOptions, import_path
    from headway.models.store import ModelStore
    from headway.registry.model import Actor

    store = ModelStore(settings.model_root)
    for path in paths:
        try:
            imported = import_path(store, path, ImportOptions())
        except ModelError as exc:
            typer.echo(f"--model {path}: {exc}", err=True)
            raise typer.Exit(1) from exc
        manifest = imported.model.manifest
        register(registry, imported.model, (manifest.name,), Actor("cli:up"))
        route = "/v1/rerank" if manifest.kind == "cross-encoder" else "/v1/embeddings"
        typer.echo(
            f"serving {path} as model {manifest.name!r} ({manifest.kind}, version "
            f'{imported.model.version[:12]}): {route} with "model": "{manifest.name}"'
        )
        for note in imported.assumed:
            typer.echo(f"assumed: {note}", err=True)
        warn_unpriced(settings, (manifest.name,))


def _component_roles(owner_url: str, prefix: str) -> dict[Component, str]:
    """Each component's own Postgres URL (``headway db roles`` with fresh passwords);
    exits 1 if the owner's URL may not make the roles."""
    from headway.db_setup import DbSetupError, fresh_component_urls

    try:
        urls = fresh_component_urls(owner_url, prefix)
    except DbSetupError as exc:
        typer.echo(
            f"cannot make the components' Postgres roles: {exc}"
            " (or set postgres_roles.up = false to run every process as postgres_url)",
            err=True,
        )
        raise typer.Exit(1) from exc
    log.info("each process connects to Postgres as its own role (%s_*)", prefix)
    return urls


def gateway(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    gateway_id: Annotated[
        str | None,
        typer.Option("--id", help="Names its usage outbox; keep it across restarts."),
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address for clients.")] = None,
    port: Annotated[int | None, typer.Option(help="Port for clients (default 8080).")] = None,
    fd: FdOpt = None,
    ops_host: Annotated[
        str | None, typer.Option(help="Address for /metrics and probes (operators only).")
    ] = None,
    ops_port: Annotated[
        int | None, typer.Option(help="Port for /metrics and probes (default 9200).")
    ] = None,
    ops_fd: Annotated[
        int | None, typer.Option("--ops-fd", help="Serve /metrics on this inherited socket.")
    ] = None,
    embed_urls: Annotated[
        str | None, typer.Option(help="Comma-separated worker URLs of the embed pool.")
    ] = None,
    rerank_urls: Annotated[
        str | None, typer.Option(help="Comma-separated worker URLs of the rerank pool.")
    ] = None,
    embed_replicas: Annotated[
        str | None, typer.Option(hidden=True, help="The old name of --embed-urls.")
    ] = None,
    rerank_replicas: Annotated[
        str | None, typer.Option(hidden=True, help="The old name of --rerank-urls.")
    ] = None,
    embed_dns: Annotated[
        str | None, typer.Option(help="NAME:PORT whose A records are the embed pool.")
    ] = None,
    rerank_dns: Annotated[
        str | None, typer.Option(help="NAME:PORT whose A records are the rerank pool.")
    ] = None,
    dns_server: Annotated[
        str | None, typer.Option(help="HOST:PORT of the DNS server (default: the system's).")
    ] = None,
    admission: AdmissionOpt = None,
    redis_url: RedisOpt = None,
    cache_redis_url: CacheRedisOpt = None,
    nats_url: NatsOpt = None,
    postgres_url: PostgresOpt = None,
    log_level: LogLevelOpt = None,
    update_streams: UpdateStreamsOpt = False,
) -> None:
    """Run one gateway process.

    Examples:

      headway run gateway --config headway.toml
      headway run gateway --embed-urls http://10.0.0.5:9100,http://10.0.0.6:9100
      headway run gateway --embed-dns embed.headway.svc:9100 --redis-url redis://redis:6379/0
    """
    settings = settings_from(
        config,
        data_dir=data_dir,
        log_level=log_level,
        update_streams=update_streams,
        redis_url=redis_url,
        redis={"cache_url": cache_redis_url},
        nats_url=nats_url,
        postgres_url=postgres_url,
        gateway={
            "id": gateway_id,
            "host": host,
            "port": port,
            "ops_host": ops_host,
            "ops_port": ops_port,
            "admission": given(enabled=_on_off(admission)),
            "embed_replicas": _urls("--embed-urls", embed_urls, embed_replicas),
            "rerank_replicas": _urls("--rerank-urls", rerank_urls, rerank_replicas),
            "embed_dns": embed_dns,
            "rerank_dns": rerank_dns,
            "dns_server": dns_server,
        },
    )
    from headway.app.ops import build_ops_app
    from headway.app.process import build_gateway, wait_for_stores
    from headway.serve import OpsListener, serve
    from headway.tls.hops import public_server

    g = settings.gateway
    with tls_files_checked():
        ssl_context = public_server(settings.tls)
        app, service = build_gateway(settings, wait_for_stores(settings))
    ops = OpsListener(build_ops_app(service), g.ops_host, g.ops_port, ops_fd, g.ops_edge)
    serve(
        app,
        host=g.host,
        port=g.port,
        fd=fd,
        log_level=settings.log_level,
        drain=service.drain,
        drain_delay_s=g.drain_delay_s,
        ssl_context=ssl_context,
        edge=g.edge,
        metrics_registry=service.metrics.registry,
        ops=ops,
    )


def worker(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option()] = None,
    fd: FdOpt = None,
    pool: Annotated[str | None, typer.Option(help="embed or rerank.")] = None,
    backend: Annotated[str | None, typer.Option(help="onnx or synthetic.")] = None,
    model: Annotated[
        list[str] | None,
        typer.Option(help="Model alias or version to serve (repeat for several)."),
    ] = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Run one worker replica of a model pool."""
    settings = settings_from(
        config,
        data_dir=data_dir,
        log_level=log_level,
        worker={
            "host": host,
            "port": port,
            "pool": pool,
            "backend": backend,
            "models": tuple(model) if model else None,
        },
    )
    # The tokenizer's thread pool reads this once, on first use: a fixed, small
    # number of threads per worker, so replicas do not oversubscribe the cores.
    os.environ["RAYON_NUM_THREADS"] = str(settings.worker.tokenizer_threads)
    from headway.serve import serve
    from headway.tls.hops import internal_server
    from headway.worker.main import build_worker

    w = settings.worker
    with tls_files_checked():
        ssl_context = internal_server(settings.tls)
        app, service = build_worker(settings)
    serve(
        app,
        host=w.host,
        port=w.port,
        fd=fd,
        log_level=settings.log_level,
        drain=service.drain,
        drain_delay_s=w.drain_delay_s,
        ssl_context=ssl_context,
        edge=w.edge,
        metrics_registry=service.metrics.registry,
        # Only the roles that call workers: a certificate of the CA is not enough.
        tls_callers=frozenset(settings.tls.worker_callers) if ssl_context else None,
        tls_loopback_callers=frozenset(settings.tls.worker_loopback_callers),
    )
