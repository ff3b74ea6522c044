"""``/v1/files``: a tenant's JSONL batch inputs and the outputs its batches wrote.

An upload is ``multipart/form-data`` with ``purpose`` (``batch``) and ``file``, and optionally
OpenAI's ``expires_after[anchor]`` (``created_at``) and ``expires_after[seconds]`` (an hour to
30 days; without them, ``batches.file_retention_s``). It is streamed, never held, and refused as
early as it can be: the key from the headers (a stranger's upload costs one 401), the content
type and declared length, the tenant's and this gateway's uploads in progress
(``uploads.UploadSlots``: 429), what the tenant keeps (``bounds``). Only then is the body read
(``FormReader``) into a temporary file in the file store's directory, hashed and its lines
checked as they come (``jsonl.UploadCheck``, the executor's own reading), the byte limits
enforced at the chunk that passes them. The first problem answers at once and removes the
temporary file, as a disconnect does. A checked file is fsynced, then moved into place by its
digest inside the transaction that records it (the bounds checked again, the content's lock
held): the 200 comes after both are durable.

Every route reads only the caller's own files: another tenant's id is a 404, exactly as an
unknown one. A file still read by an unfinished batch cannot be deleted (409).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from headway.batches.filestore import FileStore, FileWriter
from headway.batches.inputs import body_parser
from headway.batches.jsonl import BodyParsers, UploadCheck
from headway.batches.model import (
    ENDPOINTS,
    RUNNING,
    FileObject,
    OverLimit,
    TenantBounds,
    new_file_id,
)
from headway.batches.offload import off_loop
from headway.control.batches import schemas
from headway.control.batches.bounds import bounds_of, full_before_upload, refusal
from headway.control.batches.parts import BatchParts
from headway.control.batches.uploads import RETRY_AFTER_S as UPLOAD_RETRY_AFTER_S
from headway.control.batches.uploads import SlotsFull, UploadSlots
from headway.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    LimitReached,
    NotFound,
    PayloadTooLarge,
    StorageLimitReached,
    Unauthorized,
    UnsupportedMediaType,
    ValidationFailed,
)
from headway.gateway.auth.kinds import TENANT_KEY
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.query import one_each, query_limit, whole_number
from headway.gateway.stages.authenticate import caller_of
from headway.http.asgi import (
    FileResponse,
    Handler,
    Request,
    Response,
    body_chunks,
    json_response,
)
from headway.http.multipart import FormEvent, FormReader, PartData, PartStart
from headway.http.router import Route
from headway.registry.model import Tenant
from headway.settings import LimitsSettings

MAX_FILES_LISTED = 10_000
MIN_EXPIRY_S = 3600
MAX_EXPIRY_S = 30 * 86400
MULTIPART_SLACK = 64 << 10
"""Room in an upload's body for the form's own bytes around the file."""
LINE_ENVELOPE_BYTES = 16 << 10
"""Room in a request line around its body (custom_id of up to 512 characters, escaped)."""
FLUSH_BYTES = 256 << 10
"""File bytes gathered before they are written and checked (in a thread)."""
MAX_FIELD_BYTES = 1024
"""The most a plain form field (purpose, expires_after[…]) may hold."""
_FIELDS = {"purpose", "file", "expires_after[anchor]", "expires_after[seconds]"}
_PLAIN_FIELDS = _FIELDS - {"file"}
_ERRORS = (Unauthorized, Forbidden, NotFound)


def routes(parts: BatchParts) -> list[DocumentedRoute]:
    settings = parts.settings
    upload_limit = settings.max_file_bytes + MULTIPART_SLACK
    slots = UploadSlots(settings.max_uploads_per_tenant, settings.max_uploads)
    return [
        DocumentedRoute(
            Route(
                "POST",
                "/v1/files",
                "files",
                upload(parts, slots),
                max_body_bytes=upload_limit,
                streams_body=True,
                auth=TENANT_KEY,
            ),
            Operation(
                "Upload a JSONL batch input (multipart/form-data: purpose=batch, file)",
                schemas.File,
                errors=(
                    *_ERRORS,
                    InvalidRequest,
                    StorageLimitReached,
                    PayloadTooLarge,
                    UnsupportedMediaType,
                    ValidationFailed,
                    LimitReached,
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


def upload(parts: BatchParts, slots: UploadSlots) -> Handler:
    settings = parts.settings
    body_limit = settings.max_file_bytes + MULTIPART_SLACK
    parsers = _line_parsers(parts.limits)

    async def handle(request: Request) -> Response:
        caller = caller_of(request)  # the edge checked the key from the headers alone
        tenant = caller.tenant
        request.tenant = tenant.name
        reader = FormReader(request.headers.get("content-type", ""))
        full = slots.take(tenant.id)
        if full is not None:
            raise _slots_refusal(full)
        try:
            bounds = bounds_of(tenant, settings)
            use = await off_loop(parts.store.usage, tenant.id)
            over = full_before_upload(bounds, use)
            if over is not None:
                raise refusal(over)
            upload = _Upload(
                parts.files,
                UploadCheck(
                    max_lines=settings.max_lines,
                    max_line_bytes=parts.limits.max_body_bytes + LINE_ENVELOPE_BYTES,
                    parsers=parsers,
                ),
                max_file_bytes=settings.max_file_bytes,
                room=bounds.max_stored_bytes - use.stored_bytes,
                stored=use.stored_bytes,
            )
            try:
                await upload.receive(request, reader, body_limit)
                return await _keep(parts, upload, tenant, bounds)
            finally:
                await upload.discard()
        finally:
            slots.give_back(tenant.id)

    return handle


async def _keep(
    parts: BatchParts, upload: _Upload, tenant: Tenant, bounds: TenantBounds
) -> Response:
    """The received upload checked as a form, its file placed and recorded."""
    form = upload.fields
    purpose = _text(form, "purpose")
    if purpose != "batch":
        raise ValidationFailed(f"purpose {purpose[:40]!r} is not taken here; use 'batch'")
    if upload.filename is None:
        raise ValidationFailed("the form has no file: send the JSONL as the field `file`")
    keep_s = _expiry_s(form, parts.settings.file_retention_s)
    lines = await upload.finish()
    size = upload.size
    digest = await upload.seal()  # checked first: nothing kept on a 4xx
    now = parts.now()
    record = FileObject(
        id=new_file_id(),
        tenant_id=tenant.id,
        tenant=tenant.name,
        purpose="batch",
        filename=upload.filename[:255] or "input.jsonl",
        bytes=size,
        sha256=digest,
        created_at=now,
        expires_at=now + keep_s,
        lines=lines,
    )
    # The bytes are placed in the record's own transaction, under the content's lock:
    # durable before the record commits, and never a reused copy a reaper deletes meanwhile.
    over = await off_loop(parts.store.add_file, record, bounds, place=upload.place)
    if over is not None:  # another upload of the tenant's took the room meanwhile
        raise refusal(over, file_bytes=size)  # not placed: the temporary file is discarded
    return json_response(schemas.file_of(record))


class _Upload:
    """One upload's form as its body arrives: the plain fields kept (each a few bytes),
    the file part written to a ``FileWriter`` and checked line by line, a megabyte at a
    time in a thread."""

    def __init__(
        self, files: FileStore, check: UploadCheck, *, max_file_bytes: int, room: int, stored: int
    ) -> None:
        self._files, self._check = files, check
        self._max_file_bytes, self._room, self._stored = max_file_bytes, room, stored
        self.fields: dict[str, bytes] = {}
        self.filename: str | None = None
        self.size = 0
        self._writer: FileWriter | None = None
        self._current: str | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    async def receive(self, request: Request, reader: FormReader, body_limit: int) -> None:
        received = 0
        async for chunk in body_chunks(request):
            received += len(chunk)
            if received > body_limit:
                raise PayloadTooLarge(f"request body exceeds {body_limit} bytes")
            for event in reader.feed(chunk):
                await self._take(event)
            if self._pending_bytes >= FLUSH_BYTES:
                await self._flush()
        reader.close()
        await self._flush()

    async def finish(self) -> int:
        return await off_loop(self._check.finish)

    async def seal(self) -> str:
        """The file's bytes fsynced in its temporary file; their digest."""
        writer = self._writer
        assert writer is not None
        return await off_loop(writer.seal)

    def place(self) -> None:
        """The sealed bytes put in place by their digest (``BatchStore.add_file`` calls it
        in its transaction, in a thread)."""
        writer = self._writer
        assert writer is not None
        writer.place()

    async def discard(self) -> None:
        """Remove the temporary file, if it was not placed. Run in a thread even when
        the request was cancelled: a write still running there finishes first."""
        writer, self._writer = self._writer, None
        if writer is not None:
            await off_loop(writer.discard)

    async def _take(self, event: FormEvent) -> None:
        if isinstance(event, PartStart):
            if event.name not in _FIELDS:
                raise ValidationFailed(
                    f"unknown form field {event.name[:40]!r}; send purpose and file"
                )
            self._current = event.name
            if event.name == "file":
                if event.filename is None:
                    raise ValidationFailed(
                        "the form has no file: send the JSONL as the field `file`"
                    )
                self.filename = event.filename
                self._writer = await off_loop(self._files.writer)
            else:
                self.fields[event.name] = b""
        elif isinstance(event, PartData):
            if self._current == "file":
                self._file_bytes(event.data)
            else:
                self._field_bytes(event.data)
        elif self._current in _PLAIN_FIELDS:
            _check_field(self.fields, self._current)

    def _file_bytes(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self._max_file_bytes:
            raise PayloadTooLarge(
                f"the file has more than {self._max_file_bytes} bytes; the limit is"
                f" {self._max_file_bytes}"
            )
        if self.size > self._room:
            raise refusal(
                OverLimit("max_stored_bytes", self._stored + self._room, self._stored),
                file_bytes=self.size,
            )
        self._pending.append(data)
        self._pending_bytes += len(data)

    def _field_bytes(self, data: bytes) -> None:
        assert self._current is not None
        value = self.fields[self._current] + data
        if len(value) > MAX_FIELD_BYTES:
            raise ValidationFailed(
                f"the form field {self._current!r} has more than {MAX_FIELD_BYTES} bytes"
            )
        self.fields[self._current] = value

    async def _flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        writer = self._writer
        assert writer is not None
        await off_loop(_write_and_check, writer, self._check, data)


def _write_and_check(writer: FileWriter, check: UploadCheck, data: bytes) -> None:
    check.feed(data)  # a bad line refuses before its bytes are written
    writer.write(data)


def _check_field(form: Mapping[str, bytes], name: str) -> None:
    """A plain field checked as soon as it is complete, so a wrong form is refused before
    the file streams."""
    if name == "purpose":
        purpose = _text(form, "purpose")
        if purpose != "batch":
            raise ValidationFailed(f"purpose {purpose[:40]!r} is not taken here; use 'batch'")
    else:
        _expiry_s(form, 0)


def _slots_refusal(full: SlotsFull) -> LimitReached:
    if full.bound == "tenant":
        return LimitReached(
            f"this tenant has {full.used} uploads in progress on this gateway; the limit is"
            f" {full.allowed} (batches.max_uploads_per_tenant): retry when one has finished",
            retry_after_s=UPLOAD_RETRY_AFTER_S,
        )
    return LimitReached(
        f"this gateway has {full.used} uploads in progress; the limit is {full.allowed}"
        " (batches.max_uploads): retry shortly",
        retry_after_s=UPLOAD_RETRY_AFTER_S,
    )


def _line_parsers(limits: LimitsSettings) -> BodyParsers:
    """Each batch endpoint's strict body parser, as the executor runs it (``inputs``)."""
    parsers: dict[str, Callable[[bytes], int]] = {
        endpoint: body_parser(endpoint, limits) for endpoint in ENDPOINTS
    }

    def parser_of(url: str) -> Callable[[bytes], int] | None:
        return parsers.get(url)

    return parser_of


def list_files(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        tenant_id = caller_of(request).tenant.id
        query = one_each(request.query(), {"purpose", "limit", "after", "order"})
        limit = query_limit(query.get("limit"), default=MAX_FILES_LISTED, most=MAX_FILES_LISTED)
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise ValidationFailed("order must be 'asc' or 'desc'")
        found = await off_loop(
            parts.store.files,
            tenant_id,
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
        if not await off_loop(parts.files.exists, record.sha256):
            raise NotFound(f"file {record.id} has no content any more (it was just deleted)")
        return FileResponse(
            b"",
            content_type="application/octet-stream",
            path=parts.files.path_of(record.sha256),
            length=record.bytes,
        )

    return handle


def delete_file(parts: BatchParts) -> Handler:
    async def handle(request: Request) -> Response:
        record = await _own_file(parts, request)
        running = await off_loop(parts.store.batches_in, RUNNING, 10_000)
        if any(b.input_file_id == record.id and b.tenant_id == record.tenant_id for b in running):
            raise Conflict(f"file {record.id} is the input of a batch still running; cancel it")
        await remove_file(parts, record)
        return json_response(schemas.FileDeleted(record.id, True))

    return handle


async def remove_file(parts: BatchParts, record: FileObject) -> None:
    """The record, then its bytes if no other record (another tenant's upload of the same
    content, say) still points at them, decided under the content's lock."""
    await off_loop(parts.store.delete_file, record.tenant_id, record.id)
    await off_loop(parts.store.release_content, record.sha256, parts.files.delete)


async def _own_file(parts: BatchParts, request: Request) -> FileObject:
    tenant_id = caller_of(request).tenant.id
    file_id = request.path_params["file_id"]
    record = await off_loop(parts.store.file, tenant_id, file_id)
    if record is None:
        raise NotFound(f"no file {file_id[:64]!r}")
    return record


def _text(form: Mapping[str, bytes], name: str) -> str:
    data = form.get(name)
    if data is None:
        raise ValidationFailed(f"the form has no `{name}` field")
    try:
        return data.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ValidationFailed(f"`{name}` is not UTF-8 text") from exc


def _expiry_s(form: Mapping[str, bytes], default_s: int) -> int:
    """``expires_after[seconds]`` after creation, or ``default_s``. The anchor may be left
    out (``created_at`` is the only one); an anchor alone changes nothing."""
    if "expires_after[anchor]" in form and _text(form, "expires_after[anchor]") != "created_at":
        raise ValidationFailed("expires_after[anchor] must be 'created_at'")
    if "expires_after[seconds]" not in form:
        return default_s
    return whole_number(
        _text(form, "expires_after[seconds]"),
        "expires_after[seconds]",
        least=MIN_EXPIRY_S,
        most=MAX_EXPIRY_S,
    )


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
