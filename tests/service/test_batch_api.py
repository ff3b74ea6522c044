"""``/v1/files`` and ``/v1/batches`` on the gateway app: shapes, limits, isolation."""

from __future__ import annotations

import httpx
import pytest

from headway.metering.sink import MemorySink
from headway.registry.model import SYSTEM
from headway.tls.identity import PEER_EXTENSION
from headway.transport.base import Reply
from tests.service.batch_helpers import BATCHES, create, embed_line, jsonl, live_line, upload
from tests.service.conftest import auth, make_stack

OTHER = auth("demo-key-support-bot")


@pytest.fixture
async def stack(tmp_path):
    built = await make_stack(
        tmp_path, batches=BATCHES.model_copy(update={"max_file_bytes": 4000, "max_lines": 5})
    )
    yield built
    await built.close()


async def test_an_upload_is_a_file_object_its_owner_reads_back(stack):
    data = jsonl(embed_line("a", "one"), embed_line("b", "two"))
    response = await upload(stack.client, data, auth())
    assert response.status_code == 200, response.text
    file = response.json()
    assert file["object"] == "file" and file["purpose"] == "batch"
    assert file["bytes"] == len(data) and file["filename"] == "input.jsonl"
    assert file["status"] == "processed" and file["id"].startswith("file-")
    assert file["expires_at"] - file["created_at"] == BATCHES.file_retention_s

    got = await stack.client.get(f"/v1/files/{file['id']}", headers=auth())
    assert got.json() == file
    content = await stack.client.get(f"/v1/files/{file['id']}/content", headers=auth())
    assert content.content == data
    listed = (await stack.client.get("/v1/files", headers=auth())).json()
    assert listed["object"] == "list" and [f["id"] for f in listed["data"]] == [file["id"]]


async def test_another_tenants_file_is_not_found_on_every_route(stack):
    file = (await upload(stack.client, jsonl(embed_line("a", "x")), auth())).json()
    for method, path in (
        ("GET", f"/v1/files/{file['id']}"),
        ("GET", f"/v1/files/{file['id']}/content"),
        ("DELETE", f"/v1/files/{file['id']}"),
    ):
        response = await stack.client.request(method, path, headers=OTHER)
        assert response.status_code == 404, (method, path)
        assert response.json()["error"]["type"] == "not_found"
    assert (await stack.client.get("/v1/files", headers=OTHER)).json()["data"] == []
    refused = await create(stack.client, file["id"], OTHER)
    assert refused.status_code == 404
    batch = (await create(stack.client, file["id"], auth())).json()
    for method, path in (
        ("GET", f"/v1/batches/{batch['id']}"),
        ("POST", f"/v1/batches/{batch['id']}/cancel"),
    ):
        assert (await stack.client.request(method, path, headers=OTHER)).status_code == 404
    assert (await stack.client.get("/v1/batches", headers=OTHER)).json()["data"] == []
    assert (await stack.client.get(f"/v1/files/{file['id']}", headers=auth())).status_code == 200


@pytest.mark.parametrize(
    ("data", "status", "words"),
    [
        (b"not json at all\n", 400, "line 1 is not a JSON object"),
        (b'{"custom_id": "a"}\n[1, 2]\n', 400, "line 2 is not a JSON object"),
        (b"", 400, "no request lines"),
        (b"\xff\xfe\n", 400, "UTF-8"),
        (jsonl(*[embed_line(str(i), "t") for i in range(6)]), 400, "lines"),
        (b'{"a": "' + b"x" * 5000 + b'"}\n', 413, "bytes"),
    ],
)
async def test_an_unusable_file_is_refused_and_nothing_is_kept(stack, data, status, words):
    response = await upload(stack.client, data, auth())
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"]
    assert (await stack.client.get("/v1/files", headers=auth())).json()["data"] == []


