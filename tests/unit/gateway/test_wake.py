"""The wake hook: at most once a second per wanted pool, failures logged once."""

import logging
import random

import msgspec
import pytest

from headway.gateway.admission.controller import AdmissionConfig
from headway.gateway.coldstart import ColdStart, HoldPolicy
from headway.gateway.pool import ReplicaPool
from headway.gateway.wake import HttpWakeHook, RecordingWakeHook, WakeFailed, Waker
from headway.transport.base import ConnectFailed, Reply, UpstreamRequest
from headway.transport.mock import MockTransport
from tests.fakes import FakeClock


def cold_start(name: str) -> ColdStart:
    pool = ReplicaPool(
        name,
        (),
        MockTransport(lambda request: Reply(503, b"{}", {})),
        health_interval_s=1,
        admission=AdmissionConfig(),
        rng=random.Random(1),
    )
    return ColdStart(pool, HoldPolicy())


async def test_a_wanted_pool_is_woken_at_most_once_a_second():
    clock = FakeClock()
    hook = RecordingWakeHook()
    embed, rerank = cold_start("embed"), cold_start("rerank")
    outcomes: list[tuple[str, bool]] = []
    waker = Waker(hook, [embed, rerank], clock, on_wake=lambda p, ok: outcomes.append((p, ok)))
    await waker.step()
    assert hook.woken == []  # nobody asked
    embed.wanted = True
    await waker.step()
    assert hook.woken == ["embed"] and not embed.wanted
    embed.wanted = True
    clock.advance(0.5)
    await waker.step()
    assert hook.woken == ["embed"]  # within the second: not again
    clock.advance(0.5)
    await waker.step()
    assert hook.woken == ["embed", "embed"]
    clock.advance(1)
    embed.held_requests = 1  # still holding requests: told again, once a second
    await waker.step()
    assert hook.woken == ["embed", "embed", "embed"]
    assert outcomes == [("embed", True)] * 3


async def test_a_failing_hook_is_logged_once_and_again_after_it_recovered(caplog):
    clock = FakeClock()
    hook = RecordingWakeHook()
    embed = cold_start("embed")
    outcomes: list[bool] = []
    waker = Waker(hook, [embed], clock, on_wake=lambda p, ok: outcomes.append(ok))
    hook.failing = True
    with caplog.at_level(logging.INFO, logger="headway.gateway.wake"):
        for _ in range(3):
            embed.wanted = True
            await waker.step()
            clock.advance(1)
        hook.failing = False
        embed.wanted = True
        await waker.step()
    assert outcomes == [False, False, False, True]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "embed" in warnings[0].getMessage()
    assert "answers again" in caplog.records[-1].getMessage()


async def test_the_http_hook_posts_the_pool_and_needs_a_2xx():
    sent: list[UpstreamRequest] = []
    status = 202

    def answer(request: UpstreamRequest) -> Reply:
        sent.append(request)
        return Reply(status, b"{}", {})

    hook = HttpWakeHook("http://127.0.0.1:4000/wake", MockTransport(answer))
    await hook.wake("rerank")
    request = sent[0]
    assert (request.method, request.base_url, request.path) == (
        "POST",
        "http://127.0.0.1:4000",
        "/wake",
    )
    assert msgspec.json.decode(request.body) == {"pool": "rerank"}
    assert request.content_type == "application/json"
    status = 500
    with pytest.raises(WakeFailed, match="500"):
        await hook.wake("embed")


async def test_the_http_hook_fails_when_nothing_answers():
    def refuse(request: UpstreamRequest) -> Reply:
        raise ConnectFailed("connection refused")

    with pytest.raises(WakeFailed, match="no answer"):
        await HttpWakeHook("http://127.0.0.1:1/wake", MockTransport(refuse)).wake("embed")
