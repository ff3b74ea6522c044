"""``settle_heap``: start-up's objects frozen, young collections rare (in a child process:
the collector's state is the whole process's)."""

from __future__ import annotations

import json
import subprocess
import sys

from headway.heap import OLDER_THRESHOLDS, YOUNG_THRESHOLD

CHILD = """
import asyncio, gc, json
from headway.heap import settle_heap
before = gc.get_freeze_count()
asyncio.run(settle_heap())
print(json.dumps({"before": before, "after": gc.get_freeze_count(),
                  "threshold": gc.get_threshold()}))
"""


def test_settling_freezes_what_start_up_made_and_raises_the_young_threshold():
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(out.stdout)
    assert seen["before"] == 0
    assert seen["after"] > 1000  # the interpreter's and headway's modules, at least
    assert tuple(seen["threshold"]) == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
