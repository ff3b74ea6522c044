"""The batch executor's metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

OUTCOMES = ("completed", "failed", "skipped", "deferred")
WAITS = ("quota", "overloaded", "unauthorized")
MOVES = ("validate", "finalize", "cancel", "expire")
MOVE_FAILURES = ("unavailable", "error", "given_up")
DEPENDENCIES = ("store", "queue")
"""What an executor cannot work without: the batch store (Postgres or the SQLite file)
and the work queue (JetStream or the SQLite queue)."""


class ExecutorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        lines = Counter(
            "headway_batch_lines_total",
            "Batch lines this executor ran, by outcome: completed (output file), failed "
            "(error file); skipped: not run (answered already, or its batch ended or is gone); "
            "deferred: handed back to the queue until its tenant's quota refills (429), or "
            "until its batch from before tenant ids is adopted by its tenant.",
            ["outcome"],
            registry=self.registry,
        )
        self._lines = {outcome: lines.labels(outcome=outcome) for outcome in OUTCOMES}
        waits = Counter(
            "headway_batch_waits_total",
            "Times a line waited instead of failing: the tenant's quota (429), no capacity "
            "for batch work (503), or the executor's token refused (401/403).",
            ["reason"],
            registry=self.registry,
        )
        self._waits = {reason: waits.labels(reason=reason) for reason in WAITS}
        moves = Counter(
            "headway_batch_move_failures_total",
            "Moves of a batch that raised, by move and reason: unavailable (a store, the "
            "queue or the registry away: waited out), error (the batch's own: counted "
            "against it), given_up (it kept failing and was marked failed).",
            ["move", "reason"],
            registry=self.registry,
        )
        self._moves = {
            (move, reason): moves.labels(move=move, reason=reason)
            for move in MOVES
            for reason in MOVE_FAILURES
        }
        self._retries = Counter(
            "headway_batch_retries_total",
            "Attempts of a line that failed on our side (unreachable, 5xx) and were retried.",
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "headway_batch_queue_depth",
            "Lines queued and not yet finished, across every executor.",
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "headway_batch_lines_in_flight",
            "Lines this executor is running now.",
            registry=self.registry,
        )
        self._up = {
            dependency: Gauge(
                f"headway_batch_{dependency}_up",
                f"1 while this executor reaches its {what}, 0 while it waits for it (with "
                "backoff: no line is lost, each is delivered again); /readyz is 503 meanwhile.",
                registry=self.registry,
            )
            for dependency, what in zip(DEPENDENCIES, ("batch store", "work queue"), strict=True)
        }
        dependency_retries = Counter(
            "headway_batch_dependency_retries_total",
            "Pauses of the executor's line loop before it tried an unreachable dependency "
            "(store, queue) again.",
            ["dependency"],
            registry=self.registry,
        )
        self._dependency_retries = {
            dependency: dependency_retries.labels(dependency=dependency)
            for dependency in DEPENDENCIES
        }

    def line(self, outcome: str, count: int = 1) -> None:
        self._lines[outcome].inc(count)

    def waited(self, reason: str) -> None:
        self._waits[reason].inc()

    def move_failed(self, move: str, reason: str) -> None:
        self._moves[(move, reason)].inc()

    def retried(self) -> None:
        self._retries.inc()

    def dependency_up(self, dependency: str, up: bool) -> None:
        self._up[dependency].set(1 if up else 0)

    def dependency_retry(self, dependency: str) -> None:
        self._dependency_retries[dependency].inc()
