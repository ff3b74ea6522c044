"""The outbox's inbox: commands taken in order, none lost to a put racing a take."""

from __future__ import annotations

import threading

from headway.metering.outbox import _STOP, _Inbox


def test_commands_come_out_in_order_up_to_the_limit_and_the_rest_stay_ready():
    inbox = _Inbox()
    for i in range(5):
        inbox.put(i)  # type: ignore[arg-type]
    assert inbox.wait(0)
    assert inbox.take(3) == ([0, 1, 2], False)
    assert inbox.wait(0)  # the rest are announced again
    assert inbox.take(None) == ([3, 4], False)
    assert not inbox.wait(0)


def test_stop_ends_a_take_and_what_came_before_it_is_taken():
    inbox = _Inbox()
    inbox.put(1)  # type: ignore[arg-type]
    inbox.put(_STOP)
    assert inbox.take(None) == ([1], True)


def test_nothing_put_while_the_writer_takes_is_lost():
    inbox = _Inbox()
    total = 20_000
    taken: list[int] = []

    def writer() -> None:
        while len(taken) < total:
            if inbox.wait(5):
                taken.extend(inbox.take(64)[0])  # type: ignore[arg-type]

    thread = threading.Thread(target=writer)
    thread.start()
    for i in range(total):
        inbox.put(i)  # type: ignore[arg-type]
    thread.join(30)
    assert taken == list(range(total))
