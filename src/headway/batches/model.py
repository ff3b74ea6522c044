"""What the Batch API holds, as plain values: files, batches, their lines' results.

Shapes follow OpenAI's Batch API (``/v1/files``, ``/v1/batches``): a ``FileObject`` is
an uploaded JSONL file (``purpose`` ``batch``) or one a batch wrote (``batch_output``);
a ``Batch`` runs every line of its input file against one endpoint, and ends with an
output file (the lines that were answered 2xx) and an error file (every other line).
Ids are random and opaque, except a batch's output and error files', which are derived
from the batch id so that finalizing twice (an executor killed while finalizing) makes
the same files, never two.

Times are unix seconds (ints in the API, as OpenAI's).

A file or batch belongs to a tenant by its id (``registry.model.Tenant.id``, never given
twice): ``tenant_id`` is what every read and bound goes by, so a tenant created with a
deleted tenant's name finds none of its files or batches. ``tenant`` is the name, for
display and logs. ``LEGACY_TENANT_ID`` (0, never a tenant's id) marks a row written
before the store kept ids, not yet given to its tenant (``migrations.py``, version 3).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import Literal

FilePurpose = Literal["batch", "batch_output"]
BatchEndpoint = Literal["/v1/embeddings", "/v1/rerank"]
ENDPOINTS: tuple[BatchEndpoint, ...] = ("/v1/embeddings", "/v1/rerank")
LEGACY_TENANT_ID = 0
"""The ``tenant_id`` of a row from before ids: nobody's until it is adopted by name."""

BatchStatus = Literal[
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
]
FINAL: frozenset[BatchStatus] = frozenset({"failed", "completed", "expired", "cancelled"})
"""A batch in one of these never changes again."""

RUNNING: tuple[BatchStatus, ...] = ("validating", "in_progress", "finalizing", "cancelling")
"""A batch in one of these still reads its input file."""

TIMESTAMP_OF: dict[BatchStatus, str] = {
    "in_progress": "in_progress_at",
    "finalizing": "finalizing_at",
    "completed": "completed_at",
    "failed": "failed_at",
    "expired": "expired_at",
    "cancelling": "cancelling_at",
    "cancelled": "cancelled_at",
}
"""The ``Batch`` field a move to each status stamps."""


def new_file_id() -> str:
    return "file-" + os.urandom(12).hex()


def new_batch_id() -> str:
    return "batch_" + os.urandom(12).hex()


def derived_file_id(batch_id: str, which: Literal["output", "error"]) -> str:
    """The id of a batch's output or error file: the same however often it is made."""
    return "file-" + hashlib.sha256(f"{batch_id}:{which}".encode()).hexdigest()[:24]


def line_request_id(batch_id: str, line: int) -> str:
    """The request id a line is served (and billed) under: the same on every attempt, so
    the ledger counts a line once however often an executor retries it."""
    return hashlib.sha256(f"{batch_id}:{line}".encode()).hexdigest()[:32]


def line_result_id(batch_id: str, line: int) -> str:
    """The ``id`` of the line in the output or error file (OpenAI's ``batch_req_…``)."""
    return "batch_req_" + line_request_id(batch_id, line)[:24]


@dataclass(frozen=True, slots=True)
class FileObject:
    id: str
    tenant_id: int
    """Whose file it is (``registry.model.Tenant.id``)."""
    tenant: str
    """The tenant's name, for display and logs."""
    purpose: FilePurpose
    filename: str
    bytes: int
    sha256: str
    """The content's digest: where the file store keeps it (content-addressed)."""
    created_at: int
    expires_at: int | None
    """None: kept until deleted."""
    lines: int = 0
    """JSONL lines (non-empty) of a ``batch`` file, counted at upload."""


@dataclass(frozen=True, slots=True)
class LineError:
    """A line that could not run: in the batch's ``errors`` and in its error file."""

    line: int
    """1-based, as an editor counts (OpenAI's ``line``)."""
    code: str
    message: str
    param: str | None = None


@dataclass(frozen=True, slots=True)
class RequestCounts:
    total: int = 0
    completed: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class Batch:
    id: str
    tenant_id: int
    """Whose batch it is (``registry.model.Tenant.id``): its lines run as that tenant."""
    tenant: str
    """The tenant's name, for display and logs."""
    key_id: str
    """The key that created it: the lines' usage events name it."""
    endpoint: BatchEndpoint
    input_file_id: str
    completion_window: str
    status: BatchStatus
    created_at: int
    expires_at: int
    """created_at + the completion window: a batch still running then is ``expired``."""
    metadata: dict[str, str] = field(default_factory=dict)
    counts: RequestCounts = RequestCounts()
    errors: tuple[LineError, ...] = ()
    """Why the batch failed, or which lines failed validation (capped; see store)."""
    output_file_id: str | None = None
    error_file_id: str | None = None
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    traceparent: str = ""
    """The W3C trace of the request that created it: each line's request continues it."""


@dataclass(frozen=True, slots=True)
class LineResult:
    """One line's final answer, recorded once (the store ignores a second)."""

    line: int
    """1-based, as ``LineError.line``: the line's number in the input file."""
    ok: bool
    """True: a 2xx answer (the output file); False: the error file."""
    data: bytes
    """The whole output or error file line, JSON, without its newline."""


TenantLimit = Literal["max_files", "max_stored_bytes", "max_open_batches"]


@dataclass(frozen=True, slots=True)
class TenantBounds:
    """What one tenant may keep on the Batch API: the gateway's settings, or the tenant's own
    rules where it has them (``registry.model.BatchLimits``)."""

    max_files: int
    max_stored_bytes: int
    max_open_batches: int


@dataclass(frozen=True, slots=True)
class TenantUse:
    """What one tenant keeps now: its files (inputs and outputs), their bytes, and its
    batches not yet final."""

    files: int
    stored_bytes: int
    open_batches: int


@dataclass(frozen=True, slots=True)
class OverLimit:
    """A write refused by a tenant's bound: which bound, its value, and the use found (a
    value, not an exception: the route turns it into the HTTP answer)."""

    limit: TenantLimit
    allowed: int
    used: int
