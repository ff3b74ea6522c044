"""The ``headway`` command line: every component runnable on its own, or all at once."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from headway.settings import Settings, load_settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
models_app = typer.Typer(no_args_is_help=True, help="Import and list model versions.")
tenants_app = typer.Typer(no_args_is_help=True, help="Manage tenants and their API keys.")
app.add_typer(models_app, name="models")
app.add_typer(tenants_app, name="tenants")
bench_app = typer.Typer(no_args_is_help=True, help="Measure; results go to docs/benchmarks.md.")
app.add_typer(bench_app, name="bench")

log = logging.getLogger("headway")

ConfigOpt = Annotated[
    Path | None, typer.Option("--config", help="TOML or JSON settings file.", exists=True)
]
DataDirOpt = Annotated[
    Path | None, typer.Option("--data-dir", help="Registry, model store, run files.")
]
FdOpt = Annotated[int | None, typer.Option("--fd", help="Serve on this inherited socket.")]
LogLevelOpt = Annotated[str | None, typer.Option("--log-level", help="debug|info|warning|error")]
RedisOpt = Annotated[
    str | None,
    typer.Option(
        "--redis-url", help="Shared mode: quotas in Redis, e.g. redis://127.0.0.1:6379/0."
    ),
]
AdmissionOpt = Annotated[
    str | None, typer.Option("--admission", help="on (default) or off, to compare without it.")
]


def _on_off(value: str | None) -> bool | None:
    if value is None:
        return None
    if value not in ("on", "off"):
        raise typer.BadParameter("expected on or off", param_hint="--admission")
    return value == "on"


def _flags(**sections: dict[str, Any] | Any) -> dict[str, Any]:
    """Nested flag values, keeping only the flags that were given."""
    out: dict[str, Any] = {}
    for key, value in sections.items():
        if isinstance(value, dict):
            given = {k: v for k, v in value.items() if v is not None}
            if given:
                out[key] = given
        elif value is not None:
            out[key] = value
    return out


def _settings(config: Path | None, **sections: Any) -> Settings:
    try:
        settings = load_settings(config_file=config, flags=_flags(**sections))
    except (ValueError, OSError) as exc:
        typer.echo(f"invalid settings: {exc}", err=True)
        raise typer.Exit(2) from exc
    from headway.serve import configure_logging

    configure_logging(settings.log_level)
    return settings


def _urls(value: str | None) -> tuple[str, ...] | None:
    return tuple(u.strip() for u in value.split(",") if u.strip()) if value is not None else None


@app.command()
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
    redis_url: RedisOpt = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Run the whole system on this machine: gateway + workers, embedded defaults."""
    settings = _settings(
        config,
        data_dir=data_dir,
        log_level=log_level,
        redis_url=redis_url,
        gateway={"host": host, "port": port, "admission": _flags(enabled=_on_off(admission))},
        worker={"backend": backend},
        up={
            "embed_replicas": embed_replicas,
            "rerank_replicas": rerank_replicas,
            "gateways": gateways,
        },
    )
    from headway.catalog import ensure_default_model
    from headway.registry.sqlite import Registry
    from headway.supervisor import Supervisor, write_run_config

    registry = Registry(settings.registry_path)
    if registry.seed_demo():
        log.info("first start: created demo tenants (see README; replace them before exposing)")
    if settings.worker.backend == "onnx":
        record = ensure_default_model(settings, registry)
        log.info("model %s version %s", record.name, record.version[:12])
    run_config = write_run_config(settings)
    try:
        code = Supervisor(settings, run_config).run()
    finally:
        run_config.unlink(missing_ok=True)
    raise typer.Exit(code)


