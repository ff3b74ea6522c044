"""``GET /openapi.json``: the public API described from the same structs that decode it."""

from __future__ import annotations

from typing import Any

import msgspec

from headway.gateway import schemas

_ERRORS = {
    "400": "Body is not a JSON object",
    "401": "Missing or invalid API key",
    "403": "Key may not use this endpoint",
    "404": "Unknown model",
    "413": "Body too large",
    "415": "Body is not JSON",
    "422": "Schema or limit violated",
    "502": "A replica failed",
    "503": "No capacity now (see Retry-After)",
    "504": "Deadline passed",
}


def _operation(summary: str, request: str, response: str) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {
            "description": "OK",
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{response}"}}
            },
        }
    }
    for code, text in _ERRORS.items():
        responses[code] = {
            "description": text,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}
            },
        }
    return {
        "summary": summary,
        "security": [{"bearer": []}],
        "parameters": [
            {
                "name": "X-Timeout-Ms",
                "in": "header",
                "required": False,
                "schema": {"type": "integer", "minimum": 1},
                "description": "Deadline for the whole request, in milliseconds.",
            }
        ],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{request}"}}
            },
        },
        "responses": responses,
    }


def openapi_document(version: str) -> dict[str, Any]:
    _, components = msgspec.json.schema_components(
        [
            schemas.EmbeddingsRequest,
            schemas.EmbeddingsResponse,
            schemas.RerankRequest,
            schemas.RerankResponse,
            schemas.ErrorResponse,
        ],
        ref_template="#/components/schemas/{name}",
    )
    return {
        "openapi": "3.1.0",
        "info": {"title": "headway", "version": version},
        "paths": {
            "/v1/embeddings": {
                "post": _operation(
                    "Create embeddings (OpenAI-compatible)",
                    "EmbeddingsRequest",
                    "EmbeddingsResponse",
                )
            },
            "/v1/rerank": {
                "post": _operation(
                    "Rerank documents (Cohere v1-compatible)", "RerankRequest", "RerankResponse"
                )
            },
        },
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
