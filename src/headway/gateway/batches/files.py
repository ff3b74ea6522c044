"""``/v1/files``: a tenant's JSONL batch inputs and the outputs its batches wrote.

An upload is ``multipart/form-data`` with ``purpose`` (``batch``: the only purpose
here) and ``file``, and optionally OpenAI's ``expires_after[anchor]`` (``created_at``)
and ``expires_after[seconds]`` (an hour to 30 days); without them a file lives
``batches.file_retention_s``. The file is checked before it is kept (``jsonl.
check_upload``: at most ``batches.max_file_bytes`` and ``batches.max_lines`` lines, each
a JSON object), then stored by content (``filestore``) and recorded. Every route reads
only the caller's own files: another tenant's id is a 404, exactly as an unknown one.
A file still read by a batch that has not finished cannot be deleted (409).
"""

from __future__ import annotations

from collections.abc import Mapping

from headway.batches.jsonl import check_upload
from headway.batches.model import RUNNING, FileObject, new_file_id
from headway.batches.offload import off_loop
from headway.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    UnsupportedMediaType,
    ValidationFailed,
)
from headway.gateway.auth.kinds import TENANT_KEY
from headway.gateway.batches import schemas
from headway.gateway.batches.parts import BatchParts
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.query import one_each, query_limit
from headway.gateway.stages.authenticate import by_key
from headway.http.asgi import Handler, Request, Response, json_response
from headway.http.multipart import FormPart, parse_form
from headway.http.router import Route

MAX_FILES_LISTED = 10_000
MIN_EXPIRY_S = 3600
MAX_EXPIRY_S = 30 * 86400
MULTIPART_SLACK = 64 << 10
"""Room in an upload's body for the form's own bytes around the file."""
_FIELDS = {"purpose", "file", "expires_after[anchor]", "expires_after[seconds]"}
_ERRORS = (Unauthorized, Forbidden, NotFound)


def routes(parts: BatchParts) -> list[DocumentedRoute]:
    upload_limit = parts.settings.max_file_bytes + MULTIPART_SLACK
    return [
        DocumentedRoute(
            Route(
                "POST",
                "/v1/files",
                "files",
                upload(parts),
                max_body_bytes=upload_limit,
                auth=TENANT_KEY,
            ),
            Operation(
                "Upload a JSONL batch input (multipart/form-data: purpose=batch, file)",
                schemas.File,
                errors=(
                    *_ERRORS,
                    InvalidRequest,
                    PayloadTooLarge,
                    UnsupportedMediaType,
                    ValidationFailed,
                ),
                authenticated=True,
                form=upload_form(parts.settings.max_file_bytes),
            ),
        ),
        DocumentedRoute(
            Route("GET", "/v1/files", "files", list_files(parts), auth=TENANT_KEY),
            Operation(
                "The tenant's files, newest first (purpose, limit, after, order)",
                schemas.FileList,
                errors=(*_ERRORS, ValidationFailed),
                authenticated=True,
                query=_list_parameters(),
            ),
        ),
        DocumentedRoute(
            Route("GET", "/v1/files/{file_id}", "file", get_file(parts), auth=TENANT_KEY),
            Operation(
                "One of the tenant's files", schemas.File, errors=_ERRORS, authenticated=True
            ),
        ),
        DocumentedRoute(
            Route(
                "GET",
                "/v1/files/{file_id}/content",
                "file_content",
                file_content(parts),
                auth=TENANT_KEY,
            ),
            Operation(
                "The file's bytes (JSONL)",
                "application/octet-stream",
                errors=_ERRORS,
                authenticated=True,
            ),
        ),
        DocumentedRoute(
            Route("DELETE", "/v1/files/{file_id}", "file", delete_file(parts), auth=TENANT_KEY),
            Operation(
                "Delete one of the tenant's files (not one a running batch reads)",
                schemas.FileDeleted,
                errors=(*_ERRORS, Conflict),
                authenticated=True,
            ),
        ),
    ]


def upload(parts: BatchParts) -> Handler:
    settings = parts.settings

    async def handle(request: Request) -> Response:
        tenant = by_key(request, parts.snapshots.current).tenant.name
        request.tenant = tenant
        form = parse_form(request.headers.get("content-type", ""), request.body)
        unknown = sorted(set(form) - _FIELDS)
        if unknown:
            raise ValidationFailed(f"unknown form field {unknown[0][:40]!r}; send purpose and file")
        purpose = _text(form, "purpose")
        if purpose != "batch":
            raise ValidationFailed(f"purpose {purpose[:40]!r} is not taken here; use 'batch'")
        part = form.get("file")
        if part is None or part.filename is None:
            raise ValidationFailed("the form has no file: send the JSONL as the field `file`")
        keep_s = _expiry_s(form, settings.file_retention_s)
        data = bytes(part.data)
        lines = await off_loop(
            check_upload, data, max_bytes=settings.max_file_bytes, max_lines=settings.max_lines
        )
        now = parts.now()
        digest = await off_loop(parts.files.put, data)  # checked first: nothing kept on a 4xx
        record = FileObject(
            id=new_file_id(),
            tenant=tenant,
            purpose="batch",
            filename=part.filename[:255] or "input.jsonl",
            bytes=len(data),
            sha256=digest,
            created_at=now,
            expires_at=now + keep_s,
            lines=lines,
        )
        await off_loop(parts.store.add_file, record)
        return json_response(schemas.file_of(record))

    return handle


