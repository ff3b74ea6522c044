"""What the executor-token claim check costs a batch line (gateway/lines/claims.py):
with the one-second cache of live batches, and with a batch store read on every line.

    PYTHONPATH=src .venv/bin/python scripts/line-claims.py
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from headway.batches.model import Batch, line_request_id, new_batch_id
from headway.batches.open import sqlite_batch_store
from headway.gateway.lines.claims import TTL_S, LineClaim, LiveBatches

LINES = 2000


async def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = sqlite_batch_store(Path(folder) / "batches.sqlite3")
        batch = Batch(
            new_batch_id(), 1, "acme", "00" * 8, "/v1/embeddings", "f", "24h", "validating", 1, 2
        )
        store.add_batch(batch)
        store.move(batch.id, ("validating",), "in_progress", 1, total=LINES)
        for ttl_s in (TTL_S, 0.0):
            live = LiveBatches(store, ttl_s=ttl_s)
            start = time.perf_counter()
            for line in range(1, LINES + 1):
                claim = LineClaim(batch.id, line, 1, "00" * 8, line_request_id(batch.id, line))
                assert await live.refusal(claim) is None
            each_us = (time.perf_counter() - start) / LINES * 1e6
            print(f"ttl_s={ttl_s:g}: {each_us:.1f} µs a line ({LINES} lines, SQLite store)")
        store.close()


if __name__ == "__main__":
    asyncio.run(main())
