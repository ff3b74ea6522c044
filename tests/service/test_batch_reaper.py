"""The executor's reapers: an expired file's record goes, and its bytes go with the last
record that names them (released under the content's lock, ``BatchStore.release_content``);
bytes no record names, which only a crash leaves, are swept once a day old."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from headway.batches.mover import UNNAMED_AGE_S
from tests.service.batch_helpers import BATCHES, embed_line, jsonl, running
from tests.service.conftest import TEST_LIMITS, auth, make_stack

HOUR_S = 3600
CONTENT = jsonl(embed_line("r1", "kept until its last record expires"))


@pytest.fixture
async def stack(tmp_path):
    built = await make_stack(tmp_path, batches=BATCHES)
    yield built
    await built.close()


async def upload_for(client: httpx.AsyncClient, seconds: int | None) -> str:
    fields = {"purpose": "batch"}
    if seconds is not None:
        fields["expires_after[seconds]"] = str(seconds)
    reply = await client.post(
        "/v1/files",
        headers=auth(),
        data=fields,
        files={"file": ("input.jsonl", CONTENT, "application/jsonl")},
    )
    assert reply.status_code == 200, reply.text
    file_id: str = reply.json()["id"]
    return file_id


async def test_expired_files_go_and_their_bytes_with_the_last_record(stack, tmp_path):
    parts = stack.batches
    short = await upload_for(stack.client, HOUR_S)
    long = await upload_for(stack.client, 2 * HOUR_S)  # the same bytes: one stored copy
    tenant_id = stack.registry.tenant("search-app").id  # demo-key-search-app's
    record = parts.store.file(tenant_id, short)
    assert record is not None and parts.files.exists(record.sha256)
    now = [time.time()]
    async with running(
        parts, stack.client, tmp_path, limits=TEST_LIMITS, clock=lambda: now[0]
    ) as runner:
        now[0] += HOUR_S + 60
        await runner.mover.reap_files()
        assert parts.store.file(tenant_id, short) is None
        assert parts.store.file(tenant_id, long) is not None
        assert parts.files.read(record.sha256) == CONTENT  # still named by the other

        now[0] += HOUR_S
        await runner.mover.reap_files()
        assert parts.store.file(tenant_id, long) is None
        assert not parts.files.exists(record.sha256)


async def test_bytes_no_record_names_are_swept_once_a_day_old(stack, tmp_path):
    """As a gateway killed between placing an upload's bytes and committing its record
    leaves them; a named copy stays, however old."""
    parts = stack.batches
    named = await upload_for(stack.client, None)
    tenant_id = stack.registry.tenant("search-app").id
    record = parts.store.file(tenant_id, named)
    assert record is not None
    orphan = parts.files.put(b"bytes whose record never committed\n")
    fresh_orphan = parts.files.put(b"bytes an upload placed a moment ago\n")
    day_ago = time.time() - UNNAMED_AGE_S - 60
    for digest in (orphan, record.sha256):
        os.utime(parts.files.path_of(digest), (day_ago, day_ago))
    async with running(parts, stack.client, tmp_path, limits=TEST_LIMITS) as runner:
        assert await runner.mover.sweep_unnamed() == 1
    assert not parts.files.exists(orphan)
    assert parts.files.read(record.sha256) == CONTENT
    assert parts.files.exists(fresh_orphan)  # younger than a day: left for a later sweep
