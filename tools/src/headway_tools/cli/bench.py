"""``headway bench …``: each benchmark measures, renders its section, and is published here.

A benchmark's ``run_NAME_bench`` returns its results and its ``render`` the Markdown
section; a command only wires them: the machine is read before the run (its load
average at start), a benchmark that cannot run exits 1 with the reason, and the
section is printed and, with ``--out``, written between its markers in that file.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from headway.cli.options import ConfigOpt, DataDirOpt, settings_from

if TYPE_CHECKING:
    from headway_tools.bench.host import Machine

bench_app = typer.Typer(no_args_is_help=True, help="Measure; results go to docs/benchmarks.md.")

BenchOut = Annotated[
    Path | None, typer.Option("--out", help="Markdown file to update (default: print only).")
]
BenchSeconds = Annotated[float, typer.Option(help="Seconds per measured point.")]


@contextmanager
def _running() -> Iterator[Machine]:
    """The machine, read before the benchmark; a benchmark that cannot run (a process not
    ready, say) exits 1 with the reason."""
    from headway_tools.bench.errors import BenchError
    from headway_tools.bench.host import Machine

    try:
        yield Machine.here()
    except BenchError as exc:
        typer.echo(f"bench failed: {exc}", err=True)
        raise typer.Exit(1) from exc


def _publish(section: str, name: str, out: Path | None) -> None:
    from headway_tools.bench.stats import write_section

    if out is not None:
        write_section(out, name, section)
    typer.echo(section)


def _command() -> str:
    from headway_tools.bench.stats import command_line

    return command_line(sys.argv)


@dataclass(frozen=True, slots=True)
class _Standard:
    """A benchmark that takes only its seconds: ``run(data_dir, seconds=…)``, then its
    report module's ``render(results, machine, command, seconds)`` and ``SECTION``."""

    name: str
    summary: str
    run: str
    """``module:function``, imported when the command runs (the CLI starts fast)."""
    report: str
    seconds: float = 10.0
    seconds_help: str = "Seconds per measured point."


_OPEN_LOOP = "Seconds per open-loop run (30 for the docs)."
STANDARD = [
    _Standard(
        "spine",
        "Raw ONNX Runtime vs through the worker vs through the gateway; gateway overhead.",
        "headway_tools.bench.spine:run_spine_bench",
        "headway_tools.bench.spine_report",
    ),
    _Standard(
        "batching",
        "Saturation throughput of one synthetic replica at max batch 1, 8 and 32 vs its bound.",
        "headway_tools.bench.batching:run_batching_bench",
        "headway_tools.bench.batching_report",
    ),
    _Standard(
        "path",
        "The gateway's own CPU per request, in process, against a replica that answers at once.",
        "headway_tools.bench.path:run_path_bench",
        "headway_tools.bench.path",
    ),
    _Standard(
        "billing",
        "Metering: the durable write's latency, its CPU, consumer throughput, billing lag.",
        "headway_tools.bench.billing:run_billing_bench",
        "headway_tools.bench.billing_report",
    ),
    _Standard(
        "int8",
        "fp32 vs int8 of the default model: embedding agreement and raw speed.",
        "headway_tools.bench.int8:run_int8_bench",
        "headway_tools.bench.int8",
    ),
    _Standard(
        "quota",
        "CPU per quota check (embedded, Redis); over-admission of 4 gateways on one Redis.",
        "headway_tools.bench.quota:run_quota_bench",
        "headway_tools.bench.quota",
    ),
    _Standard(
        "routing",
        "A replica killed at 60% load; scale-out 1/2/4; fan-out of 128 texts; hedging.",
        "headway_tools.bench.routing:run_routing_bench",
        "headway_tools.bench.routing_report",
        30.0,
        _OPEN_LOOP,
    ),
    _Standard(
        "cache",
        "Goodput at 4x capacity on Zipf-repeated texts, without and with the results cache.",
        "headway_tools.bench.cache:run_cache_bench",
        "headway_tools.bench.cache_report",
        30.0,
        _OPEN_LOOP,
    ),
]


def _add_standard(bench: _Standard) -> None:
    def command(
        seconds: float = typer.Option(bench.seconds, help=bench.seconds_help),
        out: BenchOut = None,
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
    ) -> None:
        settings = settings_from(config, data_dir=data_dir)
        module, _, function = bench.run.partition(":")
        run = getattr(importlib.import_module(module), function)
        report = importlib.import_module(bench.report)
        with _running() as machine:
            results = run(settings.data_dir, seconds=seconds)
        _publish(report.render(results, machine, _command(), seconds), report.SECTION, out)

    command.__doc__ = bench.summary
    bench_app.command(bench.name)(command)


for _bench in STANDARD:
    _add_standard(_bench)


