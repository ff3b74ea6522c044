"""``headway bench batch-commits``: what a durable commit costs the embedded batch store.

The batch store on SQLite commits with ``synchronous=FULL`` (``batches/open.py``): each
commit is fsynced before it returns, so a 200 is on disk. This measures it against
``NORMAL`` (WAL fsynced at checkpoints only), the setting it had: the store's own calls
(``add_file``, an upload's record; ``record``, one line's result: the executor's
commit at its line rate) on two files in ``data_dir``, on the disk the store would use.
The two settings are interleaved round by round, so load on the machine falls on both
alike, and each figure is the median round.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from headway.batches.model import Batch, FileObject, LineResult
from headway.batches.sql import SqlBatchStore
from headway.storage.sqlite import SqliteDialect
from headway_tools.bench.host import Machine
from headway_tools.bench.stats import markdown_table

SECTION = "batch-commits"
SETTINGS: tuple[Literal["NORMAL", "FULL"], ...] = ("NORMAL", "FULL")
CALLS = ("add_file", "record")
DIGEST = "0" * 64
TENANT_ID = 1


@dataclass(frozen=True, slots=True)
class BatchCommitResults:
    rounds: int
    per_round: int
    ms_per_commit: dict[tuple[str, str], float]
    """(call, synchronous) -> the median round's milliseconds per commit."""

    def ratio(self, call: str) -> float:
        return self.ms_per_commit[(call, "FULL")] / self.ms_per_commit[(call, "NORMAL")]


def _store(directory: Path, synchronous: Literal["NORMAL", "FULL"]) -> SqlBatchStore:
    store = SqlBatchStore(
        SqliteDialect(directory / f"{synchronous}.sqlite3", 10.0, synchronous=synchronous)
    )
    batch = Batch(
        "batch_bench",
        TENANT_ID,
        "bench",
        "key",
        "/v1/embeddings",
        "file-0",
        "24h",
        "in_progress",
        0,
        86400,
    )
    store.add_batch(batch)
    return store


def _commit(store: SqlBatchStore, call: str, n: int) -> None:
    if call == "add_file":
        store.add_file(
            FileObject(f"file-{n}", TENANT_ID, "bench", "batch", "in.jsonl", 1, DIGEST, 0, None, 1)
        )
    else:
        store.record("batch_bench", LineResult(n + 1, True, b"{}"))


def run_batch_commits_bench(
    data_dir: Path, *, rounds: int = 20, per_round: int = 50
) -> BatchCommitResults:
    data_dir.mkdir(parents=True, exist_ok=True)
    samples: dict[tuple[str, str], list[float]] = {
        (call, sync): [] for call in CALLS for sync in SETTINGS
    }
    with tempfile.TemporaryDirectory(dir=data_dir, prefix="bench-commits-") as directory:
        stores = {sync: _store(Path(directory), sync) for sync in SETTINGS}
        done = 0
        for _ in range(rounds):
            for sync, store in stores.items():
                for call in CALLS:
                    started = time.perf_counter()
                    for n in range(done, done + per_round):
                        _commit(store, call, n)
                    elapsed = time.perf_counter() - started
                    samples[(call, sync)].append(elapsed / per_round * 1e3)
            done += per_round
    medians = {key: statistics.median(values) for key, values in samples.items()}
    return BatchCommitResults(rounds, per_round, medians)


def render(results: BatchCommitResults, machine: Machine, command: str) -> str:
    rows = []
    for call in CALLS:
        normal = results.ms_per_commit[(call, "NORMAL")]
        full = results.ms_per_commit[(call, "FULL")]
        ratio = f"{results.ratio(call):.2f}"
        rows.append([f"`{call}`", f"{normal:.2f}", f"{full:.2f}", f"{full - normal:+.2f}", ratio])
    return "\n\n".join(
        [
            "## Batch store: the cost of a durable commit (SQLite FULL against NORMAL)",
            f"Command: `{command}`  \nDate: {machine.date}  \n"
            f"Commit: `{machine.commit}` (CPU: {machine.cpu_model})  \n"
            f"Machine: {machine.nproc} CPUs, {machine.cpu_model}; load average "
            f"{machine.load_average:.2f} at start.",
            f"The embedded batch store's own calls, one commit each (a connection per call, "
            f"as the store runs), on two files in the data directory: {results.rounds} rounds "
            f"of {results.per_round} calls, the two settings interleaved round by round; "
            "median round.",
            markdown_table(
                ["call", "NORMAL ms/commit", "FULL ms/commit", "FULL − NORMAL", "FULL ÷ NORMAL"],
                rows,
                "lrrrr",
            ),
        ]
    )
