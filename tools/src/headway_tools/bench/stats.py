"""Pure helpers for benchmark reports: rates, CPU accounting, Markdown.

Percentiles come from the product's one quantile function, ``headway.quantile``
(nearest rank), as the load generator's do.

A report section lives between ``<!-- bench:NAME:start -->`` and
``<!-- bench:NAME:end -->``; replacing it leaves every byte outside the markers
untouched, so a document can hold hand-written prose around several sections.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from pathlib import Path

from headway_tools.bench.errors import MalformedMarkers


def per_second(count: float, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"a rate needs a positive duration, not {seconds}")
    return count / seconds


def cpu_us_per_request(cpu_seconds: float, requests: int) -> float:
    """CPU time spent per completed request, in microseconds (NaN when none completed)."""
    return cpu_seconds * 1e6 / requests if requests > 0 else math.nan


def proc_stat_cpu_ticks(stat: str) -> int:
    """``utime + stime`` (clock ticks, all threads) from the text of ``/proc/<pid>/stat``.

    The second field is the command name in parentheses and may itself hold
    spaces and parentheses, so fields are counted from the last ``)``: after
    it come field 3 (state) onwards, making utime and stime (fields 14 and 15)
    the 12th and 13th.
    """
    _, paren, rest = stat.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 13:
        raise ValueError(f"not a /proc/<pid>/stat line: {stat[:80]!r}")
    return int(fields[11]) + int(fields[12])


def cpu_model(cpuinfo: str) -> str:
    """The first ``model name`` in the text of ``/proc/cpuinfo``, or ``unknown``."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name" and value.strip():
            return value.strip()
    return "unknown"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A GitHub-flavoured Markdown table; ``|`` inside a cell is escaped.

    ``align`` has one letter per column, ``l`` or ``r``; empty means all left.
    """
    width = len(header)
    if any(len(row) != width for row in rows):
        raise ValueError(f"every row needs {width} cells")
    aligns = align or "l" * width
    if len(aligns) != width or set(aligns) - {"l", "r"}:
        raise ValueError(f"align needs {width} letters, each l or r, not {align!r}")
    rule = ["---:" if a == "r" else "---" for a in aligns]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), "|" + "|".join(rule) + "|", *(line(row) for row in rows)])


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def replace_section(document: str, name: str, body: str) -> str:
    """``document`` with section ``name`` set to ``body``; appended at the end if absent."""
    start, end = markers(name)
    block = f"{start}\n{body.strip()}\n{end}"
    n_start, n_end = document.count(start), document.count(end)
    if n_start == n_end == 0:
        prefix = document.rstrip("\n")
        return (prefix + "\n\n" if prefix else "") + block + "\n"
    if n_start != 1 or n_end != 1:
        raise MalformedMarkers(
            f"section {name!r}: found {n_start} start and {n_end} end markers, need one each"
        )
    head, _, rest = document.partition(start)
    if end not in rest:
        raise MalformedMarkers(f"section {name!r}: the end marker comes before the start marker")
    _, _, tail = rest.partition(end)
    return head + block + tail


def write_section(path: Path, name: str, section: str) -> None:
    """Put ``section`` between the markers of ``name`` in ``path``, creating either if absent."""
    document = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    updated = replace_section(document, name, section)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(updated, encoding="utf-8")


def fmt_rate(value: float) -> str:
    """``1,234`` for large rates, ``12.3`` for small ones."""
    if math.isnan(value):
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def fmt_ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "n/a"
    return f"{seconds * 1000:.2f}"


def fmt_latency(ms: float | None) -> str:
    """A latency in milliseconds, to the unit above 100 ms; ``n/a`` when unmeasured."""
    if ms is None:
        return "n/a"
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}"


def fmt_ratio(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}×"


def command_line(argv: Sequence[str]) -> str:
    """How the running program was invoked, as a shell would read it back.

    ``argv[0]`` is shortened to its file name (``/x/.venv/bin/headway`` →
    ``headway``); ``python -m headway`` shows as such rather than as ``__main__.py``.
    """
    if not argv:
        return "headway"
    program = Path(argv[0]).name
    if program == "__main__.py":
        program = "python -m headway"
    return " ".join([program, *(shlex.quote(arg) for arg in argv[1:])])
