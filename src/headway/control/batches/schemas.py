"""The Batch API's bodies, as OpenAI defines them (``openai.types.Batch``, ``FileObject``).

Answers carry every field OpenAI's do, ``null`` where it has no value, so the official
SDK parses them unchanged. Requests are decoded strictly: an unknown field is a 422.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from headway.batches.model import Batch, BatchEndpoint, FileObject

NO_NUL = "^[^\x00]*$"
"""What the store keeps may not hold a NUL (Postgres cannot): stated, so a client knows."""
MetadataKey = Annotated[str, msgspec.Meta(max_length=64, pattern=NO_NUL)]
MetadataValue = Annotated[str, msgspec.Meta(max_length=512, pattern=NO_NUL)]
FileId = Annotated[str, msgspec.Meta(pattern=NO_NUL)]


class BatchCreate(msgspec.Struct, forbid_unknown_fields=True):
    """OpenAI's ``POST /v1/batches``: metadata of at most 16 pairs, keys of at most 64
    characters and values of at most 512, as OpenAI's."""

    input_file_id: FileId
    endpoint: BatchEndpoint
    completion_window: Literal["24h"]
    metadata: Annotated[dict[MetadataKey, MetadataValue], msgspec.Meta(max_length=16)] | None = None


class File(msgspec.Struct):
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str
    expires_at: int | None
    object: Literal["file"] = "file"
    status: Literal["processed"] = "processed"
    status_details: None = None


class FileList(msgspec.Struct):
    data: list[File]
    has_more: bool
    first_id: str | None
    last_id: str | None
    object: Literal["list"] = "list"


class FileDeleted(msgspec.Struct):
    id: str
    deleted: bool
    object: Literal["file"] = "file"


class BatchError(msgspec.Struct):
    code: str
    message: str
    param: str | None
    line: int | None


class BatchErrors(msgspec.Struct):
    data: list[BatchError]
    object: Literal["list"] = "list"


class RequestCounts(msgspec.Struct):
    total: int
    completed: int
    failed: int


class BatchObject(msgspec.Struct):
    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    request_counts: RequestCounts
    metadata: dict[str, str] | None
    errors: BatchErrors | None
    output_file_id: str | None
    error_file_id: str | None
    in_progress_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    object: Literal["batch"] = "batch"


class BatchList(msgspec.Struct):
    data: list[BatchObject]
    has_more: bool
    first_id: str | None
    last_id: str | None
    object: Literal["list"] = "list"


batch_create_decoder = msgspec.json.Decoder(BatchCreate)


def file_of(record: FileObject) -> File:
    return File(
        record.id,
        record.bytes,
        record.created_at,
        record.filename,
        record.purpose,
        record.expires_at,
    )


def batch_of(batch: Batch) -> BatchObject:
    errors = (
        BatchErrors([BatchError(e.code, e.message, e.param, e.line) for e in batch.errors])
        if batch.errors
        else None
    )
    counts = batch.counts
    return BatchObject(
        id=batch.id,
        endpoint=batch.endpoint,
        input_file_id=batch.input_file_id,
        completion_window=batch.completion_window,
        status=batch.status,
        created_at=batch.created_at,
        expires_at=batch.expires_at,
        request_counts=RequestCounts(counts.total, counts.completed, counts.failed),
        metadata=batch.metadata or None,
        errors=errors,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        in_progress_at=batch.in_progress_at,
        finalizing_at=batch.finalizing_at,
        completed_at=batch.completed_at,
        failed_at=batch.failed_at,
        expired_at=batch.expired_at,
        cancelling_at=batch.cancelling_at,
        cancelled_at=batch.cancelled_at,
    )