async def test_an_upload_says_what_is_wrong_with_its_form(stack):
    no_purpose = await stack.client.post(
        "/v1/files", headers=auth(), files={"file": ("a.jsonl", b"{}\n")}
    )
    assert no_purpose.status_code == 422 and "purpose" in no_purpose.json()["error"]["message"]
    wrong = await stack.client.post(
        "/v1/files",
        headers=auth(),
        data={"purpose": "fine-tune"},
        files={"file": ("a.jsonl", b"{}\n")},
    )
    assert wrong.status_code == 422 and "'batch'" in wrong.json()["error"]["message"]
    json_body = await stack.client.post("/v1/files", headers=auth(), json={"purpose": "batch"})
    assert json_body.status_code == 415
    admin = await upload(stack.client, b"{}\n", auth("demo-admin-key"))
    assert admin.status_code in (401, 403)
    expiring = await stack.client.post(
        "/v1/files",
        headers=auth(),
        data={
            "purpose": "batch",
            "expires_after[anchor]": "created_at",
            "expires_after[seconds]": "3600",
        },
        files={"file": ("a.jsonl", b"{}\n")},
    )
    file = expiring.json()
    assert file["expires_at"] - file["created_at"] == 3600
    too_short = await stack.client.post(
        "/v1/files",
        headers=auth(),
        data={
            "purpose": "batch",
            "expires_after[anchor]": "created_at",
            "expires_after[seconds]": "60",
        },
        files={"file": ("a.jsonl", b"{}\n")},
    )
    assert too_short.status_code == 422
    seconds_alone = await stack.client.post(
        "/v1/files",
        headers=auth(),
        data={"purpose": "batch", "expires_after[seconds]": "7200"},
        files={"file": ("a.jsonl", b"{}\n")},
    )
    file = seconds_alone.json()
    assert file["expires_at"] - file["created_at"] == 7200


async def test_a_batch_is_created_validating_with_openais_fields(stack):
    file = (await upload(stack.client, jsonl(embed_line("a", "x")), auth())).json()
    response = await create(stack.client, file["id"], auth(), metadata={"job": "nightly"})
    assert response.status_code == 200, response.text
    batch = response.json()
    assert batch["object"] == "batch" and batch["status"] == "validating"
    assert batch["input_file_id"] == file["id"] and batch["endpoint"] == "/v1/embeddings"
    assert batch["expires_at"] - batch["created_at"] == 86400
    assert batch["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
    assert batch["metadata"] == {"job": "nightly"}
    for field in (
        "output_file_id",
        "error_file_id",
        "errors",
        "in_progress_at",
        "completed_at",
        "failed_at",
        "expired_at",
        "cancelling_at",
        "cancelled_at",
        "finalizing_at",
    ):
        assert batch[field] is None, field
    assert (await stack.client.get(f"/v1/batches/{batch['id']}", headers=auth())).json() == batch


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"endpoint": "/v1/chat/completions"}, "$.endpoint"),
        ({"completion_window": "48h"}, "$.completion_window"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "length <= 16"),
        ({"metadata": {"k": "v" * 513}}, "length <= 512"),
        ({"metadata": {"k" * 65: "v"}}, "length <= 64"),
        ({"unknown": 1}, "unknown"),
    ],
)
async def test_a_bad_batch_request_is_refused_with_the_reason(stack, fields, words):
    file = (await upload(stack.client, jsonl(embed_line("a", "x")), auth())).json()
    response = await create(stack.client, file["id"], auth(), **fields)
    assert response.status_code == 422, response.text
    assert words in response.json()["error"]["message"]


async def test_an_unknown_input_file_is_not_found(stack):
    response = await create(stack.client, "file-nope", auth())
    assert response.status_code == 404


async def test_batches_list_newest_first_in_pages(stack):
    file = (await upload(stack.client, jsonl(embed_line("a", "x")), auth())).json()
    ids = [(await create(stack.client, file["id"], auth())).json()["id"] for _ in range(3)]
    first = (await stack.client.get("/v1/batches?limit=2", headers=auth())).json()
    assert first["has_more"] is True and len(first["data"]) == 2
    rest = (
        await stack.client.get(f"/v1/batches?limit=2&after={first['last_id']}", headers=auth())
    ).json()
    assert rest["has_more"] is False
    seen = [b["id"] for b in first["data"] + rest["data"]]
    assert sorted(seen) == sorted(ids)  # each once (created in one second: any order)
    bad = await stack.client.get("/v1/batches?limit=0", headers=auth())
    assert bad.status_code == 422


async def test_cancel_moves_a_running_batch_and_refuses_a_finished_one(stack):
    file = (await upload(stack.client, jsonl(embed_line("a", "x")), auth())).json()
    batch = (await create(stack.client, file["id"], auth())).json()
    cancelled = await stack.client.post(f"/v1/batches/{batch['id']}/cancel", headers=auth())
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelling" and cancelled.json()["cancelling_at"]
    again = await stack.client.post(f"/v1/batches/{batch['id']}/cancel", headers=auth())
    assert again.json()["status"] == "cancelling"
    store = stack.batches.store
    store.move(batch["id"], ("cancelling",), "completed", 1)
    finished = await stack.client.post(f"/v1/batches/{batch['id']}/cancel", headers=auth())
    assert finished.status_code == 409 and "completed" in finished.json()["error"]["message"]


