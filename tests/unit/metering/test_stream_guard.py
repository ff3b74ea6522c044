"""The stream checks as pure functions: which owned fields differ, what a refusal says,
which fsync answers refuse a stream, and the probe asked again only until one answers."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from nats.js import api

from headway.metering.stream_guard import (
    OnceProbe,
    Owned,
    ServerSync,
    StreamDurabilityError,
    check_durability,
    differences,
    durability_problems,
    env_name,
    monitor_urls,
    refusal,
)

OWNED = Owned("streams.usage", "billing.stream", "billing.subject", "billing.duplicate_window_s")


def usage(**fields: object) -> api.StreamConfig:
    values: dict[str, object] = {
        "name": "USAGE",
        "subjects": ["usage.events"],
        "retention": api.RetentionPolicy.LIMITS,
        "storage": api.StorageType.FILE,
        "num_replicas": 1,
        "max_age": 259200.0,
        "max_bytes": 24 << 30,
        "max_msg_size": 65536,
        "discard": api.DiscardPolicy.NEW,
        "duplicate_window": 120.0,
    }
    return api.StreamConfig(**{**values, **fields})  # type: ignore[arg-type]


def test_the_same_stream_has_no_differences_whatever_else_it_sets() -> None:
    assert differences(usage(max_msgs=10, description="by hand"), usage(), OWNED) == []
    # JetStream answers enums as strings and seconds from nanoseconds
    assert differences(usage(discard="new", max_age=259200.0000001), usage(), OWNED) == []


def test_unset_fields_compare_as_jetstreams_defaults() -> None:
    found = usage(max_bytes=None, max_age=None, num_replicas=None)
    wanted = usage(max_bytes=-1, max_age=0.0, num_replicas=1)
    assert differences(found, wanted, OWNED) == []


def test_each_differing_owned_field_names_its_setting_and_both_values() -> None:
    found = usage(max_bytes=1 << 30, discard=api.DiscardPolicy.OLD, storage="memory")
    diffs = differences(found, usage(), OWNED)
    assert [(d.field, d.setting, d.found, d.wanted, d.mutable) for d in diffs] == [
        ("storage", "streams.usage.storage", "memory", "file", False),
        ("max_bytes", "streams.usage.max_bytes", 1 << 30, 24 << 30, True),
        ("discard", "streams.usage.discard", "old", "new", True),
    ]


def test_a_refusal_says_what_to_do() -> None:
    limits_only = differences(usage(max_age=3600.0), usage(), OWNED)
    message = refusal("USAGE", limits_only, OWNED)
    assert "max_age: the stream has 3600.0, streams.usage.max_age_s" in message
    assert "(HEADWAY_STREAMS__USAGE__MAX_AGE_S) says 259200.0" in message
    assert "HEADWAY_STREAMS__UPDATE=true" in message and "\n" not in message
    fixed = differences(usage(retention="workqueue"), usage(), OWNED)
    message = refusal("USAGE", fixed, OWNED)
    assert "retention: the stream has workqueue, headway needs limits" in message
    assert "nats stream rm USAGE" in message and "HEADWAY_BILLING__STREAM" in message
    assert "HEADWAY_STREAMS__UPDATE" not in message  # no flag mends that


def test_env_names() -> None:
    assert env_name("streams.batch_work.max_bytes") == "HEADWAY_STREAMS__BATCH_WORK__MAX_BYTES"


def test_durability_needs_file_storage_and_every_answering_server_syncing() -> None:
    synced = ServerSync("http://a:8222", True, "a")
    lazy = ServerSync("http://b:8222", False, "b")
    away = ServerSync("http://c:8222", None, "connection refused")
    assert durability_problems("USAGE", api.StorageType.FILE, [synced, away]) == []
    (problem,) = durability_problems("USAGE", api.StorageType.FILE, [synced, lazy])
    assert "b (http://b:8222) does not fsync every write" in problem
    (problem,) = durability_problems("USAGE", api.StorageType.FILE, [away])
    assert "http://c:8222: connection refused" in problem
    (problem,) = durability_problems("USAGE", api.StorageType.MEMORY, [synced])
    assert "kept in memory" in problem
    assert len(durability_problems("USAGE", api.StorageType.FILE, [])) == 1


class FakeProbe:
    def __init__(self, *answers: Sequence[ServerSync]) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def servers(self) -> Sequence[ServerSync]:
        self.calls += 1
        return self.answers.pop(0)


async def test_the_probe_is_asked_again_only_until_a_server_answers() -> None:
    away, synced = ServerSync("u", None, "refused"), ServerSync("u", True, "a")
    probe = FakeProbe([away], [synced], [ServerSync("u", False, "a")])
    once = OnceProbe(probe)
    with pytest.raises(StreamDurabilityError):
        await check_durability("USAGE", api.StorageType.FILE, once, allow_volatile=False)
    for _ in range(3):  # answered once: a set-up done again is not refused by an outage
        await check_durability("USAGE", api.StorageType.FILE, once, allow_volatile=False)
    assert probe.calls == 2


async def test_allow_volatile_asks_no_server() -> None:
    probe = FakeProbe()
    await check_durability("USAGE", api.StorageType.MEMORY, probe, allow_volatile=True)
    assert probe.calls == 0


def test_monitor_urls_default_to_port_8222_of_each_nats_host() -> None:
    servers = ("nats://nats-0.nats:4222", "tls://nats-1.nats:4222", "nats-0.nats:4222")
    assert monitor_urls(servers, ()) == ("http://nats-0.nats:8222", "http://nats-1.nats:8222")
    assert monitor_urls(servers, ("http://m:9000",)) == ("http://m:9000",)
