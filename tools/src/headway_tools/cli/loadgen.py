"""``headway loadgen``: open-loop load on a gateway, from flags, a load spec or a trace.

``headway loadgen trace-from-usage`` turns the ledger's usage rows into a trace.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from headway.cli.options import ConfigOpt, DataDirOpt, settings_from

if TYPE_CHECKING:
    from headway_tools.loadgen.plan import Plan

loadgen_app = typer.Typer(
    invoke_without_command=True,
    help="Open-loop load on a gateway, from flags, a load spec or a replayed trace.",
)


@loadgen_app.callback()
def loadgen(
    ctx: typer.Context,
    url: Annotated[str, typer.Option(help="Gateway base URL.")] = "http://127.0.0.1:8080",
    spec: Annotated[
        Path | None, typer.Option(help="TOML/JSON load spec (classes, rate steps).", exists=True)
    ] = None,
    replay: Annotated[
        Path | None, typer.Option(help="Replay this JSONL trace, each request at its offset.")
    ] = None,
    speed: Annotated[
        float, typer.Option(help="With --replay: offsets ÷ this (2 sends it in half the time).")
    ] = 1.0,
    key: Annotated[
        list[str] | None,
        typer.Option(
            help="API key (default demo-key-search-app); with --replay, TENANT=KEY, repeatable."
        ),
    ] = None,
    keys: Annotated[
        Path | None,
        typer.Option(help="With --replay: a TOML/JSON table of tenant = key.", exists=True),
    ] = None,
    record: Annotated[
        Path | None, typer.Option(help="Write the trace of what this run sends (JSONL).")
    ] = None,
    rate: Annotated[float, typer.Option(help="Requests per second (without --spec).")] = 50.0,
    duration: Annotated[float, typer.Option(help="Seconds (without --spec).")] = 10.0,
    model: Annotated[
        str | None,
        typer.Option(help="Model name (default all-MiniLM-L6-v2); replaces a replayed trace's."),
    ] = None,
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
    if ctx.invoked_subcommand is not None:
        return
    import json

    from headway_tools.loadgen import LoadgenError, render_text, to_json
    from headway_tools.loadgen.replay import trace_of
    from headway_tools.loadgen.run import run_plan_sync
    from headway_tools.loadgen.trace import write_trace

    try:
        if replay is not None:
            if spec is not None:
                raise typer.BadParameter("--replay and --spec are two loads: give one")
            plan = _replayed(replay, key or [], keys, speed=speed, seed=seed, model=model)
        else:
            if keys is not None or len(key or []) > 1 or speed != 1.0:
                raise typer.BadParameter(
                    "without --replay, --key is one API key, and --keys and --speed do not apply"
                )
            plan = _synthetic(
                spec,
                rate=rate,
                duration=duration,
                key=(key or ["demo-key-search-app"])[0],
                model=model,
                texts=texts,
                words=words,
                timeout_ms=timeout_ms,
                arrivals=arrivals,
                seed=seed,
            )
        if record is not None:
            write_trace(record, trace_of(plan))
    except LoadgenError as exc:
        typer.echo(f"invalid load: {exc}", err=True)
        raise typer.Exit(2) from exc
    longest_ms = max((r.timeout_ms for r in plan.requests), default=timeout_ms)
    result = run_plan_sync(url, plan, client_timeout_s=longest_ms / 1000 + 1.0)
    typer.echo(render_text(result.report))
    if json_out is not None:
        json_out.write_text(json.dumps(to_json(result.report), indent=2), encoding="utf-8")


def _replayed(
    trace_path: Path,
    pairs: list[str],
    keys_path: Path | None,
    *,
    speed: float,
    seed: int,
    model: str | None,
) -> Plan:
    from headway_tools.loadgen.replay import load_keys, parse_keys, plan_trace
    from headway_tools.loadgen.trace import load_trace

    keys = load_keys(keys_path) if keys_path is not None else {}
    keys.update(parse_keys(pairs))  # a flag overrides the file
    return plan_trace(load_trace(trace_path), keys, speed=speed, seed=seed, model=model)


def _synthetic(
    spec: Path | None,
    *,
    rate: float,
    duration: float,
    key: str,
    model: str | None,
    texts: str,
    words: str,
    timeout_ms: int,
    arrivals: str,
    seed: int,
) -> Plan:
    from headway_tools.loadgen import load_spec, parse_range, spec_from_args
    from headway_tools.loadgen.plan import plan_schedule
    from headway_tools.loadgen.workload import DEFAULT_MODEL

    load = (
        load_spec(spec)
        if spec is not None
        else spec_from_args(
            rate=rate,
            duration=duration,
            key=key,
            model=model or DEFAULT_MODEL,
            texts=parse_range(texts),
            words=parse_range(words),
            timeout_ms=timeout_ms,
            arrivals=arrivals,
            seed=seed,
        )
    )
    return plan_schedule(load.workload, load.schedule)


@loadgen_app.command("trace-from-usage")
def trace_from_usage(
    out: Annotated[Path, typer.Option(help="Where to write the trace (JSONL).")],
    ledger: Annotated[
        Path | None,
        typer.Option(help="The SQLite ledger (default: the data dir's ledger.sqlite3)."),
    ] = None,
    start: Annotated[
        str | None, typer.Option(help="Arrivals from: 2026-11-01 or 2026-11-01T10:00:00Z.")
    ] = None,
    end: Annotated[str | None, typer.Option(help="Arrivals before this (same forms).")] = None,
    tenant: Annotated[
        list[str] | None, typer.Option(help="Only this tenant's requests (repeatable).")
    ] = None,
    interactive_timeout_ms: Annotated[
        int, typer.Option(help="X-Timeout-Ms for interactive-tier requests.")
    ] = 1000,
    batch_timeout_ms: Annotated[
        int, typer.Option(help="X-Timeout-Ms for batch-tier requests.")
    ] = 10_000,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """A replayable trace of the requests the ledger metered.

    Text lengths are spread evenly from each request's tokens, deadlines are set per
    tier, and requests refused before their quota was charged were never metered.
    """
    from headway_tools.loadgen import LoadgenError
    from headway_tools.loadgen.trace import write_trace
    from headway_tools.loadgen.usage_trace import trace_from_ledger

    if ledger is None:
        settings = settings_from(config, data_dir=data_dir)
        if settings.postgres_url:
            typer.echo("trace-from-usage reads the embedded SQLite ledger only", err=True)
            raise typer.Exit(2)
        ledger = settings.ledger_path
    try:
        found = trace_from_ledger(
            ledger,
            start=_unix_time(start, "--start") if start else 0.0,
            end=_unix_time(end, "--end") if end else float("inf"),
            tenants=tenant or (),
            timeouts_ms={"interactive": interactive_timeout_ms, "batch": batch_timeout_ms},
        )
    except LoadgenError as exc:
        typer.echo(f"no trace: {exc}", err=True)
        raise typer.Exit(2) from exc
    write_trace(out, found.trace)
    skipped = "".join(f", skipped {n} ({why})" for why, n in sorted(found.skipped.items()))
    typer.echo(
        f"{out}: {len(found.trace.requests)} requests over {found.trace.duration_s:g} s"
        f" from {found.rows} usage rows{skipped}"
    )


def _unix_time(value: str, name: str) -> float:
    """A date (midnight UTC) or an ISO 8601 time (UTC unless it says otherwise)."""
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{name}: expected a date or an ISO 8601 time") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()