@app.command()
def gateway(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option()] = None,
    fd: FdOpt = None,
    embed_replicas: Annotated[
        str | None, typer.Option(help="Comma-separated worker URLs of the embed pool.")
    ] = None,
    rerank_replicas: Annotated[
        str | None, typer.Option(help="Comma-separated worker URLs of the rerank pool.")
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
    log_level: LogLevelOpt = None,
) -> None:
    """Run one gateway process."""
    settings = _settings(
        config,
        data_dir=data_dir,
        log_level=log_level,
        redis_url=redis_url,
        gateway={
            "host": host,
            "port": port,
            "admission": _flags(enabled=_on_off(admission)),
            "embed_replicas": _urls(embed_replicas),
            "rerank_replicas": _urls(rerank_replicas),
            "embed_dns": embed_dns,
            "rerank_dns": rerank_dns,
            "dns_server": dns_server,
        },
    )
    from headway.gateway.main import build_gateway
    from headway.serve import serve

    g = settings.gateway
    app, service = build_gateway(settings)
    serve(
        app,
        host=g.host,
        port=g.port,
        fd=fd,
        log_level=settings.log_level,
        drain=service.drain,
        drain_delay_s=g.drain_delay_s,
    )


@app.command()
def worker(
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[int | None, typer.Option()] = None,
    fd: FdOpt = None,
    pool: Annotated[str | None, typer.Option(help="embed or rerank.")] = None,
    backend: Annotated[str | None, typer.Option(help="onnx or synthetic.")] = None,
    model: Annotated[str | None, typer.Option(help="Model alias or version.")] = None,
    log_level: LogLevelOpt = None,
) -> None:
    """Run one worker replica of a model pool."""
    settings = _settings(
        config,
        data_dir=data_dir,
        log_level=log_level,
        worker={"host": host, "port": port, "pool": pool, "backend": backend, "model": model},
    )
    # The tokenizer's thread pool reads this once, on first use: a fixed, small
    # number of threads per worker, so replicas do not oversubscribe the cores.
    os.environ["RAYON_NUM_THREADS"] = str(settings.worker.tokenizer_threads)
    from headway.serve import serve
    from headway.worker.main import build_worker

    w = settings.worker
    app, service = build_worker(settings)
    serve(
        app,
        host=w.host,
        port=w.port,
        fd=fd,
        log_level=settings.log_level,
        drain=service.drain,
        drain_delay_s=w.drain_delay_s,
    )


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
    settings = _settings(config, data_dir=data_dir)
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
    settings = _settings(config, data_dir=data_dir)
    from headway.registry.sqlite import Registry

    for record, aliases in Registry(settings.registry_path).models():
        typer.echo(
            f"{record.version}  {record.name}  {record.kind}  dims={record.dimensions}  "
            f"{record.quantization}  aliases: {', '.join(aliases) or '-'}"
        )


