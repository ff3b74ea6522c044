"""Open-loop runs against in-test servers on 127.0.0.1."""

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from headway_tools.loadgen.recorder import Outcome
from headway_tools.loadgen.run import LEAD_S, WARM_CONNECTIONS, run_load, run_load_sync
from headway_tools.loadgen.schedule import Schedule, Step
from headway_tools.loadgen.workload import RequestClass, Workload
from tests.loadgen.servers import FixedServer, ScriptedServer, wait_until


def one_class(key: str, timeout_ms: int = 1000) -> Workload:
    return Workload((RequestClass(key, key, texts=(1, 3), words=(4, 12), timeout_ms=timeout_ms),))


async def test_a_stall_delays_every_request_sent_during_it(scripted: ScriptedServer):
    """Open loop: requests keep leaving on time while the server stalls, and each one's
    latency, counted from its intended time, holds the rest of the stall."""
    stall_s = 0.3
    arrived_while_stalled = 0

    def on_request(key: str) -> None:
        nonlocal arrived_while_stalled
        if len(scripted.received) == 20:
            scripted.stall(stall_s)
        if not scripted.open.is_set():
            arrived_while_stalled += 1

    scripted.on_request.append(on_request)
    result = await run_load(
        scripted.url, one_class("ok"), Schedule((Step(1.0, 100),)), client_timeout_s=2.0
    )
    r = result.records
    assert result.report.overall.offered == result.report.overall.served == 100
    # ~30 requests were due during the stall: they were sent then, not after it.
    assert arrived_while_stalled >= 20
    stall_began = r.intended_s[19]  # the 20th request's arrival started the stall
    during = np.flatnonzero((r.intended_s >= stall_began) & (r.intended_s < stall_began + 0.25))
    assert len(during) >= 20
    answered = r.intended_s[during] + r.latency_s[during]
    assert (answered >= stall_began + stall_s - 0.005).all()
    assert (r.lag_s[during] < 0.05).all()
    assert result.report.overall.latency_p95_ms >= 250
    after = r.intended_s >= stall_began + stall_s + 0.1
    assert (r.latency_s[after] < 0.1).all()


async def test_outcomes_are_classified_and_the_run_stops_by_itself(scripted: ScriptedServer):
    keys = ("ok", "shed", "quota", "late", "boom", "teapot", "slow", "hang", "drop")
    workload = Workload(
        tuple(RequestClass(key, key, texts=(2, 2), words=(4, 4), timeout_ms=100) for key in keys),
        seed=3,
    )
    schedule = Schedule((Step(0.5, 180),))
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run_load(scripted.url, workload, schedule, client_timeout_s=0.5)
    elapsed = loop.time() - started
    # The last hung request was due at ~0.49 s and is given up 0.5 s later. The "hang"
    # class is never answered: a run that did not give up would never end, so the upper
    # bound only has to be finite (1.6 s failed once on a loaded 2-core machine: 1.79 s).
    assert 0.95 + LEAD_S <= elapsed < 5.0
    by_class = {s.name: s for s in result.report.classes}
    assert all(by_class[key].offered > 0 for key in keys)
    assert sum(s.offered for s in by_class.values()) == 90

    def counts(name: str) -> tuple[int, ...]:
        s = by_class[name]
        return (s.served, s.goodput, s.shed, s.quota, s.timeouts, s.errors)

    n = {key: by_class[key].offered for key in keys}
    assert counts("ok") == (n["ok"], n["ok"], 0, 0, 0, 0)
    assert counts("shed") == (0, 0, n["shed"], 0, 0, 0)
    assert counts("quota") == (0, 0, 0, n["quota"], 0, 0)
    assert counts("late") == (0, 0, 0, 0, n["late"], 0)
    assert counts("boom") == (0, 0, 0, 0, 0, n["boom"])
    assert counts("teapot") == (0, 0, 0, 0, 0, n["teapot"])
    assert counts("slow") == (n["slow"], 0, 0, 0, 0, 0)  # served, but after its deadline
    assert counts("hang") == (0, 0, 0, 0, n["hang"], 0)
    assert counts("drop") == (0, 0, 0, 0, 0, n["drop"])
    assert by_class["slow"].latency_p50_ms >= 200
    assert by_class["ok"].served_texts == 2 * n["ok"]
    assert by_class["shed"].rejection_p99_ms is not None
    reasons = result.report.error_reasons
    assert reasons == {
        "status 500 internal_error": n["boom"],
        "status 418": n["teapot"],
        "connection lost: closed by peer": n["drop"],
    }
    hung = result.records.class_index == keys.index("hang")
    assert (result.records.status[hung] == 0).all()
    assert np.allclose(result.records.latency_s[hung], 0.5, atol=0.05)
    assert (result.records.outcome[hung] == Outcome.TIMEOUT).all()
    # Every connection the run opened is closed again.
    await wait_until(lambda: not scripted.transports, 2.0, "the client's connections to close")


