"""``/v1/weights``: the gateway as the registry host, serving its model store to workers.

- ``GET /v1/weights/{version}``: the artifact's listing (``ArtifactListing``: each file's
  name, size and SHA-256, and its signature if it has one);
- ``GET /v1/weights/{version}/{file}``: one of its three files, streamed from disk.
  One byte range may be asked for (``Range: bytes=N-``, ``bytes=N-M`` or ``bytes=-N``):
  206 with ``Content-Range``; a range that starts past the end, or any other form, 416
  with ``Content-Range: bytes */<size>``. The ETag is the file's SHA-256 (quoted): the
  version names the content, so it never changes.

Who may read: an admin key, or ``weights.token`` (the worker credential, compared in
constant time): the routes declare ``weights_token``, which this mount adds to the
edge's checks (``KeyChecks.token_or_admin``: through the failed-key limiter); a tenant's
key is refused (403) and no key or an unknown one (401), before the path is looked at.
The listing is what ``store_listing`` reads (the hashes recorded when the artifact was
stored), kept per version once read: an artifact never changes, and a file changed
behind the store's back is caught by the fetcher, which checks every file against it.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from headway.control.mount import Mount
from headway.errors import (
    Forbidden,
    HeadwayError,
    NotFound,
    RangeNotSatisfiable,
    Unauthorized,
)
from headway.gateway.auth.checks import KeyChecks
from headway.gateway.openapi import DocumentedRoute, Operation
from headway.gateway.query import decimal
from headway.gateway.snapshots import Snapshots
from headway.http.asgi import FileResponse, Handler, Request, Response, json_response
from headway.http.router import Route
from headway.models.errors import ModelIntegrityError, ModelNotFoundError
from headway.models.store import ARTIFACT_FILES, ModelStore
from headway.models.weights.base import ArtifactListing
from headway.models.weights.directory import artifact_file, store_listing
from headway.registry.model import Principal

LISTING_PATH = "/v1/weights/{version}"
FILE_PATH = "/v1/weights/{version}/{file}"
MAX_CACHED_LISTINGS = 256
_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)")
_VERSION_SCHEMA = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_FILE_SCHEMA = {"type": "string", "enum": sorted(ARTIFACT_FILES)}
_RANGE_HEADER = {
    "name": "Range",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": "^bytes=([0-9]+-[0-9]*|-[0-9]+)$"},
    "description": "One byte range (absent: the whole file); one that starts at or past the "
    "end is a 416.",
}


@dataclass
class WeightsParts:
    snapshots: Snapshots
    """For the admin keys."""
    store: ModelStore
    token: str = ""
    """``weights.token``; empty: admin keys only."""
    listings: dict[str, ArtifactListing] = field(default_factory=dict)


async def listing_of(parts: WeightsParts, version: str) -> ArtifactListing:
    """The files as first read (they never change), the signature as it is now (an
    artifact may be signed while it is served)."""
    try:
        known = parts.listings.get(version)
        if known is None:
            known = await asyncio.to_thread(store_listing, parts.store, version)
            if len(parts.listings) >= MAX_CACHED_LISTINGS:
                parts.listings.pop(next(iter(parts.listings)))
            parts.listings[version] = known
        signature = await asyncio.to_thread(parts.store.signature, version)
    except ModelNotFoundError as exc:
        raise NotFound(f"no model version {version[:80]!r} in this gateway's store") from exc
    except ModelIntegrityError as exc:
        raise HeadwayError(f"this gateway's copy of model {version} is damaged: {exc}") from exc
    return ArtifactListing(version, known.files, signature)


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end)`` (end exclusive) of a ``Range`` header over ``size`` bytes; None
    for no header (the whole file). ``RangeNotSatisfiable`` for a range that starts at or
    past the end, and for any form but one ``bytes`` range."""
    if header is None:
        return None
    match = _RANGE.fullmatch(header.strip())
    unsatisfiable = {"content-range": f"bytes */{size}"}
    if match is None or match.group(1) == match.group(2) == "":
        raise RangeNotSatisfiable(
            f"Range must be one range: bytes=START-, bytes=START-END or bytes=-LAST, "
            f"not {header[:60]!r}",
            headers=unsatisfiable,
        )
    # Any number past the end reads as size + 1: a range of 5,000 digits is past it too.
    first, last = (decimal(group, cap=size + 1) for group in match.group(1, 2))
    if first is None:
        assert last is not None
        start, end = max(0, size - last), size
    else:
        start = first
        end = size if last is None else min(last + 1, size)
        if last is not None and last < start:
            raise RangeNotSatisfiable(
                f"Range {header[:60]!r} ends before it starts", headers=unsatisfiable
            )
    if start >= size or start >= end:
        raise RangeNotSatisfiable(
            f"Range {header[:60]!r} starts at or past the end of the file ({size} bytes)",
            headers=unsatisfiable,
        )
    return start, end


def get_listing(parts: WeightsParts) -> Handler:
    async def handle(request: Request) -> Response:
        return json_response(await listing_of(parts, request.path_params["version"]))

    return handle


def get_file(parts: WeightsParts) -> Handler:
    async def handle(request: Request) -> Response:
        version, name = request.path_params["version"], request.path_params["file"]
        entry = (await listing_of(parts, version)).file(name)
        if entry is None:
            raise NotFound(f"model {version} has no file {name[:80]!r}")
        path = artifact_file(parts.store, version, name)
        headers = {"etag": f'"{entry.sha256}"', "accept-ranges": "bytes"}
        span = byte_range(request.headers.get("range"), entry.size)
        status, (start, end) = 200, (0, entry.size)
        if span is not None:
            status, (start, end) = 206, span
            headers["content-range"] = f"bytes {start}-{end - 1}/{entry.size}"
        return FileResponse(
            b"",
            status,
            "application/octet-stream",
            headers,
            path=path,
            offset=start,
            length=end - start,
        )

    return handle


WEIGHTS_TOKEN = "weights_token"
"""The worker credential (``weights.token``), or an admin key → ``Principal`` or None."""


def weights_mount(parts: WeightsParts, keys: KeyChecks) -> Mount:
    token = parts.token.encode()

    async def check(request: Request) -> Principal | None:
        return await keys.token_or_admin(request, token)

    return Mount(routes(parts), {WEIGHTS_TOKEN: check})


def routes(parts: WeightsParts) -> list[DocumentedRoute]:
    refusals = (Unauthorized, Forbidden, NotFound)
    return [
        DocumentedRoute(
            Route("GET", LISTING_PATH, "weights_listing", get_listing(parts), auth=WEIGHTS_TOKEN),
            Operation(
                "A model version's files: names, sizes, SHA-256s, signature (admin key or "
                "the worker credential)",
                ArtifactListing,
                errors=refusals,
                authenticated=True,
                path={"version": _VERSION_SCHEMA},
            ),
        ),
        DocumentedRoute(
            Route("GET", FILE_PATH, "weights_file", get_file(parts), auth=WEIGHTS_TOKEN),
            Operation(
                "One file of a model version, streamed; one byte Range gives 206 (admin key "
                "or the worker credential)",
                "application/octet-stream",
                errors=(*refusals, RangeNotSatisfiable),
                authenticated=True,
                path={"version": _VERSION_SCHEMA, "file": _FILE_SCHEMA},
                headers=[_RANGE_HEADER],
                other_answers={206: "application/octet-stream"},
            ),
        ),
    ]
