"""``headway loadgen``: open-loop load on a gateway, from flags or a load spec."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


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
