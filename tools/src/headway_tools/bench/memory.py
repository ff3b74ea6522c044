"""Resident memory of a running stack, per process, with shared pages counted fairly.

RSS counts every page a process maps, so two workers mapping one model file each
count it whole and their sum overstates the machine's use. PSS (proportional
set size, ``/proc/<pid>/smaps_rollup``) divides each page by the number of
processes mapping it: PSS sums to what the stack really holds. It is split here
into anonymous memory (heaps: private to the process) and file-backed memory
(code, mapped model weights: shareable through the page cache).

``stack_memory`` starts the stack ``headway up`` starts with the given settings
(every pool it names, the gateway, billing and the batch executor), waits until
it is ready, sends ``WARM_REQUESTS`` full-size embed and rerank requests through
the gateway (so every worker has grown its buffers to a full batch), and reads
every child.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from headway.settings import Settings, load_settings
from headway_tools.bench.errors import ServingFailed
from headway_tools.bench.served import API_KEY, CLIENT_TIMEOUT_S, supervised
from headway_tools.loadgen import post
from headway_tools.loadgen.corpus import sentences

WARM_REQUESTS = 8
WARM_TEXTS = 32

_FIELDS = {"Rss": "rss", "Pss": "pss", "Pss_Anon": "pss_anon", "Pss_File": "pss_file"}


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """One process's memory in bytes (``name`` as the supervisor names it)."""

    name: str
    rss: int
    pss: int
    pss_anon: int
    pss_file: int


def process_memory(name: str, pid: int) -> ProcessMemory:
    """Read ``/proc/<pid>/smaps_rollup`` (Linux 4.14+)."""
    return parse_rollup(name, Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="ascii"))


def parse_rollup(name: str, text: str) -> ProcessMemory:
    """The figures of one ``smaps_rollup`` text (lines like ``Pss_Anon:   1234 kB``)."""
    values = dict.fromkeys(_FIELDS.values(), 0)
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in _FIELDS:
            amount = rest.split()
            if len(amount) != 2 or amount[1] != "kB":
                raise ValueError(f"smaps_rollup of {name}: unexpected line {line!r}")
            values[_FIELDS[key]] = int(amount[0]) * 1024
    return ProcessMemory(name, **values)


def default_stack_settings(data_dir: Path, *, mapped_weights: bool) -> Settings:
    """``headway up``'s defaults (one embed worker; the rerank worker waits for a
    cross-encoder), quiet, on an ephemeral port, without tenant quotas (the warm-up comes
    from one demo tenant)."""
    return load_settings(
        flags={
            "data_dir": str(data_dir),
            "log_level": "warning",
            "gateway": {"port": 0, "quota": {"enabled": False}},
            "worker": {"backend": "onnx", "mapped_weights": mapped_weights},
        }
    )


def stack_memory(settings: Settings) -> list[ProcessMemory]:
    """Every process of a ready, warmed stack, in the supervisor's order."""
    with supervised(settings) as supervisor:
        asyncio.run(_warm(supervisor.gateways[0].url, settings))
        return [process_memory(c.name, c.process.pid) for c in supervisor.children]


async def _warm(gateway_url: str, settings: Settings) -> None:
    texts = sentences(WARM_TEXTS)
    encode = msgspec.json.Encoder().encode
    bodies = {
        "/v1/embeddings": encode({"model": settings.embed_model, "input": texts}),
        "/v1/rerank": encode({"query": texts[0], "documents": texts}),  # the pool's default
    }
    headers = (("Content-Type", "application/json"), ("Authorization", f"Bearer {API_KEY}"))
    for path, body in bodies.items():
        if path == "/v1/rerank" and not settings.up.rerank_replicas:
            continue
        for _ in range(WARM_REQUESTS):
            response = await post(
                gateway_url + path, body, headers=headers, client_timeout_s=CLIENT_TIMEOUT_S
            )
            if response.status != 200:
                raise ServingFailed(f"{path}: warm-up answered {response.status}")


def total(processes: Sequence[ProcessMemory]) -> ProcessMemory:
    return ProcessMemory(
        "total",
        sum(p.rss for p in processes),
        sum(p.pss for p in processes),
        sum(p.pss_anon for p in processes),
        sum(p.pss_file for p in processes),
    )