@bench_app.command("tracing")
def bench_tracing(
    seconds: BenchSeconds = 30.0,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Gateway CPU per request and p99 with tracing off, on at 1% and on at 100% sampling."""
    settings_from(config, data_dir=data_dir)
    from headway_tools.bench.tracing import SECTION, render, run_tracing_bench

    with _running() as machine:
        results = run_tracing_bench(seconds=seconds)
    _publish(render(results, machine, _command(), seconds), SECTION, out)


@bench_app.command("rollout")
def bench_rollout(
    seconds: BenchSeconds = 20.0,
    interval: Annotated[float, typer.Option(help="The bad canary's analysis interval, s.")] = 5.0,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """A bad canary's time to rollback, shadow traffic's cost, a split reaching 3 gateways."""
    settings = settings_from(config, data_dir=data_dir)
    from headway_tools.bench.rollout import run_rollout_bench
    from headway_tools.bench.rollout_report import SECTION, render

    with _running() as machine:
        results = run_rollout_bench(settings.data_dir, seconds=seconds, interval_s=interval)
    _publish(render(results, machine, _command()), SECTION, out)


@bench_app.command("profile")
def bench_profile(
    seconds: Annotated[float, typer.Option(help="Seconds of load to sample.")] = 20.0,
    out_dir: Annotated[
        Path, typer.Option(help="Where gateway.svg and gateway.folded are written.")
    ] = Path("docs/profiles"),
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """The gateway under 1-text load, sampled by py-spy: a flame graph and collapsed stacks."""
    settings = settings_from(config, data_dir=data_dir)
    from headway_tools.bench.profile import run_profile

    profile = run_profile(settings.data_dir, out_dir, seconds=seconds)
    cpu = ", ".join(f"{name} {us:,.0f} µs" for name, us in profile.cpu_us.items())
    typer.echo(f"{profile.requests_per_s:,.0f} requests/s; CPU per request: {cpu}")
    for path in profile.files:
        typer.echo(f"wrote {path}")


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
    settings = settings_from(config, data_dir=data_dir)
    from headway_tools.bench.overload import run_overload_bench
    from headway_tools.bench.overload_report import SECTION, render

    with _running() as machine:
        results = run_overload_bench(settings.data_dir, seconds=seconds, real_model=real_model)
    _publish(render(results, machine, _command(), seconds), SECTION, out)


@bench_app.command("batches")
def bench_batches(
    lines: Annotated[
        int, typer.Option(min=1, help="Lines of 4 texts in the throughput batch.")
    ] = 2000,
    seconds: Annotated[
        float, typer.Option(help="Seconds per interactive open-loop run (30 for the docs).")
    ] = 30.0,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Batch API vs synchronous throughput; the interactive p95 beside a running batch."""
    settings = settings_from(config, data_dir=data_dir)
    from headway_tools.bench.batches import run_batches_bench
    from headway_tools.bench.batches_report import SECTION, render

    with _running() as machine:
        results = run_batches_bench(settings.data_dir, lines=lines, seconds=seconds)
    _publish(render(results, machine, _command()), SECTION, out)


@bench_app.command("coldstart")
def bench_coldstart(
    trials: Annotated[int, typer.Option(min=1, help="Fresh `headway up` runs measured.")] = 5,
    idle_stop_s: Annotated[
        float, typer.Option(min=0.5, help="The runs' --idle-stop-s (the second cold start).")
    ] = 3.0,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """A pool at zero: its first request's time to answer, fresh and after an idle stop."""
    settings = settings_from(config, data_dir=data_dir)
    from headway_tools.bench.coldstart import run_coldstart_bench
    from headway_tools.bench.coldstart_report import SECTION, render

    with _running() as machine:
        results = run_coldstart_bench(settings.data_dir, trials=trials, idle_stop_s=idle_stop_s)
    _publish(render(results, machine, _command()), SECTION, out)


@bench_app.command("isolation")
def bench_isolation(
    attack: Annotated[
        list[str] | None,
        typer.Option(help="Only these attacks, one run each (default: each, then all at once)."),
    ] = None,
    shared: Annotated[
        bool,
        typer.Option("--shared", help="On throw-away Redis, Postgres and NATS, with two gateways."),
    ] = False,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """A victim tenant's interactive figures and batch time, alone and beside each attack."""
    settings = settings_from(config, data_dir=data_dir)
    from headway_tools.bench.isolation import run_isolation_bench
    from headway_tools.bench.isolation_report import SECTION, SHARED_SECTION, render

    plan = [[name] for name in attack] if attack else None
    with _running() as machine:
        results = run_isolation_bench(settings.data_dir, plan, shared=shared)
    _publish(render(results, machine, _command()), SHARED_SECTION if shared else SECTION, out)


@bench_app.command("batch-commits")
def bench_batch_commits(
    rounds: Annotated[int, typer.Option(min=1, help="Rounds, the settings interleaved.")] = 20,
    per_round: Annotated[int, typer.Option(min=1, help="Commits per call and round.")] = 50,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """The embedded batch store's commit with synchronous=FULL (durable) against NORMAL."""
    settings = settings_from(config, data_dir=data_dir)
    from headway_tools.bench.batch_commits import SECTION, render, run_batch_commits_bench

    with _running() as machine:
        results = run_batch_commits_bench(settings.data_dir, rounds=rounds, per_round=per_round)
    _publish(render(results, machine, _command()), SECTION, out)


@bench_app.command("chaos")
def bench_chaos(
    chaos_s: Annotated[
        float, typer.Option(help="Seconds of chaos (and interactive load).")
    ] = 120.0,
    lines: Annotated[int, typer.Option(help="Lines of the batch.")] = 5000,
    seed: Annotated[int, typer.Option(help="The chaos plan's seed: the same one replays it.")] = 0,
    rate: Annotated[float, typer.Option(help="Requests/s of each unbound tenant.")] = 8.0,
    out: BenchOut = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """The whole shared stack under a seeded kill/restart loop: every 200 billed once, every
    batch line once, no quota over-admission; exits 1 if anything did not hold."""
    import time

    from headway_tools.bench.chaos import ChaosSpec, run_chaos
    from headway_tools.bench.chaos_report import SECTION, render

    settings = settings_from(config, data_dir=data_dir)
    spec = ChaosSpec(chaos_s=chaos_s, lines=lines, seed=seed, rate_rps=rate)
    workdir = settings.data_dir / f"chaos-{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    with _running() as machine:
        report = run_chaos(spec, workdir)
    _publish(render(report, machine, _command()), SECTION, out)
    if not report.ok:
        typer.echo(report.describe(), err=True)
        typer.echo(f"logs in {workdir / 'logs'}", err=True)
        raise typer.Exit(1)
