"""``headway bench profile``: where the gateway's CPU goes, as py-spy sees it under load.

One zero-cost synthetic worker and one gateway, as ``headway up`` starts them; a
closed loop of 1-text ``/v1/embeddings`` requests at ``CONCURRENCY`` outstanding,
every text new (so every request is computed: the results cache misses); py-spy
samples the gateway process meanwhile, every thread, and writes the stacks twice:
``gateway.svg`` (a flame graph to open in a browser) and ``gateway.folded``
(collapsed stacks: speedscope, inferno and flamegraph.pl read them). The CPU per
request of each process over the same run is printed beside them, so a profile is
always read against what it cost.

py-spy is a developer tool (``pip install py-spy``; the test extra installs it), not
a dependency of serving.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from headway.catalog import SYNTHETIC_ALIAS, synthetic_record
from headway_tools.bench.errors import BenchError
from headway_tools.bench.raw import batches_of
from headway_tools.bench.served import (
    API_KEY,
    CLIENT,
    GATEWAY,
    WORKER,
    Model,
    bench_settings,
    demo_registry,
    gateway_traffic,
    measure,
    serving,
)
from headway_tools.loadgen.corpus import sentences

CONCURRENCY = 16
RATE_HZ = 250
TEXTS = 200_000  # more than a run of a minute sends: no text comes twice


@dataclass(frozen=True, slots=True)
class Profile:
    requests_per_s: float
    cpu_us: dict[str, float]
    files: tuple[Path, ...]


def py_spy() -> str:
    """The py-spy beside this interpreter, or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise BenchError("py-spy is not installed: pip install py-spy")
    return found


def run_profile(data_dir: Path, out_dir: Path, *, seconds: float) -> Profile:
    if seconds < 1:
        raise BenchError(f"profile for at least a second, not {seconds}")
    spy = py_spy()
    settings = bench_settings(
        data_dir, {"backend": "synthetic", "synthetic": {"call_ms": 0, "text_ms": 0}}
    )
    registry = demo_registry(settings)
    synthetic = synthetic_record(settings.worker.synthetic)
    registry.add_model(synthetic, (SYNTHETIC_ALIAS,))
    model = Model(SYNTHETIC_ALIAS, synthetic.version, synthetic.dimensions)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = (out_dir / "gateway.svg", out_dir / "gateway.folded")
    with serving(settings) as processes:
        traffic = gateway_traffic(
            processes.gateway_url,
            batches_of(sentences(TEXTS, seed=15), 1),
            model.name,
            API_KEY,
        )

        async def profiled() -> Profile:
            await traffic.run(concurrency=CONCURRENCY, requests=20 * CONCURRENCY)  # warm
            pid = str(processes.pids[GATEWAY])
            recorders = [
                _record(spy, pid, seconds, form, path)
                for form, path in (("flamegraph", files[0]), ("raw", files[1]))
            ]
            point = await measure(
                traffic,
                processes,
                path=GATEWAY,
                texts_per_request=1,
                concurrency=CONCURRENCY,
                warmup=0,
                duration_s=seconds,
            )
            for recorder in recorders:
                if await asyncio.to_thread(recorder.wait) != 0:
                    raise BenchError("py-spy failed (it needs ptrace: run as root or as the owner)")
            return Profile(
                point.requests_per_s,
                {name: point.cpu_us_per_request(name) for name in (GATEWAY, WORKER, CLIENT)},
                files,
            )

        return asyncio.run(profiled())


def _record(spy: str, pid: str, seconds: float, form: str, path: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling every thread of ``pid`` for ``seconds``, without stopping it."""
    command = [spy, "record", "--nonblocking", "--threads", "-r", str(RATE_HZ)]
    command += ["-d", str(int(seconds)), "-p", pid, "-f", form, "-o", str(path)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
