"""The garbage collector, tuned for a server once it has started.

CPython's cyclic collector runs its youngest generation every 700 container
allocations, and every tenth of those also the middle one, every tenth of those the
whole heap. A request allocates hundreds of short-lived containers, nearly all freed
by reference counting, so at the default thresholds a gateway ran a collection every
request or two, and a full one (every object start-up made: settings, registry
snapshots, metric families, NumPy and ONNX Runtime modules) every few hundred
(its share of the CPU: docs/DESIGN.md, "Decisions").

``settle_heap`` runs once start-up is done: ``gc.freeze()`` moves everything alive
into the permanent generation (never scanned again: Instagram's fix for the same
problem), and the youngest generation is collected every ``YOUNG_THRESHOLD``
allocations instead of 700. Cycles made while serving are still found, later; the
memory they hold meanwhile is bounded by that many objects.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLDS = (20, 20)


async def settle_heap() -> None:
    """A start-up hook: the last one to run (see the module docstring)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
