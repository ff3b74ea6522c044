"""What the workers' answers say the pool completed reaches admission (pool.observe_reply)."""

import pytest

from headway import wire
from headway.gateway.admission.controller import AdmissionConfig
from headway.gateway.pool import ReplicaPool
from headway.transport.base import Reply
from headway.transport.mock import MockTransport


def answered(counter: str | None) -> Reply:
    return Reply(200, b"", {} if counter is None else {wire.COMPLETED_HEADER: counter})


@pytest.fixture
def pool(monkeypatch) -> ReplicaPool:
    """A pool whose admission controller records what it hears (``pool.heard``)."""
    transport = MockTransport(lambda request: answered(None))
    pool = ReplicaPool(
        "embed",
        ("http://a", "http://b"),
        transport,
        health_interval_s=1,
        admission=AdmissionConfig(),
    )
    pool.heard = []
    monkeypatch.setattr(pool.admission, "pool_completed", pool.heard.append)
    return pool


def test_each_replica_counts_from_its_first_answer_and_adds_what_its_counter_moved(pool):
    a, b = pool.replicas
    pool.observe_reply(a, answered("1000"))  # started before this gateway heard it: a baseline
    pool.observe_reply(b, answered("50"))
    assert pool.heard == []
    pool.observe_reply(a, answered("1032"))
    pool.observe_reply(b, answered("60"))
    pool.observe_reply(a, answered("1032"))
    assert pool.heard == [32, 10, 0]


def test_a_counter_that_went_back_is_a_restarted_worker(pool):
    a, _ = pool.replicas
    pool.observe_reply(a, answered("500"))
    pool.observe_reply(a, answered("8"))
    assert pool.heard == [8]
    assert a.completed_texts == 8


@pytest.mark.parametrize("counter", [None, "", "-3", "1.5", "²", "lots"])
def test_answers_without_a_counter_change_nothing(pool, counter):
    a, _ = pool.replicas
    pool.observe_reply(a, answered("10"))
    pool.observe_reply(a, answered(counter))
    assert pool.heard == []
    assert a.completed_texts == 10