def list_files(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        tenant = by_key(request, parts.snapshots.current).tenant.name
        query = one_each(request.query(), {"purpose", "limit", "after", "order"})
        limit = query_limit(query.get("limit"), default=MAX_FILES_LISTED, most=MAX_FILES_LISTED)
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise ValidationFailed("order must be 'asc' or 'desc'")
        found = await off_loop(
            parts.store.files,
            tenant,
            purpose=query.get("purpose"),
            limit=limit + 1,
            after=query.get("after"),
            order="asc" if order == "asc" else "desc",
        )
        data = [schemas.file_of(record) for record in found[:limit]]
        first, last = (data[0].id, data[-1].id) if data else (None, None)
        return json_response(schemas.FileList(data, len(found) > limit, first, last))

    return handle


def get_file(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        return json_response(schemas.file_of(await _own_file(parts, request)))

    return handle


def file_content(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        record = await _own_file(parts, request)
        data = await off_loop(parts.files.read, record.sha256)
        return Response(data, content_type="application/octet-stream")

    return handle


def delete_file(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        record = await _own_file(parts, request)
        running = await off_loop(parts.store.batches_in, RUNNING, 10_000)
        if any(b.input_file_id == record.id and b.tenant == record.tenant for b in running):
            raise Conflict(f"file {record.id} is the input of a batch still running; cancel it")
        await remove_file(parts, record)
        return json_response(schemas.FileDeleted(record.id, True))

    return handle


async def remove_file(parts: BatchParts, record: FileObject) -> None:
    """The record, then its bytes if no other record (another tenant's upload of the same
    content, say) still points at them."""
    await off_loop(parts.store.delete_file, record.tenant, record.id)
    if not await off_loop(parts.store.digest_in_use, record.sha256):
        await off_loop(parts.files.delete, record.sha256)


async def _own_file(parts: BatchParts, request: Request) -> FileObject:
    tenant = by_key(request, parts.snapshots.current).tenant.name
    file_id = request.path_params["file_id"]
    record = await off_loop(parts.store.file, tenant, file_id)
    if record is None:
        raise NotFound(f"no file {file_id[:64]!r}")
    return record


def _text(form: Mapping[str, FormPart], name: str) -> str:
    part = form.get(name)
    if part is None:
        raise ValidationFailed(f"the form has no `{name}` field")
    try:
        return bytes(part.data).decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ValidationFailed(f"`{name}` is not UTF-8 text") from exc


def _expiry_s(form: Mapping[str, FormPart], default_s: int) -> int:
    """``expires_after[seconds]`` after creation, or ``default_s``. The anchor may be left
    out (``created_at`` is the only one); an anchor alone changes nothing."""
    if "expires_after[anchor]" in form and _text(form, "expires_after[anchor]") != "created_at":
        raise ValidationFailed("expires_after[anchor] must be 'created_at'")
    if "expires_after[seconds]" not in form:
        return default_s
    seconds = _text(form, "expires_after[seconds]")
    if not seconds.isdigit() or not MIN_EXPIRY_S <= int(seconds) <= MAX_EXPIRY_S:
        raise ValidationFailed(
            f"expires_after[seconds] must be a whole number from {MIN_EXPIRY_S} to {MAX_EXPIRY_S}"
        )
    return int(seconds)


def upload_form(max_bytes: int) -> dict[str, object]:
    """The upload's form, as OpenAPI describes a multipart body (OpenAI's fields)."""
    return {
        "type": "object",
        "required": ["purpose", "file"],
        "properties": {
            "purpose": {"type": "string", "enum": ["batch"]},
            "file": {"type": "string", "format": "binary", "maxLength": max_bytes},
            "expires_after[anchor]": {"type": "string", "enum": ["created_at"]},
            "expires_after[seconds]": {
                "type": "integer",
                "minimum": MIN_EXPIRY_S,
                "maximum": MAX_EXPIRY_S,
            },
        },
        "additionalProperties": False,
    }


def _list_parameters() -> list[dict[str, object]]:
    return [
        {"name": "purpose", "in": "query", "schema": {"type": "string"}},
        {
            "name": "limit",
            "in": "query",
            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_FILES_LISTED},
        },
        {"name": "after", "in": "query", "schema": {"type": "string"}},
        {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
    ]
