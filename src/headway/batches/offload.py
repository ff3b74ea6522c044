"""The batch and file stores are synchronous (a database, a disk): their calls run in
a thread, never on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def off_loop(call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return await asyncio.to_thread(call, *args, **kwargs)
