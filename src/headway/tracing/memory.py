"""The fake beside the span sink: ended spans kept in a list, for tests."""

from __future__ import annotations

from headway.tracing.spans import Span


class MemorySink:
    def __init__(self) -> None:
        self.spans: list[Span] = []

    def export(self, spans: list[Span]) -> None:
        self.spans.extend(spans)

    def named(self, name: str) -> list[Span]:
        return [span for span in self.spans if span.name == name]

    def children_of(self, parent: Span) -> list[Span]:
        return [span for span in self.spans if span.parent_id == parent.span_id]
