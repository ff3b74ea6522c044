"""A gateway SIGKILLed right after it answered 200 keeps what it answered for.

The real ``headway gateway`` (no worker needed; the batch store on SQLite, or on Postgres
with ``--postgres-url``; the files on disk) takes uploads, batch creates and file deletes
from four clients of two tenants at once, some uploads repeating bytes stored before (a
reused copy, perhaps of a file being deleted meanwhile), and is SIGKILLed by the client
thread that receives the n-th 200 (n drawn per iteration), the other requests caught
wherever they are: mid-body, placing bytes, committing. After each kill, every file and
batch answered 200 in any iteration is in the database, each file's bytes on disk hash to
its sha256, no file deleted with a 200 is back, and no record at all (answered or not)
names bytes that are missing or wrong. Then a new gateway starts on the same directory
and the loop goes on.

A killed process loses nothing the OS holds, so this checks the order of the writes
(bytes, then the record, then the 200), not the fsyncs a power loss needs
(``test_content_race.py`` checks those are asked for).
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psycopg
import pytest

from headway.registry.postgres import PostgresRegistry
from headway.registry.sqlite import Registry
from headway_tools.testing.postgres_server import PostgresServer
from headway_tools.testing.server import free_port

pytestmark = pytest.mark.e2e  # a real gateway process (no model): seconds, not milliseconds

ITERATIONS = {"sqlite": 6, "postgres": 4}
"""Kills a run, per store: a gateway on Postgres takes longer to start (~35 s a run here)."""
KEYS = ("demo-key-search-app", "demo-key-nightly-index")
CLIENTS_PER_KEY = 2
"""Uploads in flight per tenant: within ``batches.max_uploads_per_tenant`` (4)."""
REUSE_SHARE = 0.3
"""Of uploads, those that send bytes a file answered before holds (the dedup path); the
first client's first upload of each gateway always does."""
BATCH_SHARE = 0.6
"""Of files uploaded, those a batch is created on; of the others, some are deleted."""
DELETE_SHARE = 0.5
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Answered:
    """What the gateways answered 200 for, over every iteration."""

    files: dict[str, str] = field(default_factory=dict)
    """File id -> the sha256 of the bytes sent."""
    contents: list[bytes] = field(default_factory=list)
    batches: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    """Files whose delete was answered 200: their records must be gone."""
    refusals: list[str] = field(default_factory=list)
    """Answers other than 200 before the kill: none is expected."""
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def gateway_forks(data_dir: Path) -> Iterator[subprocess.Popen[str]]:
    env = os.environ | {
        "HEADWAY_GATEWAY__QUOTA__ENABLED": "false",
        "HEADWAY_BATCHES__MAX_OPEN_BATCHES_PER_TENANT": "100000",
    }
    with (data_dir / "gateways.log").open("w") as log:
        forks = subprocess.Popen(
            [sys.executable, "-m", "tests.batches.gateway_forks"],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    try:
        yield forks
    finally:
        assert forks.stdin is not None and forks.stdout is not None
        forks.stdin.close()  # it kills the children left, then exits
        forks.wait(30)
        forks.stdout.close()


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)  # poll interval


def start(forks: subprocess.Popen[str], arguments: str) -> int:
    assert forks.stdin is not None and forks.stdout is not None
    forks.stdin.write(arguments + "\n")
    forks.stdin.flush()
    return int(forks.stdout.readline())


