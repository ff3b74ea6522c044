"""Hostile values in every place a client puts one, on every route the gateway serves (the
console's and the executor's included, which the OpenAPI document does not describe or a
schema fuzzer reaches poorly): each path parameter, each query parameter a route reads,
each header the gateway reads, JSON bodies nested to any depth anywhere, forms with many
fields, broken multipart uploads. Each is sent by the caller the route serves (the key, the
token, the console session), so it gets past the key to the parsers. Whatever it is, the
answer is a client's error or a success, never a server error.

One hypothesis example draws one value and sends it to every route in that place: the
examples are derandomized and few, and each covers the whole route list.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from headway.batches.open import postgres_batch_store
from headway.batches.store import BatchStore
from headway.control.console.auth import MAX_FORM_FIELDS
from headway.http.router import Route, parameters_of
from tests.hostile import (
    client_values,
    header_numbers,
    header_values,
    json_bodies,
    multipart_forms,
    some_of,
    texts,
    weighted,
)
from tests.service.fuzzing import Gateway, StackLoop, callers, full_gateway
from tests.service.test_console import session

FUZZ = settings(
    max_examples=25,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
TRANSIENT = {"deadline_exceeded", "overloaded", "no_ready_replicas"}
"""503 and 504s a request may meet whatever it holds (a deadline of 1 ms)."""
BODY_METHODS = ("POST", "PUT", "PATCH")
CONSOLE_HEADERS = ["cookie", "origin", "sec-fetch-site", "x-csrf-token"]
BODY_FIELDS = ("input", "inputs", "texts", "documents", "query", "metadata", "weights", "pins")


@dataclass
class Hostile:
    gateway: Gateway
    stack_loop: StackLoop
    routes: list[Route]
    documented: Mapping[tuple[str, str], Mapping[str, tuple[str, ...]]]
    """Each route's documented parameters (query, header), by (method, path)."""
    console: dict[str, str]
    """A console session's cookie and CSRF token, as headers."""

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.stack_loop.run(self.gateway.client.request(method, path, **kwargs))

    def served(self, route: Route) -> dict[str, str]:
        """The headers of a caller ``route`` serves."""
        return self.served_by_path(route.path)

    def served_by_path(self, path: str) -> dict[str, str]:
        if path.startswith("/console"):
            return dict(self.console)
        return dict(next(iter(callers(path, self.gateway.line).served.values())))

    def path_of(self, route: Route, fuzzed: str | None = None, value: str = "") -> str:
        """``route``'s path with ``value`` (percent-encoded) as its parameter ``fuzzed``, and
        a value that names something as every other (the stored model's version, say)."""
        path = route.path
        plain = {"version": self.gateway.model.version, "file": "tokenizer.json"}
        for name in parameters_of(route.path):
            given = quote(value, safe="") if name == fuzzed else plain.get(name, "1")
            path = path.replace("{" + name + "}", given)
        return path

    def parameters(self, route: Route, where: str) -> tuple[str, ...]:
        return self.documented.get((route.method, route.path), {}).get(where, ())

    def headers_read(self, route: Route) -> tuple[str, ...]:
        """The headers ``route`` reads beyond the key: those documented, the body's type,
        the console's own, and (on two routes: the edge reads it for all) traceparent."""
        names = list(self.parameters(route, "header"))
        if route.method in BODY_METHODS:
            names.append("content-type")
        if route.path.startswith("/console"):
            names += ["cookie"] if route.method == "GET" else CONSOLE_HEADERS
        if route.path in ("/healthz", "/v1/embeddings"):
            names.append("traceparent")
        return tuple(names)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    yield from hostile_gateway(tmp_path_factory.mktemp("hostile"))


@pytest.fixture
def on_postgres(tmp_path: Path, libpq_url: str) -> Iterator[Hostile]:
    """The gateway with its batch store on a throw-away Postgres (shared mode's)."""
    yield from hostile_gateway(tmp_path, lambda: postgres_batch_store(libpq_url))


