"""The Markdown section of ``headway bench coldstart``."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from headway_tools.bench.coldstart import DEADLINE_MS, ColdStartResults, Trial
from headway_tools.bench.host import Machine
from headway_tools.bench.stats import markdown_table

SECTION = "coldstart"

ROWS: Sequence[tuple[str, Callable[[Trial], float]]] = (
    ("first request, pool at zero (fresh `headway up`)", lambda t: t.cold_s),
    ("… of which held at the gateway", lambda t: t.held_s),
    ("… of which the worker loaded and warmed the model", lambda t: t.load_s),
    ("warm request right after", lambda t: t.warm_s),
    ("first request after an idle stop", lambda t: t.again_cold_s),
    ("… of which held at the gateway", lambda t: t.again_held_s),
    ("… of which the worker loaded and warmed the model", lambda t: t.again_load_s),
    ("warm request right after", lambda t: t.again_warm_s),
)


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}"


def render(results: ColdStartResults, machine: Machine, command: str) -> str:
    rows = []
    for label, value in ROWS:
        samples = [value(trial) for trial in results.trials]
        rows.append([label, _ms(statistics.median(samples)), _ms(min(samples)), _ms(max(samples))])
    trials = len(results.trials)
    return "\n\n".join(
        [
            "## Cold start: a pool at zero replicas",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; Python {machine.python}; "
            f"1-minute load average {machine.load_average:.2f} at start.",
            f"Each of {trials} trials ran `headway up --no-prewarm --idle-stop-s "
            f"{results.idle_stop_s:g}` with the real model "
            f"(`{results.model_version[:12]}`, fp32), one embed worker, no rerank pool. "
            "The first `/v1/embeddings` request (2 texts) went out once `up` said it was "
            f"ready, with no worker running, and `X-Timeout-Ms: {DEADLINE_MS}`: the gateway "
            "held it while its wake hook had the supervisor start the worker, which loaded "
            "and warmed the model. A warm request followed. Then, once the idle stop had "
            "stopped the worker (its process gone), the same two again. Time to the answer "
            "as the client saw it, how long the gateway held the first request "
            "(`headway_cold_start_wait_seconds`) and how much of that the worker spent "
            "loading and warming the model (its `worker ready` log line, to 100 ms; the rest "
            "of the hold is its process starting, the interpreter and its imports); "
            "milliseconds.",
            markdown_table(["request", "median ms", "min ms", "max ms"], rows, "lrrr"),
        ]
    )
