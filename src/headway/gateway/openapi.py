"""``GET /openapi.json``: the contract, built from the routes, the structs and the error tree.

Every route the router serves is described (``DocumentedRoute`` pairs a route with
its ``Operation``): its request and response bodies come from the msgspec structs
that decode and encode them; its error answers from the ``errors.py`` classes it can
raise (status, type and docstring), in the route's error body (headway's, or another
API's: TEI's routes answer TEI's); and the limits the server enforces are stated
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

from headway.errors import AuthThrottled, HeadwayError
from headway.http.router import Route, parameters_of
from headway.protocols.bodies import ErrorResponse
from headway.settings import LimitsSettings

JSON = "application/json"
_STRING: Mapping[str, Any] = {"type": "string", "minLength": 1}
_INTERNAL_ERROR = "`internal_error`: An unexpected failure (no detail; logged with the request id)."


@dataclass(frozen=True, slots=True)
class Operation:
    """How the document describes one route."""

    summary: str
    response: Any
    """The 200 body's struct (or a type msgspec describes, ``list[Struct]``), or the media
    type (a ``str``) of a body described elsewhere."""
    request: type[msgspec.Struct] | None = None
    errors: tuple[type[HeadwayError], ...] = ()
    error_body: type[msgspec.Struct] = ErrorResponse
    """The body of every error answer (another API's format where the route speaks it)."""
    authenticated: bool = False
    deadline: bool = False
    """Takes ``X-Timeout-Ms``."""
    other_answers: Mapping[int, type[msgspec.Struct] | str] = field(default_factory=dict)
    """Non-error answers with a body of their own: a struct (``/readyz``'s 503) or the media
    type of a body described elsewhere (a weights file's 206)."""
    query: Sequence[Mapping[str, Any]] = ()
    """Query parameters, as OpenAPI parameter objects."""
    headers: Sequence[Mapping[str, Any]] = ()
    """Header parameters the route reads beyond the key and ``X-Timeout-Ms`` (a ``Range``,
    the names the batch executor sends), as OpenAPI parameter objects."""
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
    token_limit: int = 0,
    prompt_names: Collection[str] = (),
) -> dict[str, Any]:
    """``dimensions``: the widths the embedding models served now can produce (empty:
    unknown); ``token_limit``: the largest token limit among the models served now (0: none
    recorded), under which a token limit asked for may be refused; ``prompt_names``: the
    prompts those models have (a name one model lacks may still be refused by another)."""
    routes = [documented for documented in routes if not documented.operation.hidden]
    structs: set[Any] = {ErrorResponse}
    for documented in routes:
        op = documented.operation
        structs.update(b for b in (op.request, op.response) if not isinstance(b, str | None))
        structs.update(b for b in op.other_answers.values() if not isinstance(b, str))
        structs.add(op.error_body)
    ordered = sorted(structs, key=repr)
    described, components = msgspec.json.schema_components(
        ordered, ref_template="#/components/schemas/{name}"
    )
    schema_of = dict(zip(ordered, described, strict=True))
    _state_limits(components, limits, sorted(dimensions), token_limit)
    prompt: dict[str, Any] = {"type": "null", "default": None}
    if prompt_names:  # one of the prompts the models served now have
        prompt = {"anyOf": [{"enum": sorted(prompt_names)}, {"type": "null"}], "default": None}
    for body in ("TeiEmbedRequest", "TeiTokenizeRequest"):
        if body in components:
            components[body]["properties"]["prompt_name"] = prompt
    paths: dict[str, dict[str, Any]] = {}
    for documented in routes:
        route = documented.route
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(documented, schema_of)
    return {
        "openapi": "3.1.0",
        "info": {"title": "headway", "version": version},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation(documented: DocumentedRoute, schema_of: Mapping[Any, Any]) -> dict[str, Any]:
    def json_body(body: Any) -> dict[str, Any]:
        return {JSON: {"schema": schema_of[body]}}

    op = documented.operation
    content = op.response
    ok = {
        "description": HTTPStatus(op.status).phrase,
        "content": {content: {"schema": {}}} if isinstance(content, str) else json_body(content),
    }
    responses: dict[str, Any] = {str(op.status): ok}
    for status, body in op.other_answers.items():
        if isinstance(body, str):
            responses[str(status)] = {
                "description": HTTPStatus(status).phrase,
                "content": {body: {"schema": {}}},
            }
        else:
            responses[str(status)] = {"description": body.__doc__ or "", "content": json_body(body)}
    by_status: dict[int, list[str]] = {500: [_INTERNAL_ERROR]}
    # A route that checks a key can refuse an address or prefix with too many failures.
    errors: tuple[type[HeadwayError], ...] = (
        (*op.errors, AuthThrottled) if op.authenticated else op.errors
    )
    for error in errors:
        first_line = (error.__doc__ or "").strip().splitlines()[0]
        by_status.setdefault(error.status, []).append(f"`{error.type}`: {first_line}")
    for status in sorted(by_status):
        responses[str(status)] = {
            "description": " ".join(by_status[status]),
            "content": json_body(op.error_body),
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
    parameters += [dict(parameter) for parameter in (*op.query, *op.headers)]
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
        described["requestBody"] = {"required": True, "content": json_body(op.request)}
    elif op.form is not None:
        form = {"multipart/form-data": {"schema": dict(op.form)}}
        described["requestBody"] = {"required": True, "content": form}
    return described


def _state_limits(
    components: dict[str, Any],
    limits: LimitsSettings,
    dimensions: Sequence[int],
    token_limit: int,
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
    texts = {"type": "array", "items": text, **count}
    optional_width = {"anyOf": [width, {"type": "null"}], "default": None}
    tokens = {"type": "integer", "minimum": max(1, token_limit)}
    optional_tokens = {"anyOf": [tokens, {"type": "null"}], "default": None}
    top_n = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None}
    _state_compat_limits(components, text, texts, optional_width, optional_tokens, top_n, floats)


def _ids(texts: dict[str, Any], text: dict[str, Any]) -> dict[str, Any]:
    """TEI's ``ids``: one sequence or a list of them, as many as texts, each as long as a
    text may be (in ids)."""
    token = {"type": "integer", "minimum": 0, "maximum": 2**31 - 1}
    row = {"type": "array", "items": token, "maxItems": text["maxLength"]}
    count = {"minItems": texts["minItems"], "maxItems": texts["maxItems"]}
    one = {"type": "array", "items": token, **count}
    many = {"type": "array", "items": row, **count}
    return {"anyOf": [one, many]}


def _state_compat_limits(
    components: dict[str, Any],
    text: dict[str, Any],
    texts: dict[str, Any],
    width: dict[str, Any],
    tokens: dict[str, Any],
    top_n: dict[str, Any],
    floats: dict[str, Any],
) -> None:
    """Cohere v2's and TEI's bodies: the same limits, and only the values served (an
    ``image`` input type, say, is refused by the endpoint: not valid here)."""
    priority = {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}
    text_types = ["search_document", "search_query", "classification", "clustering"]
    stated: dict[str, dict[str, Any]] = {
        "CohereEmbedRequest": {
            "texts": texts,
            "input_type": {"enum": text_types},
            "output_dimension": width,
            "max_tokens": tokens,
            "priority": priority,
        },
        "CohereRerankRequest": {
            "query": text,
            "documents": texts,
            "top_n": top_n,
            "max_tokens_per_doc": tokens,
            "priority": priority,
        },
        "CohereEmbeddingsByType": {"float": {"type": "array", "items": floats}},
        "TeiEmbedRequest": {
            "inputs": {"anyOf": [text, texts]},
            "normalize": {"const": True, "default": True},
            "dimensions": width,
        },
        "TeiRerankRequest": {
            "query": text,
            "texts": texts,
        },
        "TeiTokenizeRequest": {"inputs": {"anyOf": [text, texts]}},
        "TeiDecodeRequest": {"ids": _ids(texts, text)},
    }
    for name, properties in stated.items():
        if name in components:
            components[name]["properties"] |= properties