def hostile_gateway(
    tmp_path: Path, batch_store: Callable[[], BatchStore] | None = None
) -> Iterator[Hostile]:
    stack_loop = StackLoop()
    gateway = stack_loop.run(full_gateway(tmp_path, batch_store))
    try:
        document = stack_loop.run(gateway.client.get("/openapi.json")).json()
        documented = {
            (method.upper(), path): {
                "query": tuple(p["name"] for p in parameters if p["in"] == "query"),
                "header": tuple(p["name"].lower() for p in parameters if p["in"] == "header"),
            }
            for path, operations in document["paths"].items()
            for method, operation in operations.items()
            for parameters in [operation.get("parameters", [])]
        }
        cookie, csrf = stack_loop.run(session(gateway.client))
        console = {"cookie": cookie, "x-csrf-token": csrf}
        routes = gateway.app.handler.router.routes()  # type: ignore[attr-defined]
        yield Hostile(gateway, stack_loop, routes, documented, console)
    finally:
        stack_loop.run(gateway.close())
        stack_loop.close()


def assert_answered(response: httpx.Response, what: str) -> None:
    """A client's error or a success: never a server error, bar a transient one."""
    if response.status_code < 500:
        return
    error_type = None
    if response.headers.get("content-type") == "application/json":
        error_type = json.loads(response.content).get("error", {}).get("type")
    assert response.status_code in (503, 504) and error_type in TRANSIENT, (
        f"{what}: {response.status_code} {response.text[:300]}"
    )


@FUZZ
@given(value=client_values)
def test_any_path_parameter_is_answered_without_a_server_error(hostile, value: str) -> None:
    for route in hostile.routes:
        for name in parameters_of(route.path):
            path = hostile.path_of(route, name, value)
            response = hostile.send(route.method, path, headers=hostile.served(route))
            assert_answered(response, f"{route.method} {route.path} with {name}={value[:60]!r}")


@FUZZ
@given(value=client_values, extra=st.sampled_from(["limit", "after", "id", ""]))
def test_any_query_value_is_answered_without_a_server_error(
    hostile, value: str, extra: str
) -> None:
    for route in hostile.routes:
        names = hostile.parameters(route, "query")
        for name in (*names, extra) if names else ():
            response = hostile.send(
                route.method,
                hostile.path_of(route),
                params={name: value},
                headers=hostile.served(route),
            )
            assert_answered(response, f"{route.method} {route.path}?{name}={value[:60]!r}")


def joined(*parts: st.SearchStrategy[str] | str) -> st.SearchStrategy[str]:
    return st.tuples(*(st.just(p) if isinstance(p, str) else p for p in parts)).map("".join)


_HEX = st.text("0123456789abcdef", min_size=1, max_size=40)
_PIECE = st.one_of(_HEX, header_values)
READ_HEADERS: dict[str, st.SearchStrategy[str]] = {
    "x-timeout-ms": header_values,
    "range": joined(
        st.sampled_from(["bytes=", "bytes= ", "Bytes=", ""]),
        st.one_of(st.just(""), header_numbers),
        st.sampled_from(["-", "", "--", "-,0-"]),
        st.one_of(st.just(""), header_numbers),
    ),
    "traceparent": joined(_PIECE, "-", _PIECE, "-", _PIECE, "-", _PIECE),
    "content-type": joined(
        st.sampled_from(["application/json", "multipart/form-data", "text/plain", ""]),
        st.sampled_from(["", "; boundary=", "; charset=", ";"]),
        header_values,
    ),
    "x-headway-tenant-id": header_values,
    "x-headway-key-id": _PIECE,
    "x-headway-request-id": _PIECE,
    "x-headway-batch-id": joined(st.sampled_from(["", "batch_"]), header_values),
    "x-headway-line": header_values,
    "origin": joined(st.sampled_from(["", "http://", "https://[", "null"]), header_values),
    "sec-fetch-site": header_values,
    "x-csrf-token": header_values,
    "cookie": joined(
        st.sampled_from(["headway_console=", "headway_console_login=", ""]),
        joined(_PIECE, ".", _PIECE, ".", _PIECE, ".", _PIECE),
    ),
}
"""Every header the gateway reads from a client (bar the key: the edge's, another suite's),
each in the shape it takes, its pieces hostile."""