def block_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # a stalled generator: what the lag report exists to catch


async def test_a_late_generator_reports_its_lag_and_counts_it_in_latency(
    scripted: ScriptedServer,
):
    # The server shares the test's event loop: on the 60th request, it blocks it.
    scripted.on_request.append(
        lambda key: block_the_loop(0.08) if len(scripted.received) == 60 else None
    )
    result = await run_load(
        scripted.url, one_class("ok"), Schedule((Step(1.0, 200),)), client_timeout_s=2.0
    )
    report, r = result.report, result.records
    assert report.behind_schedule
    assert report.overall.lag_max_ms >= 70
    assert report.timeline[0].lag_p99_ms > 5
    assert (r.latency_s >= r.lag_s).all()
    # 16 requests were due while the loop was blocked, 14 of them over 10 ms before it ended.
    assert (r.lag_s > 0.01).sum() >= 10


async def test_a_run_against_nothing_counts_errors_and_ends():
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        result = await run_load(
            url, one_class("ok"), Schedule((Step(0.2, 50),)), client_timeout_s=5.0
        )
    assert result.report.overall.errors == result.report.overall.offered == 10
    (reason,) = result.report.error_reasons
    assert reason.startswith("connect: ConnectionRefusedError")
    # The warm-up's connections failed too, before the clock started.
    assert result.report.client is not None
    assert result.report.client.connect_failures == 10 + WARM_CONNECTIONS


@pytest.fixture
def fixed_server() -> Iterator[FixedServer]:
    """The trivial 503 server on its own event loop, in a thread."""
    loop = asyncio.new_event_loop()
    server = FixedServer()
    server.port = loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, name="fixed-503-server")
    thread.start()
    yield server
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_self_check_a_thousand_requests_per_second_on_schedule(fixed_server: FixedServer):
    """A loose floor (the generator sustains ~10× this on one core; see the loadgen
    docs): 1,000 requests/s for 2 s, all answered, the schedule kept at p99."""
    result = run_load_sync(
        f"http://127.0.0.1:{fixed_server.port}",
        one_class("k"),
        Schedule((Step(2.0, 1000),)),
        client_timeout_s=2.0,
    )
    overall = result.report.overall
    assert overall.offered == overall.shed == fixed_server.served == 2000
    assert overall.lag_p99_ms is not None and overall.lag_p99_ms < 10
    assert result.report.client is not None
    assert result.report.client.cpu_us_per_request is not None


async def test_a_schedule_of_pauses_sends_nothing_and_lasts_its_duration(
    scripted: ScriptedServer,
):
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await run_load(
        scripted.url, one_class("ok"), Schedule((Step(0.2, 0),)), client_timeout_s=1.0
    )
    assert loop.time() - started >= 0.2
    assert result.report.overall.offered == 0 and len(result.report.timeline) == 1
    assert scripted.received == []
