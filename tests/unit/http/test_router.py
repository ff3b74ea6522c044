"""The router: exact paths, templates with parameters, 404 and 405, bounded names."""

import pytest
from hypothesis import given

from headway.errors import MethodNotAllowed, NotFound
from headway.http.asgi import Request, Response, json_response
from headway.http.router import UNMATCHED, Route, Router, parameters_of
from tests import hostile


async def ok(request: Request) -> Response:
    return json_response({})


def route(method: str, path: str, name: str) -> Route:
    return Route(method, path, name, ok)


ROUTER = Router(
    [
        route("POST", "/v1/embeddings", "embeddings"),
        route("GET", "/admin/tenants", "tenants_list"),
        route("GET", "/admin/tenants/{name}", "tenant_get"),
        route("DELETE", "/admin/tenants/{name}", "tenant_delete"),
        route("GET", "/admin/tenants/{name}/keys", "keys_list"),
        route("DELETE", "/admin/tenants/{name}/keys/{key_id}", "key_revoke"),
        route("POST", "/admin/rollouts/{id}/pause", "rollout_pause"),
        route("POST", "/admin/rollouts/{id}/resume", "rollout_resume"),
        route("GET", "/admin/rollouts/{id}", "rollout_get"),
        route("GET", "/admin/{resource}/count", "count"),
        route("GET", "/admin/tenants/count", "tenants_count"),
    ]
)


def test_an_exact_path_has_no_parameters():
    found, params = ROUTER.match("POST", "/v1/embeddings")
    assert found.name == "embeddings"
    assert dict(params) == {}


@pytest.mark.parametrize(
    ("method", "path", "name", "params"),
    [
        ("GET", "/admin/tenants/search-app", "tenant_get", {"name": "search-app"}),
        ("DELETE", "/admin/tenants/search-app", "tenant_delete", {"name": "search-app"}),
        ("GET", "/admin/tenants/a/keys", "keys_list", {"name": "a"}),
        ("DELETE", "/admin/tenants/a/keys/0f1e", "key_revoke", {"name": "a", "key_id": "0f1e"}),
        ("POST", "/admin/rollouts/7/pause", "rollout_pause", {"id": "7"}),
        ("POST", "/admin/rollouts/7/resume", "rollout_resume", {"id": "7"}),
        ("GET", "/admin/rollouts/7", "rollout_get", {"id": "7"}),
    ],
)
def test_a_template_matches_segment_by_segment_and_hands_over_its_values(
    method, path, name, params
):
    found, values = ROUTER.match(method, path)
    assert (found.name, dict(values)) == (name, params)


def test_a_literal_segment_wins_over_a_parameter_whatever_the_order_added():
    assert ROUTER.match("GET", "/admin/tenants/count")[0].name == "tenants_count"
    found, params = ROUTER.match("GET", "/admin/models/count")
    assert (found.name, dict(params)) == ("count", {"resource": "models"})


@pytest.mark.parametrize(
    "path",
    [
        "/admin/tenants/",  # an empty segment is no value
        "/admin/tenants/a/b",  # one segment too many for {name}, one too few for keys/{id}
        "/admin/rollouts/7/explode",
        "/admin/rollouts/7/pause/now",
        "/nowhere",
    ],
)
def test_a_path_no_route_matches_is_not_found_and_counted_as_unmatched(path):
    with pytest.raises(NotFound):
        ROUTER.match("GET", path)
    assert ROUTER.name_of(path) == UNMATCHED


def test_another_method_on_a_template_is_405_named_after_the_template_not_the_path():
    with pytest.raises(MethodNotAllowed) as refused:
        ROUTER.match("PUT", "/admin/tenants/x")
    assert refused.value.headers == {"allow": "DELETE, GET"}
    assert ROUTER.name_of("/admin/tenants/x") == ROUTER.name_of("/admin/tenants/y") == "tenant_get"


def test_every_route_is_listed_once():
    assert len(ROUTER.routes()) == 11
    assert {r.name for r in ROUTER.routes()} >= {"embeddings", "key_revoke", "rollout_pause"}


def test_parameters_of_a_template_in_order():
    assert parameters_of("/admin/tenants/{name}/keys/{key_id}") == ["name", "key_id"]
    assert parameters_of("/v1/embeddings") == []


@hostile.FIXED
@given(hostile.client_values)
def test_any_segment_matches_its_parameter_but_one_holding_a_nul_names_nothing(
    value: str,
) -> None:
    path = f"/admin/tenants/{value}/keys"
    if not value or "/" in value or "\x00" in value:
        with pytest.raises(NotFound):
            ROUTER.match("GET", path)
    else:
        found, params = ROUTER.match("GET", path)
        assert (found.name, dict(params)) == ("keys_list", {"name": value})
