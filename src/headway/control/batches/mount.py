"""The Batch API's routes as one mount (``/v1/files``, ``/v1/batches``), each answering 503
while the batch store is away, and the store closed when the app stops. The executor's
line routes are the data plane's (``gateway/lines/``)."""

from __future__ import annotations

from headway.control.batches import batches, files
from headway.control.batches.parts import BatchParts
from headway.control.batches.unavailable import guarded
from headway.control.mount import Mount


def batches_mount(parts: BatchParts) -> Mount:
    async def close_store() -> None:
        parts.store.close()

    documented = [*files.routes(parts), *batches.routes(parts)]
    return Mount([guarded(route) for route in documented], on_shutdown=[close_store])
