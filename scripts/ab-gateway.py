#!/usr/bin/env python3
"""Side by side: the gateway's CPU per served request and per refusal, at REV and here.

    .venv/bin/python scripts/ab-gateway.py REV [TURNS] [SECONDS]
    .venv/bin/python scripts/ab-gateway.py REV [TURNS] --memory

``--memory``: instead, the PSS of every process of ``headway up``'s default stack, warmed
(``bench/memory.py``, the spine bench's section 5, mapped weights), in MiB.

REV is checked out into a temporary worktree; each turn runs, for REV and then for this
tree, in a fresh process with that tree's product first on ``PYTHONPATH`` (so the gateway
and worker processes it starts run that code): a closed loop of 1-text requests at 16
outstanding to a zero-cost synthetic worker, every text new, then the 429 and 503 refusals
of ``bench spine`` (``bench/refusals.py``). The measuring code is each tree's own tooling:
``tools/src``, or ``src/headway`` in a REV from before the tooling left it (the turn's
imports then name ``headway.bench`` and ``headway.loadgen``). Medians of the turns are
printed last. Timings on a shared machine are noisy: compare the two columns of one run.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

TURN = r"""
import asyncio, json, sys, tempfile
from pathlib import Path
from headway_tools.bench.raw import batches_of
from headway_tools.bench.refusals import measure_refusals
from headway_tools.bench.served import (
    GATEWAY, WORKER, Model, bench_settings, demo_registry, gateway_traffic, measure, serving,
    API_KEY,
)
from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway_tools.loadgen.corpus import sentences

seconds = float(sys.argv[1])
data = Path(tempfile.mkdtemp())
settings = bench_settings(data, {"backend": "synthetic", "synthetic": {"call_ms": 0, "text_ms": 0}})
registry = demo_registry(settings)
synthetic = synthetic_record(settings.worker.synthetic)
registry.add_model(synthetic, (SYNTHETIC_ALIAS,))
texts = sentences(100_000, seed=9)
out = {}
with serving(settings) as processes:
    traffic = gateway_traffic(processes.gateway_url, batches_of(texts, 1), SYNTHETIC_ALIAS, API_KEY)

    async def served():
        await traffic.run(concurrency=16, requests=500)
        return await measure(traffic, processes, path=GATEWAY, texts_per_request=1,
                             concurrency=16, warmup=0, duration_s=seconds)

    point = asyncio.run(served())
    out["served: gateway µs/request"] = point.cpu_us_per_request(GATEWAY)
    out["served: worker µs/request"] = point.cpu_us_per_request(WORKER)
    out["served: requests/s"] = point.requests_per_s
for refusal in measure_refusals(
    Path(tempfile.mkdtemp()), batches_of(texts[:512], 1), concurrency=16, seconds=seconds
):
    out[f"{refusal.kind}: gateway µs/answer"] = refusal.gateway_us
    out[f"{refusal.kind}: answers/s"] = refusal.per_second
print(json.dumps(out))
"""


MEMORY_TURN = r"""
import json, tempfile
from pathlib import Path
from headway.catalog import ensure_default_model
from headway.registry.sqlite import Registry
from headway_tools.bench.memory import default_stack_settings, stack_memory

settings = default_stack_settings(Path(tempfile.mkdtemp()), mapped_weights=True)
registry = Registry(settings.registry_path)
registry.seed_demo()
ensure_default_model(settings, registry)
rows = stack_memory(settings)
out = {f"PSS MiB: {row.name}": row.pss / 2**20 for row in rows}
out["PSS MiB: all"] = sum(row.pss for row in rows) / 2**20
print(json.dumps(out))
"""


def turn(tree: Path, seconds: str, memory: bool) -> dict[str, float]:
    tools = tree / "tools" / "src"
    code = MEMORY_TURN if memory else TURN
    code = code if tools.is_dir() else code.replace("headway_tools.", "headway.")
    env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}{os.pathsep}{tools}")
    done = subprocess.run(
        [sys.executable, "-c", code, seconds], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"a turn at {tree} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    memory = "--memory" in sys.argv
    args = [arg for arg in sys.argv[1:] if arg != "--memory"]
    rev, turns, seconds = (
        args[0],
        int(args[1] if len(args) > 1 else 3),
        (args[2] if len(args) > 2 else "8"),
    )
    with tempfile.TemporaryDirectory() as scratch:
        old = Path(scratch) / "rev"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "-q", str(old), rev], check=True)
        try:
            trees = {rev: old, "this tree": HERE}
            seen: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for i in range(turns):
                for name, tree in trees.items():
                    seen[name].append(turn(tree, seconds, memory))
                    print(f"turn {i + 1}, {name}: {seen[name][-1]}", flush=True)
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(old)])
    print(f"\nmedians of {turns} turns" + ("" if memory else f" of {seconds} s"))
    keys = dict.fromkeys(key for runs in seen.values() for key in runs[0])
    for key in keys:  # a process one tree starts and the other does not: nan
        values = {
            name: statistics.median(r.get(key, math.nan) for r in runs)
            for name, runs in seen.items()
        }
        print(f"{key:40} " + "  ".join(f"{name}: {v:,.1f}" for name, v in values.items()))


if __name__ == "__main__":
    main()
