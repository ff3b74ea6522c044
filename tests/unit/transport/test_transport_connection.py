"""Response parsing, with a fake transport and a fake owner: no sockets."""

import pytest

from headway.transport.connection import Connection, Failure, Pending, Response, Result


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def abort(self) -> None:
        self.aborted = True


class FakeOwner:
    def __init__(self) -> None:
        self.released: list[Connection] = []
        self.dropped: list[Connection] = []

    def release(self, connection: Connection) -> None:
        self.released.append(connection)

    def lost(self, connection: Connection) -> None:
        self.dropped.append(connection)


def connection() -> tuple[Connection, FakeTransport, FakeOwner, list[Result]]:
    pool = FakeOwner()
    transport = FakeTransport()
    conn = Connection(pool)
    conn.connection_made(transport)  # type: ignore[arg-type]
    results: list[Result] = []
    conn.send(Pending(b"GET / HTTP/1.1\r\n\r\n", lambda token, r: results.append(r), 0))
    assert transport.written == [b"GET / HTTP/1.1\r\n\r\n"]
    return conn, transport, pool, results


SHED = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nContent-Length: 5\r\n\r\nbusy!"


def test_a_response_in_one_piece():
    conn, transport, pool, results = connection()
    conn.data_received(SHED)
    assert results == [Response(503, 2.0, b"busy!")]
    assert pool.released == [conn] and not transport.aborted


def test_a_response_byte_by_byte_and_the_next_one_on_the_same_connection():
    conn, _, pool, results = connection()
    for i in range(len(SHED)):
        conn.data_received(SHED[i : i + 1])
    conn.send(Pending(b"x", lambda token, r: results.append(r), 1))
    conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
    assert results == [Response(503, 2.0, b"busy!"), Response(200, None, b"{}")]
    assert pool.released == [conn, conn]


def test_a_chunked_response_with_an_extension_and_a_trailer():
    conn, _, _, results = connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\nabcd\r\n")
    assert results == []
    conn.data_received(b"3\r\nefg\r\n0\r\nX-Trailer: 1\r\n\r\n")
    assert results == [Response(200, None, b"abcdefg")]


def test_a_body_that_ends_with_the_connection():
    conn, _, pool, results = connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\n\r\npart one, ")
    conn.data_received(b"part two")
    assert results == []
    conn.connection_lost(None)
    assert results == [Response(200, None, b"part one, part two")]
    assert pool.dropped == [conn] and pool.released == []


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    ],
)
def test_connection_close_is_honoured(response):
    conn, transport, pool, results = connection()
    conn.data_received(response)
    assert results == [Response(200, None, b"")]
    assert transport.aborted and pool.released == [] and not conn.usable


def test_no_content_for_204():
    conn, _, pool, results = connection()
    conn.data_received(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert results == [Response(204, None, b"")] and pool.released == [conn]


def test_a_retry_after_date_is_not_a_number():
    conn, _, _, results = connection()
    conn.data_received(
        b"HTTP/1.1 429 Too Many\r\nretry-after: Wed, 21 Oct 2015 07:28:00 GMT\r\n"
        b"content-length: 0\r\n\r\n"
    )
    assert results == [Response(429, None, b"")]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x response"),
        (b"HTTP/1.1 2xx OK\r\n\r\n", "bad status line"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: many\r\n\r\n", "bad content-length"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nab", "bytes after the response"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 20_000, "response head over"),
    ],
)
def test_malformed_responses_fail_the_request_and_drop_the_connection(data, problem):
    conn, transport, pool, results = connection()
    conn.data_received(data)
    assert len(results) == 1 and isinstance(results[0], Failure)
    assert results[0].reason == "error" and problem in results[0].detail
    assert transport.aborted and pool.released == []


def test_a_connection_lost_mid_body_fails_the_request():
    conn, _, pool, results = connection()
    conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
    conn.connection_lost(ConnectionResetError("reset by peer"))
    assert results == [Failure("error", "connection lost: reset by peer")]
    assert pool.dropped == [conn]


def test_bytes_nobody_asked_for_drop_the_connection():
    conn, transport, _, results = connection()
    conn.data_received(SHED)
    conn.data_received(SHED)
    assert len(results) == 1 and transport.aborted
