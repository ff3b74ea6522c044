"""What a process does before it loads a model version: have it, and know it is that one.

``ArtifactLoader.load(version)``: a version missing from the local store is fetched from
the weights source, when there is one (``weights.url``); one present is verified, every
file hashed, so what is loaded is what the version names. Either way its signature is
then held to the ``SignaturePolicy``. A refusal is a ``ModelIntegrityError`` naming the
file that changed, or a ``ModelSignatureError``; nothing refused is returned.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Callable

from headway.models.store import ModelStore, StoredModel
from headway.models.weights.base import WeightsSource
from headway.models.weights.fetch import fetch_artifact
from headway.models.weights.http import HttpSource
from headway.models.weights.signing import SignaturePolicy
from headway.settings import WeightsSettings

log = logging.getLogger(__name__)


def weights_source(
    weights: WeightsSettings, tls: Callable[[], ssl.SSLContext] | None = None
) -> HttpSource | None:
    """The source ``weights.url`` names, presenting ``weights.token``; None without a URL."""
    if weights.url is None:
        return None
    return HttpSource(weights.url, weights.token, timeout_s=weights.timeout_s, tls=tls)


class ArtifactLoader:
    def __init__(
        self,
        store: ModelStore,
        source: WeightsSource | None = None,
        policy: SignaturePolicy | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._store = store
        self._source = source
        self._policy = policy or SignaturePolicy()
        self._clock = clock

    def load(self, version: str) -> StoredModel:
        """The stored, verified artifact (see the module docstring); ``ModelNotFoundError``
        if it is neither stored nor at the source."""
        started = self._clock()
        present = (self._store.root / version).is_dir()
        if self._source is not None:
            model = fetch_artifact(self._source, self._store, version)
        else:
            model = self._store.verify(version)
        signer = self._policy.check(version, self._store.signature(version))
        megabytes = sum(entry.stat().st_size for entry in model.path.iterdir()) / 1e6
        log.info(
            "model %s %s (%.1f MB) in %.2fs%s",
            version[:12],
            "verified" if present else f"fetched from {self._source_name()} and verified",
            megabytes,
            self._clock() - started,
            f", signed by {signer[:12]}…" if signer else "",
        )
        return model

    def _source_name(self) -> str:
        return self._source.describe() if self._source is not None else "-"
