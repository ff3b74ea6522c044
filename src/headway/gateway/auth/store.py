"""The seam of failed key checks: where each subject's bucket lives. In this process, or in
Redis for every gateway at once (``redis_store.py``).

``locked_for`` answers, for each subject, how long it is still refused (0: it may be
checked); ``fail`` counts one failed check against each and answers, for each, whether that
failure locked it and for how long. A shared store that cannot be reached raises
``FailureStoreUnavailable``, which ``FallbackFailureStore`` turns into the local store.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from headway.gateway.auth.failures import BucketState, FailureLimit, allowance, fail, locked_for

SubjectKind = Literal["address", "key_prefix"]
SUBJECT_KINDS: tuple[SubjectKind, ...] = ("address", "key_prefix")


class FailureStoreUnavailable(Exception):
    """The shared store of failed key checks could not be reached or did not answer in time."""


@dataclass(slots=True)
class Subject:
    """Whose failures are counted: a client address, or the digest of a key prefix.
    (Slotted, not frozen: one is made per failed check, and a frozen one costs 3× as much.)"""

    kind: SubjectKind
    name: str
    limit: FailureLimit

    @property
    def key(self) -> str:
        """What it is stored under."""
        return self.kind + ":" + self.name


@dataclass(slots=True)
class Failed:
    """One subject after a failed check: refused for ``locked_s`` more seconds (0: not
    locked); ``started``: this failure is the one that locked it."""

    locked_s: float
    started: bool


class FailureStore(Protocol):
    async def locked_for(self, subjects: Sequence[Subject]) -> list[float]: ...

    async def fail(self, subjects: Sequence[Subject]) -> list[Failed]: ...

    async def close(self) -> None: ...


class LocalFailureStore:
    """Buckets in this process: exact for one gateway. At most ``tracked`` subjects are
    kept; past it the least recently failed is forgotten (a full bucket forgets nothing)."""

    def __init__(self, tracked: int = 100_000, clock: Callable[[], float] = time.monotonic):
        self._tracked = tracked
        self._clock = clock
        self._buckets: OrderedDict[str, BucketState] = OrderedDict()

    @property
    def subjects(self) -> int:
        return len(self._buckets)

    async def locked_for(self, subjects: Sequence[Subject]) -> list[float]:
        now = self._clock()
        return [locked_for(self._buckets.get(s.key), now, s.limit) for s in subjects]

    async def fail(self, subjects: Sequence[Subject]) -> list[Failed]:
        now = self._clock()
        outcomes = []
        buckets = self._buckets
        for subject in subjects:
            key, limit = subject.key, subject.limit
            before = buckets.pop(key, None)
            was_locked = before is not None and allowance(before, now, limit) < 1.0
            after = buckets[key] = fail(before, now, limit)  # now the most recently failed
            locked_s = locked_for(after, now, limit)
            outcomes.append(Failed(locked_s, locked_s > 0 and not was_locked))
        while len(self._buckets) > self._tracked:
            self._buckets.popitem(last=False)
        return outcomes

    async def close(self) -> None:
        pass
