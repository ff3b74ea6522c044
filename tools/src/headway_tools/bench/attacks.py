"""What a hostile tenant and an anonymous client send, each attack against a running gateway.

Issue 25's list, as a client would run it: each attack is a coroutine that takes a
``Target`` (the gateway's client URL, the attacker tenant's key and burst, texts the
victim sent) and returns an ``Outcome``: whether the defence held, and a one-line
account of what came back. ``headway bench isolation`` runs each one beside a victim
tenant's traffic, and tests/e2e/test_hostile_tenants.py runs them all at once.

An attack holds when the gateway refuses it the way the isolation invariant asks: a
client error (never a 5xx) for bad input, a refusal after the headers (never after the
body), a connection closed by the timeouts, a 429 once keys are being guessed, timings
that say nothing about another tenant's texts. Some attacks (``line_flood``,
``quota_flood``) cannot fail by themselves: whether they hurt is what the victim's
figures beside them say (``held`` None).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import numpy as np

from headway.quality.stats import ks_test

NESTING = 990
"""Depth of the nested field in ``nested_line`` (deep enough for msgspec's recursion
check where the stack is shorter: a thread's)."""
SLOW_CONNECTIONS = 8
KEYS_GUESSED = 200
GUESSERS = 8
UPLOAD_BYTES = 150 << 20
UPLOAD_CHUNK = 64 << 10
REFUSED_BY = 32 << 20
"""An anonymous upload is refused after its headers if the 401 comes before the client
could push this much: loopback socket buffers take a few MiB the server never read."""
HEADER_BYTES = 70 << 10
PROBES = 40
"""Texts of each kind the cache probe times (the victim's, and new ones)."""
SEPARABLE_P = 0.001
"""The cache probe's KS p-value under which the two timings are told apart."""
FINAL = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    """The gateway's client URL (``http://host:port``)."""
    key: str
    """The attacker tenant's key (an interactive tenant)."""
    burst: int
    """The attacker tenant's burst, in texts."""
    victim_texts: Sequence[str] = ()
    """Texts the victim has embedded (for the cache probe)."""
    slow_within_s: float = 30.0
    """How long a stalled body may hold its connection before the probe calls it held open."""
    model: str = "synthetic"


@dataclass(frozen=True, slots=True)
class Outcome:
    attack: str
    held: bool | None
    """True: refused as the invariant asks; False: the attack worked; None: judged by the
    victim's figures beside it."""
    seen: str


Attack = Callable[[Target], Awaitable[Outcome]]


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _client(target: Target, **kwargs: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=target.url, timeout=60, **kwargs)  # type: ignore[arg-type]


def _line(custom_id: str, url: str, body: object) -> bytes:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body}).encode()


async def _upload(client: httpx.AsyncClient, key: str, data: bytes) -> httpx.Response:
    return await client.post(
        "/v1/files",
        headers=_auth(key),
        data={"purpose": "batch"},
        files={"file": ("attack.jsonl", data, "application/jsonl")},
    )


