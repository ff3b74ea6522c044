"""Who hears how each shadow copy went: the gateway's metrics, and the counts a rollout
is judged on (``recorder.VersionRecorder``); the shadow stage reports to one."""

from __future__ import annotations

from typing import Protocol

from headway.rollouts.compare import Agreement


class ShadowObserver(Protocol):
    def shadow_skipped(self, primary: str, candidate: str) -> None:
        """No spare room (in the pool, or at the worker): the copy did not run."""

    def shadow_failed(self, primary: str, candidate: str, latency_s: float) -> None: ...

    def shadow_compared(
        self, primary: str, candidate: str, latency_s: float, agreement: Agreement
    ) -> None: ...
