"""Retries on another replica, ejection of a replica that keeps failing, /admin/replicas."""

from headway.http.asgi import App, Request, Response, json_response
from headway.settings import RoutingSettings
from tests.service.conftest import WORKER_URLS, auth, fake_worker, make_stack


def broken_worker(ready_from: App) -> App:
    """A replica that answers /readyz like a healthy one and 500 to every chunk."""

    async def fail(request: Request) -> Response:
        return json_response({"error": {"type": "internal_error", "message": "boom"}}, 500)

    return fake_worker(ready_from, embed=fail)


async def embed(stack, n_texts=1):
    return await stack.client.post(
        "/v1/embeddings",
        headers=auth(),
        json={"model": "synthetic", "input": [f"text {i}" for i in range(n_texts)]},
    )


async def test_a_failing_replica_is_retried_elsewhere_then_ejected(tmp_path):
    stack = await make_stack(tmp_path)
    try:
        bad = WORKER_URLS[0]
        stack.transport.apps[bad] = broken_worker(stack.worker_apps[WORKER_URLS[1]])
        statuses = [(await embed(stack)).status_code for _ in range(30)]
        assert statuses == [200] * 30  # every chunk sent to the broken one was retried
        pool = stack.gateway.pools["embed"]
        assert pool.state(pool.replicas[0]) == "ejected"
        calls_to_bad = sum(
            1 for url, path in stack.transport.calls if url == bad and "embed" in path
        )
        # five calls reach the threshold; more only if a 1 s ejection ran out (slow machine)
        # and a probation call failed, which ejects it again at once
        assert 5 <= calls_to_bad <= 7
        admin = await stack.client.get("/admin/replicas", headers=auth("demo-admin-key"))
        states = {r["url"]: r["state"] for r in admin.json()["pools"]["embed"]}
        assert states == {bad: "ejected", WORKER_URLS[1]: "ready"}
        assert (await stack.client.get("/admin/replicas", headers=auth())).status_code == 403
    finally:
        await stack.close()


async def test_never_more_than_half_the_pool_is_ejected(tmp_path):
    stack = await make_stack(tmp_path)
    try:
        for url in WORKER_URLS:
            stack.transport.apps[url] = broken_worker(stack.worker_apps[url])
        statuses = [(await embed(stack)).status_code for _ in range(20)]
        assert set(statuses) == {502}
        pool = stack.gateway.pools["embed"]
        assert [pool.state(r) for r in pool.replicas].count("ejected") == 1
    finally:
        await stack.close()


async def test_with_retries_off_a_failing_replica_fails_the_requests_sent_to_it(tmp_path):
    stack = await make_stack(tmp_path, routing=RoutingSettings(retries=False))
    try:
        stack.transport.apps[WORKER_URLS[0]] = broken_worker(stack.worker_apps[WORKER_URLS[1]])
        statuses = [(await embed(stack)).status_code for _ in range(30)]
        assert set(statuses) == {200, 502}  # until ejection takes the broken one out
        assert stack.gateway.pools["embed"].counts.retries == 0
    finally:
        await stack.close()
