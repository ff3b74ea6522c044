"""Facts about the machine a benchmark ran on, and CPU time used by a process.

CPU time comes from ``/proc/<pid>/stat`` (``utime + stime`` of all the
process's threads), so it can be read for child processes the benchmark did
not start itself, and costs nothing in the measured process.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from headway_tools.bench.stats import cpu_model, proc_stat_cpu_ticks

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User plus system CPU seconds used so far by process ``pid``."""
    stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    return proc_stat_cpu_ticks(stat) / _TICKS_PER_S


@dataclass(frozen=True, slots=True)
class Machine:
    """Where and when a benchmark ran.

    ``load_average`` is the 1-minute load when it began: anything else running
    on the machine takes CPU from every process under test.
    """

    date: str
    nproc: int
    cpu_model: str
    kernel: str
    python: str
    load_average: float
    commit: str = "not recorded"
    """The checkout's commit (``-dirty`` with uncommitted changes): what was measured."""

    @classmethod
    def here(cls) -> Machine:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
        return cls(
            date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            nproc=len(os.sched_getaffinity(0)),
            cpu_model=cpu_model(cpuinfo),
            kernel=f"{platform.system()} {platform.release()}",
            python=platform.python_version(),
            load_average=os.getloadavg()[0],
            commit=checkout_commit(),
        )


def checkout_commit() -> str:
    """``git describe --always --dirty`` of the checkout this file is in, or "not recorded"."""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "not recorded"
    return done.stdout.strip() or "not recorded"