@tenants_app.command("add")
def tenants_add(
    name: str,
    tier: Annotated[str, typer.Option(help="interactive or batch.")] = "interactive",
    rate: Annotated[float | None, typer.Option(help="Quota refill, texts per second.")] = None,
    burst: Annotated[float | None, typer.Option(help="Quota bucket size, texts.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Create a tenant and print its API key (shown once, stored only as a hash)."""
    settings = _settings(config, data_dir=data_dir)
    from headway.registry.model import TIERS
    from headway.registry.sqlite import Registry, RegistryError

    if tier not in TIERS:
        typer.echo(f"--tier must be one of {', '.join(TIERS)}", err=True)
        raise typer.Exit(2)
    if (rate is not None and rate <= 0) or (burst is not None and burst <= 0):
        typer.echo("--rate and --burst must be positive", err=True)
        raise typer.Exit(2)
    try:
        tenant, key = Registry(settings.registry_path).add_tenant(
            name,
            tier,
            rate_texts_per_s=rate,
            burst_texts=burst,
        )
    except RegistryError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"tenant {tenant.name} ({tenant.tier}) created; API key (shown once):")
    typer.echo(key)


@tenants_app.command("set")
def tenants_set(
    name: str,
    tier: Annotated[str | None, typer.Option(help="interactive or batch.")] = None,
    rate: Annotated[float | None, typer.Option(help="Quota refill, texts per second.")] = None,
    burst: Annotated[float | None, typer.Option(help="Quota bucket size, texts.")] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Change a tenant's tier or quota (running gateways pick it up within seconds)."""
    settings = _settings(config, data_dir=data_dir)
    from headway.registry.model import TIERS
    from headway.registry.sqlite import Registry, RegistryError

    if tier is not None and tier not in TIERS:
        typer.echo(f"--tier must be one of {', '.join(TIERS)}", err=True)
        raise typer.Exit(2)
    if (rate is not None and rate <= 0) or (burst is not None and burst <= 0):
        typer.echo("--rate and --burst must be positive", err=True)
        raise typer.Exit(2)
    try:
        tenant = Registry(settings.registry_path).update_tenant(
            name,
            tier=tier,
            rate_texts_per_s=rate,
            burst_texts=burst,
        )
    except RegistryError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    typer.echo(
        f"{tenant.name}  {tenant.tier}  rate={tenant.rate_texts_per_s:g}/s  "
        f"burst={tenant.burst_texts:g}"
    )


@tenants_app.command("list")
def tenants_list(config: ConfigOpt = None, data_dir: DataDirOpt = None) -> None:
    """Tenants with their tier and quota."""
    settings = _settings(config, data_dir=data_dir)
    from headway.registry.sqlite import Registry

    for tenant in Registry(settings.registry_path).tenants():
        typer.echo(
            f"{tenant.name}  {tenant.tier}  rate={tenant.rate_texts_per_s:g}/s  "
            f"burst={tenant.burst_texts:g}"
        )


@app.command()
def loadgen(
    url: Annotated[str, typer.Option(help="Gateway base URL.")] = "http://127.0.0.1:8080",
    spec: Annotated[
        Path | None, typer.Option(help="TOML/JSON load spec (classes, rate steps).", exists=True)
    ] = None,
    rate: Annotated[float, typer.Option(help="Requests per second (without --spec).")] = 50.0,
    duration: Annotated[float, typer.Option(help="Seconds (without --spec).")] = 10.0,
    key: Annotated[str, typer.Option(help="API key.")] = "demo-key-search-app",
    model: Annotated[str, typer.Option(help="Model name.")] = "all-MiniLM-L6-v2",
    texts: Annotated[str, typer.Option(help="Texts per request: N or MIN-MAX.")] = "1",
    words: Annotated[str, typer.Option(help="Words per text: N or MIN-MAX.")] = "8-40",
    timeout_ms: Annotated[int, typer.Option(help="X-Timeout-Ms, the deadline.")] = 1000,
    arrivals: Annotated[str, typer.Option(help="fixed or poisson.")] = "poisson",
    seed: Annotated[int, typer.Option(help="Seed for arrivals and texts.")] = 0,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the report as JSON.")
    ] = None,
) -> None:
    """Open-loop load: requests leave on schedule whatever the latency (no coordinated omission)."""
    import json

    from headway.loadgen import (
        LoadgenError,
        load_spec,
        parse_range,
        render_text,
        run_load_sync,
        spec_from_args,
        to_json,
    )

    try:
        load = (
            load_spec(spec)
            if spec is not None
            else spec_from_args(
                rate=rate,
                duration=duration,
                key=key,
                model=model,
                texts=parse_range(texts),
                words=parse_range(words),
                timeout_ms=timeout_ms,
                arrivals=arrivals,
                seed=seed,
            )
        )
    except LoadgenError as exc:
        typer.echo(f"invalid load: {exc}", err=True)
        raise typer.Exit(2) from exc
    timeout_s = max(c.timeout_ms for c in load.workload.classes) / 1000 + 1.0
    result = run_load_sync(url, load.workload, load.schedule, client_timeout_s=timeout_s)
    typer.echo(render_text(result.report))
    if json_out is not None:
        json_out.write_text(json.dumps(to_json(result.report), indent=2), encoding="utf-8")


BenchOut = Annotated[
    Path | None, typer.Option("--out", help="Markdown file to update (default: print only).")
]
BenchSeconds = Annotated[float, typer.Option(help="Seconds per measured point.")]


def _publish(section: str, name: str, out: Path | None) -> None:
    from headway.bench.stats import write_section

    if out is not None:
        write_section(out, name, section)
    typer.echo(section)


@bench_app.command("spine")
def bench_spine(
    seconds: BenchSeconds = 10.0,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Raw ONNX Runtime vs through the worker vs through the gateway; gateway overhead."""
    settings = _settings(config, data_dir=data_dir)
    from headway.bench.spine import run_spine_bench

    with _bench_failure_exits():
        typer.echo(run_spine_bench(settings.data_dir, seconds=seconds, out=out))


@bench_app.command("int8")
def bench_int8(
    seconds: BenchSeconds = 10.0,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """fp32 vs int8 of the default model: embedding agreement and raw speed."""
    settings = _settings(config, data_dir=data_dir)
    from headway.bench.int8 import SECTION, run_int8_bench
    from headway.bench.stats import command_line

    section = run_int8_bench(settings.data_dir, seconds=seconds, command=command_line(sys.argv))
    _publish(section, SECTION, out)


@bench_app.command("quota")
def bench_quota(
    seconds: BenchSeconds = 10.0,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """CPU per quota check (embedded, Redis); over-admission of 4 gateways on one Redis."""
    settings = _settings(config, data_dir=data_dir)
    from headway.bench.quota import SECTION, run_quota_bench
    from headway.bench.stats import command_line

    section = run_quota_bench(settings.data_dir, seconds=seconds, command=command_line(sys.argv))
    _publish(section, SECTION, out)


@bench_app.command("overload")
def bench_overload(
    seconds: Annotated[
        float, typer.Option(help="Seconds per measured point (30 for the docs).")
    ] = 30.0,
    out: BenchOut = None,
    real_model: Annotated[bool, typer.Option(help="Include the real-model scenario.")] = True,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Overload 2x/5x/10x, noisy neighbour, step; each with and without admission control."""
    settings = _settings(config, data_dir=data_dir)
    from headway.bench.host import Machine
    from headway.bench.overload import run_scenarios
    from headway.bench.overload_report import SECTION, render
    from headway.bench.stats import command_line

    machine = Machine.here()
    with _bench_failure_exits():
        results = run_scenarios(settings.data_dir, seconds=seconds, real_model=real_model)
    _publish(render(results, machine, command_line(sys.argv), seconds), SECTION, out)


@bench_app.command("routing")
def bench_routing(
    seconds: Annotated[
        float, typer.Option(help="Seconds per open-loop run (30 for the docs).")
    ] = 30.0,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """A replica killed at 60% load; scale-out 1/2/4; fan-out of 128 texts; hedging."""
    settings = _settings(config, data_dir=data_dir)
    from headway.bench.host import Machine
    from headway.bench.routing import run_scenarios
    from headway.bench.routing_report import SECTION, render
    from headway.bench.stats import command_line

    machine = Machine.here()
    with _bench_failure_exits():
        results = run_scenarios(settings.data_dir, seconds=seconds)
    _publish(render(results, machine, command_line(sys.argv), seconds), SECTION, out)


@contextmanager
def _bench_failure_exits() -> Iterator[None]:
    """A benchmark that cannot run (a process not ready, say) exits 1 with the reason."""
    from headway.bench.errors import BenchError

    try:
        yield
    except BenchError as exc:
        typer.echo(f"bench failed: {exc}", err=True)
        raise typer.Exit(1) from exc


def main() -> None:
    app(prog_name="headway")


if __name__ == "__main__":
    main()