async def test_the_input_of_a_running_batch_cannot_be_deleted(stack):
    file = (await upload(stack.client, jsonl(embed_line("a", "x")), auth())).json()
    await create(stack.client, file["id"], auth())
    refused = await stack.client.delete(f"/v1/files/{file['id']}", headers=auth())
    assert refused.status_code == 409
    other = (await upload(stack.client, jsonl(embed_line("b", "y")), auth())).json()
    deleted = await stack.client.delete(f"/v1/files/{other['id']}", headers=auth())
    assert deleted.json() == {"id": other["id"], "deleted": True, "object": "file"}
    assert (await stack.client.get(f"/v1/files/{other['id']}", headers=auth())).status_code == 404


async def test_the_line_routes_take_only_the_executors_token(stack):
    body = b'{"model": "synthetic", "input": ["x"]}'
    headers = live_line(stack.batches.store, stack.registry.tenant("search-app").id)
    for key in ("demo-key-search-app", "demo-admin-key", "wrong"):
        refused = await stack.client.post(
            "/internal/batches/v1/embeddings", content=body, headers=headers | auth(key)
        )
        assert refused.status_code == 401, key
    served = await stack.client.post(
        "/internal/batches/v1/embeddings",
        content=body,
        headers=headers | auth(BATCHES.executor_token),
    )
    assert served.status_code == 200, served.text
    assert served.headers["x-request-id"] == headers["x-headway-request-id"]
    gone = await stack.client.post(
        "/internal/batches/v1/embeddings",
        content=body,
        headers=headers | auth(BATCHES.executor_token) | {"x-headway-tenant-id": "999"},
    )
    assert gone.status_code == 404
    assert "tenant 999 does not exist" in gone.json()["error"]["message"]


async def test_a_line_names_its_tenant_by_id_and_never_by_name(stack):
    """The name header is for logs: a line of a deleted tenant is refused however the new
    tenant of its name is named, and an executor that sends no id (the previous version's)
    is refused with a 403 (it waits that out, failing no line) rather than served by name."""
    old_id = stack.registry.tenant("search-app").id
    executor = live_line(stack.batches.store, old_id) | auth(BATCHES.executor_token)
    del executor["x-headway-tenant-id"], executor["x-headway-tenant"]
    body = b'{"model": "synthetic", "input": ["x"]}'
    line = "/internal/batches/v1/embeddings"
    stack.registry.delete_tenant("search-app", actor=SYSTEM)
    stack.registry.add_tenant("search-app", "interactive", actor=SYSTEM)
    await stack.gateway.snapshots.refresh()
    named = {"x-headway-tenant": "search-app"}
    deleted = await stack.client.post(
        line, content=body, headers=executor | named | {"x-headway-tenant-id": str(old_id)}
    )
    assert deleted.status_code == 404 and "(deleted)" in deleted.text
    by_name = await stack.client.post(line, content=body, headers=executor | named)
    assert by_name.status_code == 403 and "x-headway-tenant-id" in by_name.text
    for wrong in ("0", "-1", "²".encode(), "1" * 30, "search-app"):
        refused = await stack.client.post(
            line, content=body, headers=executor | {"x-headway-tenant-id": wrong}
        )
        assert refused.status_code == 422, wrong


async def test_a_line_that_failed_on_our_side_is_still_billed_once_when_it_serves(tmp_path):
    sink = MemorySink()
    stack = await make_stack(tmp_path, batches=BATCHES, metering=sink)
    try:
        tenant_id = stack.registry.tenant("nightly-index").id
        headers = live_line(stack.batches.store, tenant_id) | auth(BATCHES.executor_token)
        request_id = headers["x-headway-request-id"]
        body = b'{"model": "synthetic", "input": ["x", "y"]}'
        send, failures = stack.transport.send, [2]  # the first attempt and its retry

        async def failing(request):
            if failures[0] > 0:
                failures[0] -= 1
                return Reply(500, b'{"error": {"type": "internal_error"}}', {})
            return await send(request)

        stack.transport.send = failing
        line = "/internal/batches/v1/embeddings"
        failed = await stack.client.post(line, content=body, headers=headers)
        assert failed.status_code == 502, failed.text
        served = await stack.client.post(line, content=body, headers=headers)
        assert served.status_code == 200, served.text
    finally:
        await stack.close()
    billable = [e for e in sink.events if e.billable]
    given_back = [e for e in sink.events if not e.billable]
    assert [(e.request_id, e.tier, e.texts) for e in billable] == [(request_id, "batch", 2)]
    assert len(given_back) == 1 and given_back[0].request_id != request_id


