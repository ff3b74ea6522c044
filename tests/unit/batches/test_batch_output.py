"""Output and error file lines: OpenAI's shape, the response body embedded untouched."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.batches.model import LineResult, line_result_id
from headway.batches.output import (
    EXPIRED_MESSAGE,
    WRITE_BYTES,
    answered,
    assemble,
    not_run,
    write_lines,
)

BATCH = "batch_0123456789abcdef01234567"
KEYS = ["id", "custom_id", "response", "error"]


def decoded(line: bytes) -> dict[str, object]:
    assert b"\n" not in line and b"\r" not in line
    value = msgspec.json.decode(line)
    assert isinstance(value, dict) and list(value) == KEYS
    return value


def test_an_answered_line_embeds_the_body_byte_for_byte() -> None:
    # Floats msgspec (or any encoder) would print differently if it re-encoded them.
    body = b'{"data":[{"index":0,"embedding":[0.10000000000000000555,-0.0,1E-7,3.0e+2]}]}'
    line = answered(BATCH, 7, "req-7", 200, "rid", body)
    assert decoded(line) == {
        "id": line_result_id(BATCH, 7),
        "custom_id": "req-7",
        "response": {"status_code": 200, "request_id": "rid", "body": msgspec.json.decode(body)},
        "error": None,
    }
    assert line.count(body) == 1
    assert line.endswith(b',"body":' + body + b'},"error":null}')


def test_an_error_answer_is_the_same_shape_with_our_error_body() -> None:
    body = b'{"error":{"type":"validation_error","message":"`input` must not be empty"}}'
    line = answered(BATCH, 2, "a", 422, "rid", body)
    response = decoded(line)["response"]
    assert response == {"status_code": 422, "request_id": "rid", "body": msgspec.json.decode(body)}
    assert body in line


def test_a_pretty_printed_body_still_makes_one_line_with_its_numbers_untouched() -> None:
    body = b'\n{\r\n  "values": [1.50, 2e0],\n  "s": "a\\nb"\n}\n'
    line = answered(BATCH, 1, "a", 200, "rid", body)
    assert decoded(line)["response"] == {
        "status_code": 200,
        "request_id": "rid",
        "body": {"values": [1.5, 2.0], "s": "a\nb"},
    }
    assert b"[1.50, 2e0]" in line and b'"a\\nb"' in line


@pytest.mark.parametrize("body", [b"", b"{", b'{"a": 1} trailing', b"not json", b"{'a': 1}"])
def test_a_body_that_is_not_json_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match="line 3 is not JSON"):
        answered(BATCH, 3, "a", 200, "rid", body)


def test_a_line_that_never_ran_has_no_response_and_may_have_no_custom_id() -> None:
    assert decoded(not_run(BATCH, 4, "req-4", "batch_expired", EXPIRED_MESSAGE)) == {
        "id": line_result_id(BATCH, 4),
        "custom_id": "req-4",
        "response": None,
        "error": {"code": "batch_expired", "message": EXPIRED_MESSAGE},
    }
    line = not_run(BATCH, 5, None, "invalid_json_line", "the line is not a JSON object")
    assert decoded(line)["custom_id"] is None


@given(
    st.text(max_size=40),
    st.integers(min_value=1, max_value=50_000),
    st.text(max_size=80),
    st.integers(min_value=100, max_value=599),
)
def test_every_line_is_one_json_object_whatever_the_strings_hold(
    custom_id: str, line: int, message: str, status: int
) -> None:
    body = msgspec.json.encode({"message": message, "x": [1.25, None]})
    for made in (
        answered(BATCH, line, custom_id, status, custom_id, body),
        not_run(BATCH, line, custom_id, "invalid_body", message),
    ):
        value = decoded(made)
        assert value["id"] == line_result_id(BATCH, line)
        assert value["custom_id"] == custom_id


def test_assemble_splits_ok_from_failed_in_the_order_given() -> None:
    results = [
        LineResult(3, True, b'{"n":3}'),
        LineResult(1, False, b'{"n":1}'),
        LineResult(2, True, b'{"n":2}'),
        LineResult(4, False, b'{"n":4}'),
    ]
    assert assemble(results) == (b'{"n":3}\n{"n":2}\n', b'{"n":1}\n{"n":4}\n')
    assert assemble(iter(results[:1])) == (b'{"n":3}\n', b"")
    assert assemble([]) == (b"", b"")


def test_assemble_refuses_a_result_that_is_more_than_one_line() -> None:
    with pytest.raises(ValueError, match="line 9 is not one line"):
        assemble([LineResult(9, True, b'{"a":\n1}')])


class Writes:
    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.calls.append(data)


def test_files_are_written_as_their_lines_come_never_whole() -> None:
    line = b'{"id": "x", "pad": "' + b"p" * 1000 + b'"}'
    results = (LineResult(n, n % 3 != 0, line) for n in range(1, 5001))
    output, errors = Writes(), Writes()
    assert write_lines(results, output, errors) == (3334, 1666)
    assert b"".join(output.calls) == (line + b"\n") * 3334
    assert b"".join(errors.calls) == (line + b"\n") * 1666
    # Each write is about WRITE_BYTES (the last less): 5 MB never sits in one buffer.
    assert len(output.calls) > 3
    assert max(map(len, output.calls + errors.calls)) < WRITE_BYTES + len(line) + 1


def test_a_result_of_two_lines_stops_the_file() -> None:
    with pytest.raises(ValueError, match="line 2 is not one line"):
        write_lines(
            [LineResult(1, True, b"{}"), LineResult(2, True, b"{}\n{}")], Writes(), Writes()
        )