@FUZZ
@given(st.fixed_dictionaries(READ_HEADERS))
def test_any_header_value_is_answered_without_a_server_error(
    hostile, values: dict[str, str]
) -> None:
    for route in hostile.routes:
        body = b'{"model": "synthetic", "input": "a"}' if route.method in BODY_METHODS else None
        for name in hostile.headers_read(route):
            headers = hostile.served(route) | {name: values[name].encode("latin-1")}
            response = hostile.send(
                route.method, hostile.path_of(route), headers=headers, content=body
            )
            assert_answered(
                response, f"{route.method} {route.path} with {name}: {values[name][:60]!r}"
            )


@FUZZ
@given(body=json_bodies(BODY_FIELDS))
def test_any_json_body_however_nested_is_answered_without_a_server_error(
    hostile, body: bytes
) -> None:
    for route in hostile.routes:
        if route.method not in BODY_METHODS or route.streams_body:
            continue
        headers = hostile.served(route) | {"content-type": "application/json"}
        response = hostile.send(route.method, hostile.path_of(route), headers=headers, content=body)
        assert_answered(response, f"{route.method} {route.path} with {body[:60]!r}…")


form_fields = some_of(
    st.tuples(st.sampled_from(["key", "csrf", "x", "purpose"]) | texts, client_values)
)


@FUZZ
@given(fields=form_fields)
def test_any_form_is_answered_without_a_server_error(
    hostile, fields: list[tuple[str, str]]
) -> None:
    for route in hostile.routes:
        if route.method not in BODY_METHODS or route.streams_body:
            continue
        body = "&".join(f"{quote(name)}={quote(value)}" for name, value in fields)
        headers = hostile.served(route) | {"content-type": "application/x-www-form-urlencoded"}
        response = hostile.send(route.method, hostile.path_of(route), headers=headers, content=body)
        assert_answered(response, f"{route.method} {route.path} with the form {body[:80]!r}…")


def test_a_sign_in_form_of_many_fields_is_a_client_error(hostile) -> None:
    """It was a 500, for anyone (``parse_qs``'s ``max_num_fields`` raises ``ValueError``)."""
    headers = {"content-type": "application/x-www-form-urlencoded"}
    body = "&".join(["key=k"] * (MAX_FORM_FIELDS + 1))
    response = hostile.send("POST", "/console/login", headers=headers, content=body)
    assert response.status_code == 400, response.text


@settings(FUZZ, max_examples=40)
@given(form=multipart_forms())
def test_any_upload_is_answered_without_a_server_error(hostile, form: tuple[str, bytes]) -> None:
    content_type, body = form
    headers = hostile.served_by_path("/v1/files") | {"content-type": content_type.encode()}
    response = hostile.send("POST", "/v1/files", headers=headers, content=body)
    assert_answered(response, f"an upload of {body[:120]!r}…")


with_nul = st.tuples(texts, texts).map("\x00".join)


@FUZZ
@given(value=weighted(client_values, with_nul))
def test_on_a_shared_batch_store_any_id_cursor_or_name_is_a_client_error(
    on_postgres: Hostile, value: str
) -> None:
    """Postgres cannot store (nor look up) a NUL: a tenant's id, cursor, file name or
    batch field holding one is refused before the store is asked."""
    tenant = on_postgres.served_by_path("/v1/files")
    quoted = quote(value, safe="")
    batch = {"input_file_id": value, "endpoint": "/v1/embeddings", "completion_window": "24h"}
    jsonl = b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}\n'
    sent = [
        ("GET", f"/v1/files/{quoted}", {}),
        ("GET", f"/v1/files/{quoted}/content", {}),
        ("DELETE", f"/v1/files/{quoted}", {}),
        ("GET", f"/v1/batches/{quoted}", {}),
        ("POST", f"/v1/batches/{quoted}/cancel", {}),
        ("GET", "/v1/files", {"params": {"after": value}}),
        ("GET", "/v1/files", {"params": {"purpose": value}}),
        ("GET", "/v1/batches", {"params": {"after": value}}),
        ("POST", "/v1/batches", {"json": batch}),
        ("POST", "/v1/batches", {"json": batch | {"metadata": {"k": value}}}),
        ("POST", "/v1/files", {"files": {"file": (value, jsonl)}, "data": {"purpose": "batch"}}),
    ]
    for method, path, kwargs in sent:
        response = on_postgres.send(method, path, headers=tenant, **kwargs)
        assert_answered(response, f"{method} {path} {kwargs} on Postgres")