async def test_the_executors_token_runs_only_lines_of_a_live_batch_of_the_tenant(stack):
    """The token is no master key: it acts for a tenant only on a line of that tenant's
    batch in progress, under that line's own request id (any other line: 409
    line_not_live, which the executor skips that line for, where a 403 would pause every
    tenant's lines), and is refused everywhere else."""
    body = b'{"model": "synthetic", "input": ["x"]}'
    line = "/internal/batches/v1/embeddings"
    tenant_id = stack.registry.tenant("search-app").id
    other_id = stack.registry.tenant("support-bot").id
    token = auth(BATCHES.executor_token)
    headers = live_line(stack.batches.store, tenant_id) | token
    served = await stack.client.post(line, content=body, headers=headers)
    assert served.status_code == 200, served.text
    attempts = {
        "another tenant": {"x-headway-tenant-id": str(other_id)},
        "a request id of its choosing": {"x-headway-request-id": "ee" * 16},
        "another key": {"x-headway-key-id": "cd" * 8},
        "a line past the end": {"x-headway-line": "4"},
        "no such batch": {"x-headway-batch-id": "batch_" + "0" * 24},
    }
    for what, change in attempts.items():
        refused = await stack.client.post(line, content=body, headers=headers | change)
        assert refused.status_code == 409, (what, refused.text)
        assert refused.json()["error"]["type"] == "line_not_live", (what, refused.text)
    # A batch that no longer runs (read fresh: never seen live) runs no line.
    fresh = live_line(stack.batches.store, tenant_id)
    stack.batches.store.move(fresh["x-headway-batch-id"], ("in_progress",), "finalizing", 4)
    done = await stack.client.post(line, content=body, headers=fresh | token)
    assert done.status_code == 409 and "finalizing" in done.text
    for method, path in (
        ("GET", "/v1/files"),
        ("GET", "/v1/batches"),
        ("GET", "/v1/usage"),
        ("GET", "/admin/tenants"),
        ("GET", "/admin/usage"),
        ("POST", "/v1/embeddings"),
        ("GET", "/v1/models"),
    ):
        elsewhere = await stack.client.request(
            method, path, headers=headers | {"content-type": "application/json"}, content=body
        )
        assert elsewhere.status_code in (401, 403), (path, elsewhere.status_code)


def presenting(app, names: frozenset[str] | None):
    """``app`` as the guard hands it a connection whose client certificate names ``names``
    (``http/guard.py``; None: no certificate)."""

    async def wrapped(scope, receive, send):
        extensions = dict(scope.get("extensions") or {})
        if names is not None:
            extensions[PEER_EXTENSION] = names
        await app({**scope, "extensions": extensions}, receive, send)

    return wrapped


async def test_with_tls_the_line_routes_take_only_the_executors_certificate(tmp_path):
    """The token is not enough where the client port asks for a certificate: a gateway's
    (or any other role's) certificate of the same CA, or none, is refused on the line
    routes; the executor's is served."""
    executor = "executor.headway.internal"
    stack = await make_stack(tmp_path, batches=BATCHES, line_callers=frozenset({executor}))
    try:
        tenant_id = stack.registry.tenant("search-app").id
        headers = live_line(stack.batches.store, tenant_id) | auth(BATCHES.executor_token)
        body = b'{"model": "synthetic", "input": ["x"]}'
        answers = {}
        for who, names in (
            ("executor", frozenset({executor})),
            ("gateway", frozenset({"gateway.headway.internal"})),
            ("worker", frozenset({"worker.headway.internal", "localhost"})),
            ("no certificate", None),
        ):
            app = presenting(stack.gateway_app, names)
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://gateway"
            ) as client:
                answer = await client.post(
                    "/internal/batches/v1/embeddings", content=body, headers=headers
                )
            answers[who] = answer.status_code
            if who != "executor":
                assert "client certificate" in answer.text, who
        assert answers == {"executor": 200, "gateway": 403, "worker": 403, "no certificate": 403}
    finally:
        await stack.close()