async def _batch(
    client: httpx.AsyncClient, key: str, file_id: str, endpoint: str
) -> httpx.Response:
    body = {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"}
    return await client.post("/v1/batches", headers=_auth(key), json=body)


async def _until_final(
    client: httpx.AsyncClient, key: str, batch_id: str, timeout_s: float
) -> dict[str, object] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch: dict[str, object] = (
            await client.get(f"/v1/batches/{batch_id}", headers=_auth(key))
        ).json()
        if batch.get("status") in FINAL:
            return batch
        await asyncio.sleep(0.1)
    return None


async def _run_batch(
    target: Target, name: str, data: bytes, endpoint: str
) -> dict[str, object] | Outcome:
    """Upload ``data`` and run it as a batch until it ends (30 s at most): the final batch,
    or the attack's outcome where the upload or the create already told it (a 4xx held,
    a 5xx did not)."""
    async with _client(target) as client:
        uploaded = await _upload(client, target.key, data)
        if uploaded.status_code != 200:
            held = 400 <= uploaded.status_code < 500
            return Outcome(name, held, f"upload answered {uploaded.status_code}")
        created = await _batch(client, target.key, uploaded.json()["id"], endpoint)
        if created.status_code != 200:
            held = 400 <= created.status_code < 500
            return Outcome(name, held, f"create answered {created.status_code}")
        final = await _until_final(client, target.key, created.json()["id"], 30.0)
    return final if final is not None else Outcome(name, False, "its batch ran on past 30 s")


async def nested_line(target: Target) -> Outcome:
    """A rerank line whose document carries an extra field nested ``NESTING`` deep: it used
    to pass the upload and then stop the Batch API for everyone. Held: refused at upload,
    or the batch ends (the line failed alone)."""
    deep = "[" * NESTING + "]" * NESTING
    body = '{"query": "q", "documents": [{"text": "d", "extra": ' + deep + "}]}"
    data = (
        b'{"custom_id": "deep", "method": "POST", "url": "/v1/rerank", "body": '
        + body.encode()
        + b"}\n"
    )
    final = await _run_batch(target, "nested_line", data, "/v1/rerank")
    if isinstance(final, Outcome):
        return final
    return Outcome("nested_line", True, f"uploaded; its batch ended {final['status']}")


async def burst_lines(target: Target, lines: int = 40) -> Outcome:
    """``lines`` lines of burst + 1 inputs each: no bucket can ever grant one, so a line
    that waits for its quota waits for ever in an executor slot. Held: no line runs and
    the batch ends at once (refused at upload, or every line at validation)."""
    texts = [f"t{i}" for i in range(target.burst + 1)]
    data = b"".join(
        _line(f"big-{n}", "/v1/embeddings", {"model": target.model, "input": texts}) + b"\n"
        for n in range(lines)
    )
    final = await _run_batch(target, "burst_lines", data, "/v1/embeddings")
    if isinstance(final, Outcome):
        return final
    counts = final.get("request_counts") or {}
    ran = counts.get("completed", 0) if isinstance(counts, dict) else 0
    errors = final.get("errors") or {}
    codes = {e.get("code") for e in errors.get("data", [])} if isinstance(errors, dict) else set()
    refused = ", ".join(sorted(map(str, codes))) or "-"
    seen = f"batch {final['status']} at once, {ran} lines ran; refused: {refused}"
    return Outcome("burst_lines", ran == 0, seen)


async def line_flood(target: Target, lines: int = 20_000) -> Outcome:
    """One batch of ``lines`` one-text lines: FIFO across tenants would put every other
    tenant's batch behind it. Judged by the victim's batch time beside it."""
    data = b"".join(
        _line(f"f-{n}", "/v1/embeddings", {"model": target.model, "input": [f"flood {n}"]}) + b"\n"
        for n in range(lines)
    )
    async with _client(target) as client:
        uploaded = await _upload(client, target.key, data)
        if uploaded.status_code != 200:
            return Outcome("line_flood", None, f"upload answered {uploaded.status_code}")
        created = await _batch(client, target.key, uploaded.json()["id"], "/v1/embeddings")
    return Outcome("line_flood", None, f"{lines} lines queued ({created.status_code})")


async def cache_probe(target: Target) -> Outcome:
    """Time the victim's texts against new ones, interleaved: with one cache for every
    tenant the victim's come back from it, visibly sooner. Held: the KS test cannot tell
    the two timings apart (p >= ``SEPARABLE_P``)."""
    victims = list(target.victim_texts)[:PROBES]
    if not victims:
        return Outcome("cache_probe", None, "no victim texts to probe")
    fresh = [f"a text nobody sent before {time.time_ns()} {i}" for i in range(len(victims))]
    timed: dict[str, list[float]] = {"victim": [], "fresh": []}
    async with _client(target) as client:
        for victim, new in zip(victims, fresh, strict=True):
            for kind, text in (("victim", victim), ("fresh", new)):
                started = time.perf_counter()
                response = await client.post(
                    "/v1/embeddings",
                    headers=_auth(target.key),
                    json={"model": target.model, "input": [text]},
                )
                if response.status_code == 200:
                    timed[kind].append(time.perf_counter() - started)
    if len(timed["victim"]) < 10 or len(timed["fresh"]) < 10:
        return Outcome("cache_probe", None, f"too few answers: {len(timed['victim'])}")
    result = ks_test(np.array(timed["victim"]), np.array(timed["fresh"]))
    medians = [1000 * float(np.median(timed[kind])) for kind in ("victim", "fresh")]
    seen = (
        f"median {medians[0]:.1f} ms on the victim's texts vs {medians[1]:.1f} ms on new ones;"
        f" KS p={result.p_value:.3g}"
    )
    return Outcome("cache_probe", result.p_value >= SEPARABLE_P, seen)


async def metrics_scrape(target: Target) -> Outcome:
    """``GET /metrics`` on the client port, as anyone: every tenant's figures. Held: not
    served there."""
    async with _client(target) as client:
        response = await client.get("/metrics")
    held = response.status_code in (401, 403, 404)
    return Outcome("metrics_scrape", held, f"/metrics answered {response.status_code}")


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


async def anonymous_upload(target: Target) -> Outcome:
    """A 150 MB upload with no key, streamed as fast as the server takes it. Held: a 401
    before the client could push ``REFUSED_BY`` bytes (the body was never read)."""
    host, port = _host_port(target.url)
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        f"POST /v1/files HTTP/1.1\r\nhost: {host}\r\n"
        "content-type: multipart/form-data; boundary=x\r\n"
        f"content-length: {UPLOAD_BYTES}\r\n\r\n"
    ).encode()
    writer.write(head)
    answer = asyncio.ensure_future(reader.readline())
    sent, chunk, started = 0, b"x" * UPLOAD_CHUNK, time.perf_counter()
    try:
        while sent < UPLOAD_BYTES and not answer.done():
            writer.write(chunk)
            try:
                await asyncio.wait_for(writer.drain(), 5.0)
            except (TimeoutError, ConnectionError):
                break
            sent += len(chunk)
        status_line = await asyncio.wait_for(answer, 30.0)
    except (TimeoutError, ConnectionError):
        status_line = b""
    finally:
        answer.cancel()
        writer.close()
    took = time.perf_counter() - started
    status = status_line.split(b" ")[1].decode() if status_line.count(b" ") >= 2 else "none"
    held = status == "401" and sent < REFUSED_BY
    return Outcome("anonymous_upload", held, f"{status} after {sent >> 20} MiB sent, {took:.2f} s")


