"""``duplicate_line`` (``headway.plants``): an executor that writes a line twice."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from headway.batches.model import LineResult


def duplicating_first_answer(results: Iterable[LineResult]) -> Iterator[LineResult]:
    """``duplicate_line``: the results in order, the first answered (ok) one twice."""
    doubled = False
    for result in results:
        yield result
        if result.ok and not doubled:
            doubled = True
            yield result
