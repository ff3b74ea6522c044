"""Which model versions a worker serves, and how it loads one.

A ``ModelSource`` answers three blocking questions, always asked from a thread off
the event loop: its change counter (cheap, polled every ``registry_poll_s``), the
versions wanted now, and a loaded backend for one of them. The first version wanted
is the one a chunk naming no version gets. Wanted versions are held from the start;
``on_demand`` ones are served too, each loaded when a chunk first asks for it.

- ``FixedSource``: one model, loaded once, never changes (the synthetic backend).
- ``RegistrySource``: every version the registry names for the worker's aliases
  (``versions_for``): an alias's primary first, then what its split names (weights,
  pins, shadow), so a split or a rollout on the alias makes the worker load the
  candidate, and dropping it from the split lets the worker unload it. With a ``kind``
  (the pool's: no explicit ``worker.models``), every other alias of that kind, with its
  split, is served on demand (``versions_of_kind``): an alias imported while the worker
  runs is served within one poll, with no restart.
- ``RefusingSource``: around another, drops a version whose artifact was refused
  (changed files, a bad or missing signature) from what is wanted, so the worker serves
  the rest and is never ready for that one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from headway.models.backend import Backend
from headway.models.errors import ModelIntegrityError, ModelNotFoundError
from headway.registry.model import Snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadedModel:
    backend: Backend
    version: str


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """What a worker says of a version before it has loaded it, and what holding it costs."""

    kind: str
    dimensions: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Wanted:
    """The versions to hold, and those to load on demand, as of the source's change
    counter ``changes``."""

    changes: int
    versions: tuple[str, ...]
    on_demand: tuple[str, ...] = ()
    info: Mapping[str, VersionInfo] = field(default_factory=dict)
    """Of every version named here, where the source knows it (the registry's records)."""


class ModelSource(Protocol):
    def changes(self) -> int: ...

    def wanted(self) -> Wanted:
        """``ModelNotFoundError`` when a name the worker serves resolves to nothing."""
        ...

    def load(self, version: str) -> LoadedModel: ...


class FixedSource:
    """One model, loaded on the first question, held for the worker's life."""

    def __init__(self, load: Callable[[], LoadedModel]) -> None:
        self._load = load
        self._model: LoadedModel | None = None
        self._lock = threading.Lock()

    def changes(self) -> int:
        return 0

    def wanted(self) -> Wanted:
        return Wanted(0, (self._loaded().version,))

    def load(self, version: str) -> LoadedModel:
        model = self._loaded()
        if version != model.version:
            raise ModelNotFoundError(f"this worker holds only {model.version}, not {version}")
        return model

    def _loaded(self) -> LoadedModel:
        with self._lock:
            if self._model is None:
                self._model = self._load()
            return self._model


class RegistryView(Protocol):
    """The two reads of a ``RegistryStore`` a worker needs (no tenant, no key)."""

    def model_snapshot(self) -> Snapshot: ...

    def changes(self) -> int: ...


class RegistrySource:
    """The versions ``registry`` names for ``names``, each loaded by ``load_backend``."""

    def __init__(
        self,
        registry: RegistryView,
        names: tuple[str, ...] | Callable[[], tuple[str, ...]],
        load_backend: Callable[[str], Backend],
        kind: str | None = None,
    ) -> None:
        """``names``: or how to find them (a read of the registry: the rerank pool's
        fallback), asked once, when first wanted. ``kind``: serve every alias of this kind
        on demand (None: only ``names``)."""
        self._registry = registry
        self._names = names
        self._load_backend = load_backend
        self._kind = kind

    def changes(self) -> int:
        return self._registry.changes()

    def wanted(self) -> Wanted:
        if callable(self._names):
            self._names = self._names()
        snapshot = self._registry.model_snapshot()
        held = versions_for(snapshot, self._names)
        on_demand = () if self._kind is None else versions_of_kind(snapshot, self._kind)
        on_demand = tuple(v for v in on_demand if v not in held)
        info = {
            v: VersionInfo(record.kind, record.dimensions, record.size_bytes)
            for v in (*held, *on_demand)
            if (record := snapshot.resolve_model(v)) is not None
        }
        return Wanted(snapshot.changes, held, on_demand, info)

    def load(self, version: str) -> LoadedModel:
        return LoadedModel(self._load_backend(version), version)


def versions_for(snapshot: Snapshot, names: tuple[str, ...]) -> tuple[str, ...]:
    """Each name's primary version, then the rest its split names (sorted), without
    repeats; the very first is the first name's primary."""
    ordered: list[str] = []
    for name in names:
        record = snapshot.resolve_model(name)
        if record is None:
            raise ModelNotFoundError(
                f"model {name!r} is not registered; run `headway models import`"
            )
        ordered += [record.version, *sorted(snapshot.versions_of(name))]
    return tuple(dict.fromkeys(ordered))


def versions_of_kind(snapshot: Snapshot, kind: str) -> tuple[str, ...]:
    """Every version an alias of ``kind`` points to (its primary, and what its split
    names), sorted; a version no alias names is not among them."""
    named: set[str] = set()
    for name in snapshot.aliases_of_kind(kind):
        named |= snapshot.versions_of(name)
    return tuple(sorted(named))


class RefusingSource:
    """``inner``, less the versions whose artifacts it refused to load.

    A refusal (``ModelIntegrityError``: a file that changed, a bad or missing signature)
    is logged once, as one error line, and raised to the caller as any failed load is
    (at start-up it stops the worker; on a registry poll it keeps what is held). From
    then on the version is left out of ``wanted``, so the next poll holds the rest and
    the worker never advertises it: it stays unready for that version, and nothing is
    hashed again until a restart. Were every wanted version refused, ``wanted`` names
    them all still, so the worker keeps what it holds rather than drop to nothing.
    """

    def __init__(self, inner: ModelSource) -> None:
        self._inner = inner
        self.refused: dict[str, ModelIntegrityError] = {}

    def changes(self) -> int:
        return self._inner.changes()

    def wanted(self) -> Wanted:
        wanted = self._inner.wanted()
        kept = tuple(v for v in wanted.versions if v not in self.refused)
        on_demand = tuple(v for v in wanted.on_demand if v not in self.refused)
        return Wanted(wanted.changes, kept or wanted.versions, on_demand, wanted.info)

    def load(self, version: str) -> LoadedModel:
        refusal = self.refused.get(version)
        if refusal is not None:  # a fresh error each time: the first's traceback stays as it is
            raise type(refusal)(*refusal.args)
        try:
            return self._inner.load(version)
        except ModelIntegrityError as exc:
            self.refused[version] = exc
            log.error("model version %s refused: %s", version[:12], exc)
            raise
