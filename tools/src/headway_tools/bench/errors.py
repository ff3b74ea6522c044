"""What can stop a benchmark.

BenchError
├── MalformedMarkers   the output file's section markers are unpaired or out of order
└── ServingFailed      a process under test did not start, or answered wrongly
"""

from __future__ import annotations


class BenchError(Exception):
    """The benchmark could not run, or its report could not be written."""


class MalformedMarkers(BenchError):
    """A section's start marker lacks its end marker, or they are out of order."""


class ServingFailed(BenchError):
    """A gateway or worker under test did not become ready, or answered wrongly."""
