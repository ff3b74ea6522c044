"""``GET /openapi.json``: the contract, built from the routes, the structs and the error tree.

Every route the router serves is described (``DocumentedRoute`` pairs a route with
its ``Operation``): its request and response bodies come from the msgspec structs
that decode and encode them; its error answers from the ``errors.py`` classes it can
raise (status, type and docstring); and the limits the server enforces are stated
where a client (or a schema-driven fuzzer) reads them: no empty text, at most
``max_texts`` texts of ``max_chars`` characters, ``top_n`` at least 1, and
``dimensions`` one of the widths of the embedding models being served. A request
valid by this document is one the server accepts, bar the limits a schema cannot
state (the body's byte size, whether a named model exists).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import msgspec

from headway.errors import HeadwayError
from headway.gateway import schemas
from headway.http.router import Route, parameters_of
from headway.settings import LimitsSettings

JSON = "application/json"
_STRING: Mapping[str, Any] = {"type": "string", "minLength": 1}
_INTERNAL_ERROR = "`internal_error`: An unexpected failure (no detail; logged with the request id)."


@dataclass(frozen=True, slots=True)
class Operation:
    """How the document describes one route."""

    summary: str
    response: type[msgspec.Struct] | str
    """The 200 body's struct, or the media type of a body described elsewhere."""
    request: type[msgspec.Struct] | None = None
    errors: tuple[type[HeadwayError], ...] = ()
    authenticated: bool = False
    deadline: bool = False
    """Takes ``X-Timeout-Ms``."""
    other_answers: Mapping[int, type[msgspec.Struct]] = field(default_factory=dict)
    """Non-error answers with a body of their own (``/readyz``'s 503)."""
    query: Sequence[Mapping[str, Any]] = ()
    """Query parameters, as OpenAPI parameter objects."""
    status: int = 200
    """The status of a success (201: created)."""
    path: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The schema of a path parameter other than a plain string (a numeric id)."""
    form: Mapping[str, Any] | None = None
    """The schema of a ``multipart/form-data`` body (a file upload's), instead of JSON."""
    hidden: bool = False
    """Served but not described: not part of the API (the operator console's pages)."""


@dataclass(frozen=True, slots=True)
class DocumentedRoute:
    route: Route
    operation: Operation


def openapi_document(
    routes: Sequence[DocumentedRoute],
    limits: LimitsSettings,
    version: str,
    dimensions: Collection[int] = (),
) -> dict[str, Any]:
    """``dimensions``: the widths of the embedding models served now (empty: unknown)."""
    routes = [documented for documented in routes if not documented.operation.hidden]
    structs: set[type[msgspec.Struct]] = {schemas.ErrorResponse}
    for documented in routes:
        op = documented.operation
        structs.update(s for s in (op.request, op.response) if isinstance(s, type))
        structs.update(op.other_answers.values())
    _, components = msgspec.json.schema_components(
        sorted(structs, key=lambda s: s.__name__), ref_template="#/components/schemas/{name}"
    )
    _state_limits(components, limits, sorted(dimensions))
    paths: dict[str, dict[str, Any]] = {}
    for documented in routes:
        route = documented.route
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(documented)
    return {
        "openapi": "3.1.0",
        "info": {"title": "headway", "version": version},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _ref(struct: type[msgspec.Struct]) -> dict[str, Any]:
    return {JSON: {"schema": {"$ref": f"#/components/schemas/{struct.__name__}"}}}


def _operation(documented: DocumentedRoute) -> dict[str, Any]:
    op = documented.operation
    content = op.response
    ok = {
        "description": HTTPStatus(op.status).phrase,
        "content": _ref(content) if isinstance(content, type) else {content: {"schema": {}}},
    }
    responses: dict[str, Any] = {str(op.status): ok}
    for status, struct in op.other_answers.items():
        responses[str(status)] = {"description": struct.__doc__ or "", "content": _ref(struct)}
    by_status: dict[int, list[str]] = {500: [_INTERNAL_ERROR]}
    for error in op.errors:
        first_line = (error.__doc__ or "").strip().splitlines()[0]
        by_status.setdefault(error.status, []).append(f"`{error.type}`: {first_line}")
    for status in sorted(by_status):
        responses[str(status)] = {
            "description": " ".join(by_status[status]),
            "content": _ref(schemas.ErrorResponse),
        }
    described: dict[str, Any] = {
        "operationId": documented.route.name,
        "summary": op.summary,
        "responses": responses,
    }
    described["security"] = [{"bearer": []}] if op.authenticated else []
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": op.path.get(name, _STRING)}
        for name in parameters_of(documented.route.path)
    ]
    parameters += [dict(parameter) for parameter in op.query]
    if op.deadline:
        parameters.append(
            {
                "name": "X-Timeout-Ms",
                "in": "header",
                "required": False,
                "schema": {"type": "integer", "minimum": 1},
                "description": "Deadline for the whole request, in milliseconds "
                "(absent: the tier's default; above the tier's maximum: the maximum).",
            }
        )
    if parameters:
        described["parameters"] = parameters
    if op.request is not None:
        described["requestBody"] = {"required": True, "content": _ref(op.request)}
    elif op.form is not None:
        form = {"multipart/form-data": {"schema": dict(op.form)}}
        described["requestBody"] = {"required": True, "content": form}
    return described


def _state_limits(
    components: dict[str, Any], limits: LimitsSettings, dimensions: Sequence[int]
) -> None:
    text = {"type": "string", "minLength": 1, "maxLength": limits.max_chars}
    count = {"minItems": 1, "maxItems": limits.max_texts}
    embeddings = components["EmbeddingsRequest"]["properties"]
    embeddings["input"] = {"anyOf": [text, {"type": "array", "items": text, **count}]}
    width: dict[str, Any] = {"type": "integer", "minimum": 1}
    if dimensions:
        width = {"enum": list(dimensions)}
    embeddings["dimensions"] = {"anyOf": [width, {"type": "null"}], "default": None}
    rerank = components["RerankRequest"]["properties"]
    rerank["query"] = text
    rerank["documents"] |= count
    rerank["top_n"] = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}
    rerank["top_n"]["default"] = None
    rerank["documents"]["items"]["anyOf"][0] = text
    components["RerankDocument"]["properties"]["text"] = text
    # The answer's rows are written as raw JSON arrays (``msgspec.Raw``): say what they are.
    floats = {"type": "array", "items": {"type": "number"}}
    components["Embedding"]["properties"]["embedding"] = {"anyOf": [floats, {"type": "string"}]}