async def slow_body(target: Target) -> Outcome:
    """``SLOW_CONNECTIONS`` requests that declare 100 bytes of body, send 9, and stall.
    Held: the server closes every one within ``target.slow_within_s``."""
    host, port = _host_port(target.url)
    head = (
        f"POST /v1/embeddings HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {target.key}\r\n"
        "content-type: application/json\r\ncontent-length: 100\r\n\r\n"
    ).encode()

    async def stall() -> float | None:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(head + b'{"input":')
        started = time.perf_counter()
        try:
            await asyncio.wait_for(reader.read(), target.slow_within_s)
            return time.perf_counter() - started
        except TimeoutError:
            return None
        finally:
            writer.close()

    closed = await asyncio.gather(*(stall() for _ in range(SLOW_CONNECTIONS)))
    held_open = sum(1 for seconds in closed if seconds is None)
    longest = max((seconds for seconds in closed if seconds is not None), default=0.0)
    closed_n = SLOW_CONNECTIONS - held_open
    seen = f"{closed_n} of {SLOW_CONNECTIONS} closed, the last after {longest:.1f} s"
    return Outcome("slow_body", held_open == 0, seen)


async def big_headers(target: Target) -> Outcome:
    """70 KiB of headers in one write (the header cap used to count only split reads).
    Held: 431."""
    host, port = _host_port(target.url)
    reader, writer = await asyncio.open_connection(host, port)
    filler = "".join(f"x-filler-{i}: {'a' * 1000}\r\n" for i in range(HEADER_BYTES // 1016))
    writer.write(f"GET /healthz HTTP/1.1\r\nhost: {host}\r\n{filler}\r\n".encode())
    try:
        status_line = await asyncio.wait_for(reader.readline(), 10.0)
    except (TimeoutError, ConnectionError):
        status_line = b""
    finally:
        writer.close()
    status = status_line.split(b" ")[1].decode() if status_line.count(b" ") >= 2 else "none"
    return Outcome("big_headers", status == "431", f"{HEADER_BYTES >> 10} KiB of headers: {status}")


GUESSED = (
    ("GET", "/admin/tenants"),
    ("POST", "/v1/embeddings"),
    ("GET", "/v1/weights/0000000000000000000000000000000000000000000000000000000000000000"),
)


async def key_guessing(target: Target) -> Outcome:
    """``KEYS_GUESSED`` wrong keys on each of the admin API, the tenant API and the weights
    route, ``GUESSERS`` at a time from one address. Held: each route refuses with 429 (and
    Retry-After) long before the last guess."""
    seen: list[str] = []
    held = True
    async with _client(target) as client:
        for method, path in GUESSED:
            statuses = await _guesses(client, method, path)
            throttled = statuses.get(429, 0) >= KEYS_GUESSED // 2
            held = held and throttled and not any(status >= 500 for status in statuses)
            counts = ", ".join(f"{n}×{status}" for status, n in sorted(statuses.items()))
            seen.append(f"{path.split('/')[2]}: {counts}")
    return Outcome("key_guessing", held, "; ".join(seen))


async def _guesses(client: httpx.AsyncClient, method: str, path: str) -> Counter[int]:
    """The statuses of ``KEYS_GUESSED`` wrong keys on one route; a 429 without Retry-After
    is counted as 0 (not a usable refusal)."""
    statuses: Counter[int] = Counter()
    guesses = iter(range(KEYS_GUESSED))
    body = b'{"input": "x"}' if method == "POST" else None

    async def guess() -> None:
        for n in guesses:
            headers = _auth(f"guess-{n:04d}") | {"content-type": "application/json"}
            response = await client.request(method, path, headers=headers, content=body)
            status = response.status_code
            statuses[0 if status == 429 and "retry-after" not in response.headers else status] += 1

    await asyncio.gather(*(guess() for _ in range(GUESSERS)))
    return statuses


async def bad_inputs(target: Target) -> Outcome:
    """Inputs that answered 500: deep JSON on /v1/rerank, a 5,000-digit or Unicode-digit
    ``limit`` on /v1/files and /v1/batches, a Unicode digit in ``expires_after[seconds]``,
    a deeply nested JSONL line at upload. Held: every one a 4xx."""
    deep = "[" * 5000 + "]" * 5000
    statuses: list[tuple[str, int]] = []
    auth = _auth(target.key)
    async with _client(target) as client:
        response = await client.post(
            "/v1/rerank",
            headers=auth | {"content-type": "application/json"},
            content=b'{"query": "q", "documents": ["d"], "extra": ' + deep.encode() + b"}",
        )
        statuses.append(("deep rerank", response.status_code))
        for path in ("/v1/files", "/v1/batches"):
            for limit in ("9" * 5000, "\u00b2", "\u0663"):
                response = await client.get(path, headers=auth, params={"limit": limit})
                statuses.append((f"{path}?limit", response.status_code))
        line = _line("x", "/v1/embeddings", {"input": "a"})
        response = await client.post(
            "/v1/files",
            headers=auth,
            data={
                "purpose": "batch",
                "expires_after[anchor]": "created_at",
                "expires_after[seconds]": "\u00b2",
            },
            files={"file": ("a.jsonl", line + b"\n", "application/jsonl")},
        )
        statuses.append(("expires_after", response.status_code))
        deep_line = b'{"custom_id": "d", "method": "POST", "url": "/v1/embeddings", "body": ' + (
            b'{"input": "a", "x": ' + deep.encode() + b"}}\n"
        )
        response = await _upload(client, target.key, deep_line)
        statuses.append(("deep JSONL line", response.status_code))
    bad = [f"{what} {status}" for what, status in statuses if not 400 <= status < 500]
    seen = f"{len(statuses)} inputs, " + ("all 4xx" if not bad else "not 4xx: " + ", ".join(bad))
    return Outcome("bad_inputs", not bad, seen)


async def quota_flood(target: Target, seconds: float = 10.0, rate_rps: float = 50.0) -> Outcome:
    """The attacker far over its own quota, 16 texts a request: it gets 429s; judged by
    the victim's interactive figures beside it."""
    statuses: Counter[int] = Counter()
    texts = [f"flood {i}" for i in range(16)]
    async with _client(target) as client:

        async def one() -> None:
            response = await client.post(
                "/v1/embeddings",
                headers=_auth(target.key),
                json={"model": target.model, "input": texts},
            )
            statuses[response.status_code] += 1

        tasks = []
        started = time.perf_counter()
        for n in range(int(seconds * rate_rps)):
            await asyncio.sleep(max(0.0, started + n / rate_rps - time.perf_counter()))
            tasks.append(asyncio.ensure_future(one()))
        await asyncio.gather(*tasks)
    return Outcome("quota_flood", None, ", ".join(f"{n}×{s}" for s, n in sorted(statuses.items())))


ATTACKS: dict[str, Attack] = {
    "nested_line": nested_line,
    "burst_lines": burst_lines,
    "line_flood": line_flood,
    "cache_probe": cache_probe,
    "metrics_scrape": metrics_scrape,
    "anonymous_upload": anonymous_upload,
    "slow_body": slow_body,
    "big_headers": big_headers,
    "key_guessing": key_guessing,
    "bad_inputs": bad_inputs,
    "quota_flood": quota_flood,
}
"""Every attack by name, in the order the issue lists them."""
