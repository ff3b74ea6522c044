"""Reading a process's memory from /proc (the spine benchmark's memory table)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from headway_tools.bench.memory import ProcessMemory, parse_rollup, process_memory, total

linux_only = pytest.mark.skipif(
    not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux's smaps_rollup"
)


@linux_only
def test_this_process_reads_as_expected() -> None:
    ballast = bytearray(64 * 2**20)  # 64 MB of heap, touched
    ballast[::4096] = b"x" * len(ballast[::4096])
    me = process_memory("self", os.getpid())
    assert me.name == "self"
    assert me.rss >= me.pss > 0
    assert me.pss_anon >= 64 * 2**20
    assert me.pss_anon + me.pss_file <= me.pss + 2**20  # shmem aside, the two parts add up


def test_total_adds_every_figure() -> None:
    parts = [ProcessMemory("a", 10, 8, 5, 3), ProcessMemory("b", 20, 12, 10, 2)]
    assert total(parts) == ProcessMemory("total", 30, 20, 15, 5)


def test_a_rollup_is_parsed_in_bytes() -> None:
    text = "00400000-7ffd [rollup]\nRss:  300 kB\nPss:  200 kB\nPss_Anon:  150 kB\n"
    text += "Pss_File:  50 kB\nShared_Clean:  99 kB\n"
    assert parse_rollup("w", text) == ProcessMemory(
        "w", 300 * 1024, 200 * 1024, 150 * 1024, 50 * 1024
    )


def test_an_unexpected_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="unexpected line"):
        parse_rollup("w", "Rss:  100 MB\n")