def dead(pid: int) -> bool:
    """Gone, or a zombie (its files closed, its locks released)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or during the read
        return True
    return state in ("Z", "X")


def jsonl(rng: random.Random, tag: str) -> bytes:
    lines = []
    for n in range(rng.randint(1, 400)):
        body = {"model": "synthetic", "input": [f"{tag} text {n} " + "x" * rng.randint(0, 200)]}
        line = {"custom_id": f"{tag}-{n}", "method": "POST", "url": "/v1/embeddings", "body": body}
        lines.append(msgspec.json.encode(line))
    return b"\n".join(lines) + b"\n"


def clients(url: str, pid: int, kill_after: int, seed: int, answered: Answered) -> None:
    """Four clients uploading and creating batches until one of them kills the gateway."""
    stop = threading.Event()
    count = [0]

    def got_200() -> None:
        with answered.lock:
            count[0] += 1
            if count[0] == kill_after:
                os.kill(pid, signal.SIGKILL)  # right after this 200, nothing in between
                stop.set()

    def create(http: httpx.Client, file_id: str) -> None:
        body = {"input_file_id": file_id, "endpoint": "/v1/embeddings", "completion_window": "24h"}
        reply = http.post("/v1/batches", json=body)
        if reply.status_code != 200:
            answered.refusals.append(f"create {reply.status_code}: {reply.text}")
            return
        with answered.lock:
            answered.batches.add(reply.json()["id"])
        got_200()

    def delete(http: httpx.Client, file_id: str) -> None:
        with answered.lock:  # kept or not, if the kill leaves this delete unanswered
            digest = answered.files.pop(file_id)
        reply = http.delete(f"/v1/files/{file_id}")
        if reply.status_code != 200:
            answered.refusals.append(f"delete {reply.status_code}: {reply.text}")
            answered.files[file_id] = digest
            return
        with answered.lock:
            answered.deleted.add(file_id)
        got_200()

    def client(key: str, index: int) -> None:
        rng = random.Random(seed * 100 + index)
        headers = {"authorization": f"Bearer {key}"}
        with httpx.Client(base_url=url, timeout=60, headers=headers) as http:
            first = True
            while not stop.is_set():
                with answered.lock:
                    stored = list(answered.contents)
                if stored and ((first and index == 0) or rng.random() < REUSE_SHARE):
                    content = rng.choice(stored)
                else:
                    content = jsonl(rng, f"s{seed}c{index}u{rng.randrange(10**6)}")
                first = False
                try:
                    reply = http.post(
                        "/v1/files",
                        data={"purpose": "batch"},
                        files={"file": ("input.jsonl", content, "application/jsonl")},
                    )
                    if reply.status_code != 200:
                        answered.refusals.append(f"upload {reply.status_code}: {reply.text}")
                        return
                    file_id = reply.json()["id"]
                    with answered.lock:
                        answered.files[file_id] = hashlib.sha256(content).hexdigest()
                        answered.contents.append(content)
                    got_200()
                    if rng.random() < BATCH_SHARE:
                        create(http, file_id)
                    elif rng.random() < DELETE_SHARE:
                        delete(http, file_id)  # its bytes released while others reuse them
                except httpx.HTTPError:
                    if not stop.is_set():
                        raise
                    return  # killed mid-request: no answer, no promise

    threads = [
        threading.Thread(target=client, args=(key, k * CLIENTS_PER_KEY + i))
        for k, key in enumerate(KEYS)
        for i in range(CLIENTS_PER_KEY)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)


def rows(store: Store, sql: str) -> list[tuple[Any, ...]]:
    """One read of the batch store's database, as the restarted gateway will see it."""
    if store.postgres_url is None:
        with closing(sqlite3.connect(store.data_dir / "batches.sqlite3")) as db:
            return db.execute(sql).fetchall()
    with psycopg.connect(store.postgres_url) as db:
        return db.execute(sql).fetchall()


def check(store: Store, answered: Answered) -> None:
    """Everything answered is there, and no record names bytes that are not."""
    data_dir = store.data_dir
    records = dict(rows(store, "SELECT id, sha256 FROM batch_files"))
    sizes = dict(rows(store, "SELECT id, bytes FROM batch_files"))
    batches = {batch_id for (batch_id,) in rows(store, "SELECT id FROM batches")}
    lost = {f: digest for f, digest in answered.files.items() if records.get(f) != digest}
    assert lost == {}, "files answered 200 and not kept"
    assert answered.batches - batches == set(), "batches answered 200 and not kept"
    assert answered.deleted & records.keys() == set(), "files deleted with a 200 came back"
    for file_id, digest in records.items():
        path = data_dir / "files" / digest[:2] / digest[2:4] / digest
        assert path.is_file(), f"{file_id} names bytes that are not stored"
        data = path.read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest and len(data) == sizes[file_id]


@dataclass(frozen=True)
class Store:
    kind: str
    data_dir: Path
    postgres_url: str | None
    """Shared mode's batch store (and registry, ledger), on a database of its own."""


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        Registry(tmp_path / "registry.sqlite3").seed_demo()
        yield Store("sqlite", tmp_path, None)
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    database = f"sigkill_{secrets.token_hex(6)}"
    server.psql(f"CREATE DATABASE {database}")
    try:
        registry = PostgresRegistry(server.url_of(database))
        registry.seed_demo()
        registry.close()
        yield Store("postgres", tmp_path, server.url_of(database))
    finally:
        server.psql(f"DROP DATABASE {database} WITH (FORCE)")


def test_every_upload_and_batch_answered_200_survives_a_sigkill(store: Store) -> None:
    tmp_path = store.data_dir
    shared = "" if store.postgres_url is None else f" --postgres-url {store.postgres_url}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    answered = Answered()
    kills: list[int] = []

    def healthy() -> bool:
        try:
            return httpx.get(url + "/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    with gateway_forks(tmp_path) as forks:
        for iteration in range(ITERATIONS[store.kind]):
            pid = start(forks, f"--port {port} --ops-port 0 --data-dir {tmp_path}{shared}")
            wait_for(healthy, 60, "the gateway to answer")
            kill_after = random.Random(iteration).randint(1, 8)
            clients(url, pid, kill_after, iteration, answered)
            assert answered.refusals == []
            wait_for(partial(dead, pid), 10, "the gateway to die")
            kills.append(kill_after)
            check(store, answered)

    assert len(kills) == ITERATIONS[store.kind]
    reused = len(answered.files) - len(set(answered.files.values()))
    assert reused > 0, "no upload repeated stored bytes: the reuse path was not killed in"
    assert answered.batches, "no batch create was answered: none was killed around"
    print(
        f"{store.kind}: {len(kills)} kills after the n-th 200 (n = {kills}):"
        f" {len(answered.files)} files"
        f" ({reused} of them stored bytes again) and {len(answered.batches)} batches kept,"
        f" {len(answered.deleted)} files deleted",
        file=sys.stderr,
    )
