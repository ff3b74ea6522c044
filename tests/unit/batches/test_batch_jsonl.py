"""Batch input files: the upload check and the line-by-line read at validation."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.batches.inputs import body_parser
from headway.batches.jsonl import (
    MAX_DEPTH,
    Line,
    UploadCheck,
    _nests_deeper,
    check_line,
    check_upload,
    read_lines,
    reread,
)
from headway.batches.model import LineError
from headway.errors import InvalidRequest, PayloadTooLarge, ValidationFailed
from headway.gateway.endpoints.embeddings import Embeddings
from headway.settings import LimitsSettings
from tests import hostile

SECRET = "patient Jane Roe, diagnosis"
"""Input text no message may ever contain."""

EMBEDDINGS = "/v1/embeddings"


def request(custom_id: object = "req-1", **fields: object) -> bytes:
    line: dict[str, object] = {
        "custom_id": custom_id,
        "method": "POST",
        "url": EMBEDDINGS,
        "body": {"model": "m", "input": [SECRET]},
    }
    line.update(fields)
    return msgspec.json.encode({k: v for k, v in line.items() if v is not ...})


def embeddings_texts(body: bytes) -> int:
    """The real endpoint's strict parser, as the executor passes it."""
    return Embeddings().parse(body, LimitsSettings()).texts


def read(data: bytes, max_inputs: int | None = None) -> tuple[list[Line], list[LineError]]:
    return read_lines(data, EMBEDDINGS, embeddings_texts, max_inputs=max_inputs)


def only_error(data: bytes) -> LineError:
    lines, errors = read(data)
    assert lines == [] and len(errors) == 1
    assert SECRET not in errors[0].message
    return errors[0]


# check_upload


def test_counts_request_lines_skipping_blank_ones_with_or_without_a_final_newline() -> None:
    body = request("a") + b"\n  \n\t\r\n" + request("b") + b"\r\n\n" + request("c")
    assert check_upload(body, max_bytes=1 << 20, max_lines=10) == 3
    assert check_upload(body + b"\n", max_bytes=1 << 20, max_lines=10) == 3


def test_a_utf8_byte_order_mark_at_the_start_is_skipped() -> None:
    assert check_upload(b"\xef\xbb\xbf" + request(), max_bytes=1 << 20, max_lines=10) == 1


def test_a_file_over_the_byte_limit_is_413() -> None:
    body = request()
    assert check_upload(body, max_bytes=len(body), max_lines=10) == 1
    with pytest.raises(PayloadTooLarge, match=f"the limit is {len(body) - 1}") as caught:
        check_upload(body, max_bytes=len(body) - 1, max_lines=10)
    assert caught.value.status == 413


@pytest.mark.parametrize("body", [b"", b"\n", b" \r\n\t\n", b"\xef\xbb\xbf"])
def test_a_file_without_request_lines_is_refused(body: bytes) -> None:
    with pytest.raises(InvalidRequest, match="no request lines"):
        check_upload(body, max_bytes=1 << 20, max_lines=10)


@pytest.mark.parametrize(
    "bad",
    [
        b'{"custom_id": "\xff"}',  # inside a string, where a JSON syntax check looks no further
        b'{"custom_id": "caf\xe9"}',  # Latin-1
        b"\xed\xa0\x80{}",  # a UTF-16 surrogate, encoded
    ],
)
def test_a_line_that_is_not_utf8_is_named(bad: bytes) -> None:
    body = request("a") + b"\n\n" + bad + b"\n" + request("b")
    with pytest.raises(InvalidRequest) as caught:
        check_upload(body, max_bytes=1 << 20, max_lines=10)
    assert caught.value.message.startswith("line 3 is not UTF-8")


@pytest.mark.parametrize(
    "bad",
    [
        b"[1, 2]",
        b'"just a string"',
        b"42",
        b"null",
        f'{{"custom_id": "a", "body": "{SECRET}"'.encode(),  # truncated
        f'{{"custom_id": "a"}} {SECRET}'.encode(),  # trailing text
        f"custom_id=a,input={SECRET}".encode(),  # CSV-ish
    ],
)
def test_a_line_that_is_not_a_json_object_is_named_without_its_content(bad: bytes) -> None:
    body = request() + b"\n" + bad + b"\n"
    with pytest.raises(InvalidRequest) as caught:
        check_upload(body, max_bytes=1 << 20, max_lines=10)
    assert caught.value.message == (
        "line 2 is not a JSON object: upload JSONL, one request object per line"
    )
    assert caught.value.status == 400


def test_the_first_problem_in_file_order_is_the_one_named() -> None:
    body = b"\n".join([request("a"), b"[]", b'{"x": "\xff"}'])
    with pytest.raises(InvalidRequest, match=r"^line 2 is not a JSON object"):
        check_upload(body, max_bytes=1 << 20, max_lines=10)
    body = b"\n".join([request("a"), b'{"x": "\xff"}', b"[]"])
    with pytest.raises(InvalidRequest, match=r"^line 2 is not UTF-8"):
        check_upload(body, max_bytes=1 << 20, max_lines=10)


def test_more_lines_than_the_limit_are_refused_but_exactly_the_limit_is_not() -> None:
    body = b"\n".join(request(str(i)) for i in range(5)) + b"\n\n\n"
    assert check_upload(body, max_bytes=1 << 20, max_lines=5) == 5
    with pytest.raises(InvalidRequest, match="more than 4 request lines; the limit is 4"):
        check_upload(body, max_bytes=1 << 20, max_lines=4)


def test_a_view_into_a_larger_body_is_checked_as_the_file_alone() -> None:
    # A caller may hand the file over as a memoryview into a larger buffer.
    file = request("a") + b"\n" + request("b") + '\n{"é": 1}\n'.encode()
    whole = b"--boundary\r\n\r\n" + file + b"\r\n--boundary--\r\n"
    view = memoryview(whole)[14 : 14 + len(file)]
    assert bytes(view) == file
    assert check_upload(view, max_bytes=1 << 20, max_lines=10) == 3
    ascii_whole = b"xx" + request() + b"\n[]\nyy"
    with pytest.raises(InvalidRequest, match=r"^line 2 is not a JSON object"):
        check_upload(memoryview(ascii_whole)[2:-2], max_bytes=1 << 20, max_lines=10)
    with pytest.raises(InvalidRequest, match=r"^line 2 is not UTF-8"):
        check_upload(
            memoryview(b"x" + request() + b'\n{"a":"\xff"}')[1:], max_bytes=999, max_lines=9
        )


# read_lines


def test_good_lines_keep_their_body_bytes_exactly_and_count_their_texts() -> None:
    body = b'{ "model" : "m",  "input": ["a", "b", "c"], "dimensions": 384.0 }'
    second = b'{"custom_id":"r-2","method":"POST","url":"/v1/embeddings","body":' + body + b"}"
    data = request("r-1") + b"\n\n" + second + b"\r\n"
    lines, errors = read(data)
    assert errors == []
    assert lines == [
        Line(1, "r-1", msgspec.json.encode({"model": "m", "input": [SECRET]}), 1),
        Line(3, "r-2", body, 3),
    ]


def test_a_good_lines_span_reads_it_back_exactly() -> None:
    """What the executor keeps per line (its span) is enough to have the line again."""
    data = b"\xef\xbb\xbf" + request("r-1") + b"\n[]\n\n" + request("r-2") + b"\r\n"
    lines, _ = read(data)
    for line in lines:
        again = reread(line.number, data[line.start : line.end], line.texts, line.start)
        assert again == line and (again.body, again.start, again.end) == (
            line.body,
            line.start,
            line.end,
        )
    assert [line.start for line in lines] == [3, data.index(b"\n\n") + 2]


@pytest.mark.parametrize(
    ("line", "code", "param", "message"),
    [
        (b"[]", "invalid_json_line", None, "the line is not a JSON object"),
        (b'{"custom_id": "a", "input": 1}', "invalid_request", "input", "unknown key 'input'"),
        (request(...), "invalid_custom_id", "custom_id", "custom_id is missing"),
        (request(7), "invalid_custom_id", "custom_id", "(got a number)"),
        (request(None), "invalid_custom_id", "custom_id", "(got null)"),
        (request(""), "invalid_custom_id", "custom_id", "custom_id is empty"),
        (request("x" * 513), "invalid_custom_id", "custom_id", "513 characters; the limit is 512"),
        (request(method="GET"), "invalid_method", "method", "got 'GET'"),
        (request(method=...), "invalid_method", "method", "got missing"),
        (request(method=["POST"]), "invalid_method", "method", "got an array"),
        (
            request(url="/v1/chat/completions"),
            "invalid_url",
            "url",
            "url '/v1/chat/completions' is not this batch's endpoint '/v1/embeddings'",
        ),
        (request(url=...), "invalid_url", "url", "got missing"),
        (request(url={"path": "x"}), "invalid_url", "url", "got an object"),
        (request(body=...), "invalid_body", "body", "body must be a JSON object (got missing)"),
        (request(body=[SECRET]), "invalid_body", "body", "(got an array)"),
        (request(body={"model": "m", "input": []}), "invalid_body", "body", "`input` must not"),
        (request(body={"input": SECRET}), "invalid_body", "body", "missing required field"),
    ],
)
def test_each_bad_line_is_one_error_with_its_code_and_param(
    line: bytes, code: str, param: str | None, message: str
) -> None:
    error = only_error(b"\n" + line)
    assert (error.line, error.code, error.param) == (2, code, param)
    assert message in error.message


def test_a_custom_id_of_exactly_512_characters_is_fine() -> None:
    lines, errors = read(request("é" * 512))
    assert errors == [] and lines[0].custom_id == "é" * 512


def test_checks_run_in_order_so_the_first_problem_is_the_one_reported() -> None:
    line = request(7, method="GET", url="/v1/rerank", body=[], extra=1)
    assert only_error(line).code == "invalid_request"
    assert only_error(request(7, method="GET", url="/v1/rerank", body=[])).code == (
        "invalid_custom_id"
    )
    assert only_error(request(method="GET", url="/v1/rerank", body=[])).code == "invalid_method"
    assert only_error(request(url="/v1/rerank", body=[])).code == "invalid_url"


def test_a_custom_id_used_again_is_a_duplicate_even_when_its_first_line_failed() -> None:
    data = b"\n".join(
        [request("a", method="GET"), request("b"), request("a"), request("b"), request("c")]
    )
    lines, errors = read(data)
    assert [line.number for line in lines] == [2, 5]
    assert [(e.line, e.code) for e in errors] == [
        (1, "invalid_method"),
        (3, "duplicate_custom_id"),
        (4, "duplicate_custom_id"),
    ]
    assert "already used by line 1" in errors[1].message
    assert "already used by line 2" in errors[2].message


def test_long_values_are_clipped_in_messages() -> None:
    url = "/v1/" + "x" * 300
    error = only_error(request(url=url))
    assert len(error.message) < 200
    assert "x" * 95 in error.message and "x" * 101 not in error.message


def test_a_line_that_is_not_utf8_is_an_invalid_json_line_and_the_rest_still_run() -> None:
    data = request("a") + b'\n{"custom_id": "\xff"}\n' + request("b")
    lines, errors = read(data)
    assert [line.custom_id for line in lines] == ["a", "b"]
    assert errors == [LineError(2, "invalid_json_line", "the line is not UTF-8")]


def test_a_body_the_endpoint_refuses_carries_the_endpoints_message() -> None:
    def parse_body(body: bytes) -> int:
        raise ValidationFailed("`input[0]` has 30000 characters; the limit is 20000")

    _, errors = read_lines(request(), EMBEDDINGS, parse_body, max_inputs=None)
    assert errors == [
        LineError(1, "invalid_body", "`input[0]` has 30000 characters; the limit is 20000", "body")
    ]


def test_a_parser_that_fails_with_anything_else_fails_that_line_alone() -> None:
    """A bug in a parser (or a hostile line that finds one) costs one line, not the file;
    the message names the failure's kind, never the line's content."""

    def parse_body(body: bytes) -> int:
        if SECRET.encode() in body:
            raise KeyError(SECRET)
        return 1

    data = b"\n".join([request("a"), request("b", body={"model": "m", "input": ["fine"]})])
    lines, errors = read_lines(data, EMBEDDINGS, parse_body, max_inputs=None)
    assert [line.custom_id for line in lines] == ["b"]
    assert [(e.line, e.code) for e in errors] == [(1, "unreadable_line")]
    assert "KeyError" in errors[0].message and "Jane" not in errors[0].message


@pytest.mark.parametrize("where", ["body", "line"])
def test_a_line_nested_too_deeply_for_the_decoder_is_a_line_error(where: str) -> None:
    """Arrays nested past the decoder's recursion limit, in a document's extra field (the
    attack that stopped every tenant's batches) or in an unknown key of the line itself:
    that line fails and the next one runs, whatever depth the reader is called at."""
    deep = b"[" * 5_000 + b"]" * 5_000
    body = b'{"query": "q", "documents": [{"text": "a", "x": %s}]}' % deep
    if where == "body":
        bad = b'{"custom_id": "deep", "method": "POST", "url": "/v1/rerank", "body": %s}' % body
    else:
        bad = b'{"custom_id": "deep", "extra": %s}' % deep
    good = b'{"custom_id": "ok", "method": "POST", "url": "/v1/rerank", "body": '
    good += b'{"query": "q", "documents": ["a"]}}'
    parse = body_parser("/v1/rerank", LimitsSettings())
    lines, errors = read_lines(bad + b"\n" + good, "/v1/rerank", parse, max_inputs=None)
    assert [line.custom_id for line in lines] == ["ok"]
    assert [e.line for e in errors] == [1] and "nested too deeply" in errors[0].message


def with_inputs(custom_id: str, count: int) -> bytes:
    return request(custom_id, body={"model": "m", "input": ["t"] * count})


def test_lines_past_the_input_limit_fail_and_those_that_still_fit_run() -> None:
    data = b"\n".join([with_inputs("a", 3), with_inputs("b", 3), with_inputs("c", 2)])
    lines, errors = read(data, max_inputs=5)
    assert [(line.custom_id, line.texts) for line in lines] == [("a", 3), ("c", 2)]
    assert [(e.line, e.code, e.param) for e in errors] == [(2, "too_many_inputs", "body")]
    assert "limit of 5 inputs" in errors[0].message
    assert len(read(data, max_inputs=8)[0]) == 3
    assert len(read(data, max_inputs=None)[0]) == 3


def test_no_message_quotes_input_text() -> None:
    bad_lines = [
        f'{{"custom_id": "a", "body": {{"input": "{SECRET}"'.encode(),
        f'["{SECRET}"]'.encode(),
        request(body=SECRET),
        request(body={"model": "m", "input": SECRET, "extra": SECRET}),
        request(body={"model": 1, "input": [SECRET]}),
        request(body={"model": "m", "input": [SECRET, 7]}),
        request(body={"model": "m", "input": [SECRET * 2000]}),
    ]
    _, errors = read(b"\n".join(bad_lines))
    assert len(errors) == len(bad_lines)
    for error in errors:
        assert "Jane" not in error.message


good_or_bad = st.sampled_from(
    [
        "good",
        "blank",
        "not json",
        "array",
        "no id",
        "repeat id",
        "bad method",
        "bad url",
        "bad body",
        "not utf8",
    ]
)


@given(st.lists(good_or_bad, max_size=30))
def test_every_request_line_is_a_line_or_an_error_never_both(kinds: list[str]) -> None:
    made = {
        "good": lambda n: request(f"id-{n}"),
        "blank": lambda n: b" \t\r",
        "not json": lambda n: b"{nope",
        "array": lambda n: b"[{}]",
        "no id": lambda n: request(...),
        "repeat id": lambda n: request("shared"),
        "bad method": lambda n: request(f"id-{n}", method="PUT"),
        "bad url": lambda n: request(f"id-{n}", url="/v1/rerank"),
        "bad body": lambda n: request(f"id-{n}", body=1),
        "not utf8": lambda n: b'{"custom_id": "\xc3"}',
    }
    data = b"\n".join(made[kind](n) for n, kind in enumerate(kinds))
    lines, errors = read(data)
    ran = [line.number for line in lines]
    failed = [error.line for error in errors]
    expected = [n + 1 for n, kind in enumerate(kinds) if kind != "blank"]
    assert sorted(ran + failed) == expected
    assert not set(ran) & set(failed)
    repeats = [n + 1 for n, kind in enumerate(kinds) if kind == "repeat id"]
    good = [n + 1 for n, kind in enumerate(kinds) if kind == "good"]
    assert ran == sorted(good + repeats[:1])  # the first use of "shared" runs, no other
    assert [e.line for e in errors if e.code == "duplicate_custom_id"] == repeats[1:]


# UploadCheck: the same check, a chunk at a time, with the executor's reading of each line


def checked_in_pieces(data: bytes, cuts: list[int], **options: Any) -> int:
    check = UploadCheck(max_lines=options.pop("max_lines", 100), **options)
    edges = [0, *sorted(cut for cut in cuts if cut <= len(data)), len(data)]
    for start, end in pairwise(edges):
        check.feed(data[start:end])
    return check.finish()


def outcome(call: Callable[[], int]) -> int | str:
    try:
        return call()
    except InvalidRequest as exc:
        return exc.message


@given(
    st.lists(
        st.sampled_from([request("a"), b"", b"  \r", b"[1]", b'{"x": "\xff"}', b"\xef\xbb\xbf{}"]),
        max_size=8,
    ),
    st.lists(st.integers(min_value=0, max_value=600), max_size=10),
)
def test_a_file_checked_in_any_pieces_gets_the_answer_it_gets_whole(
    lines: list[bytes], cuts: list[int]
) -> None:
    data = b"\xef\xbb\xbf" + b"\n".join(lines)
    whole = outcome(lambda: check_upload(data, max_bytes=1 << 20, max_lines=100))
    pieces = outcome(lambda: checked_in_pieces(data, cuts, max_line_bytes=1 << 20))
    assert pieces == whole


def test_a_line_longer_than_a_request_line_may_be_is_refused_before_it_is_held() -> None:
    check = UploadCheck(max_lines=10, max_line_bytes=1000)
    check.feed(request("a") + b"\n")
    check.feed(b'{"custom_id": "b", "body": "' + b"x" * 900)
    with pytest.raises(InvalidRequest, match=r"^line 2 is longer than 1000 bytes"):
        check.feed(b"x" * 200)  # no newline yet: refused as it grows, not when it ends
    exactly = request("c", body={"model": "m", "input": ["y" * 100]})
    assert checked_in_pieces(exactly, [5], max_line_bytes=len(exactly)) == 1


def nested(depth: int) -> bytes:
    return b"[" * (depth - 2) + b"]" * (depth - 2)  # inside the line's object and its body


@pytest.mark.parametrize("depth", [65, 200, 990, 5000])
def test_a_line_nested_past_the_limit_is_refused_by_number_whatever_the_stack(depth: int) -> None:
    line = request(body={"model": "m", "input": [SECRET], "user": msgspec.Raw(nested(depth))})
    with pytest.raises(InvalidRequest) as caught:
        check_upload(request("a") + b"\n" + line, max_bytes=1 << 20, max_lines=10)
    assert caught.value.message.startswith(f"line 2 nests JSON more than {MAX_DEPTH} levels")
    assert "Jane" not in caught.value.message


def test_a_line_at_the_depth_limit_passes() -> None:
    deep = b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {"x": '
    deep += b"[" * (MAX_DEPTH - 2) + b"]" * (MAX_DEPTH - 2) + b"}}"
    assert check_upload(deep, max_bytes=1 << 20, max_lines=10) == 1
    with pytest.raises(InvalidRequest, match="nests JSON"):
        check_upload(
            deep.replace(b"[", b"[[", 1).replace(b"]", b"]]", 1), max_bytes=9999, max_lines=9
        )


def json_values(max_leaves: int = 30) -> st.SearchStrategy[object]:
    text = st.text(st.sampled_from('ab[]{}"\\ '), max_size=6)
    return st.recursive(
        st.none() | st.integers() | text,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
        max_leaves=max_leaves,
    )


def depth_of(value: object) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


@given(json_values(), st.integers(min_value=0, max_value=8))
def test_nesting_is_measured_exactly_with_brackets_in_strings(value: object, most: int) -> None:
    encoded = msgspec.json.encode(value)
    assert _nests_deeper(encoded, most) == (depth_of(value) > most)


def test_a_line_the_executors_reading_fails_on_is_refused_with_its_number() -> None:
    def crashing(body: bytes) -> int:
        raise RecursionError("maximum recursion depth exceeded while deserializing an object")

    def broken(body: bytes) -> int:
        raise KeyError("oops")

    for parser, why in ((crashing, "it nests too deeply"), (broken, "failed with KeyError")):
        with pytest.raises(InvalidRequest) as caught:
            check_upload(
                request("a") + b"\n" + request("b"),
                max_bytes=1 << 20,
                max_lines=10,
                parsers={EMBEDDINGS: parser}.get,
            )
        assert caught.value.message.startswith("line 1 cannot be read as a batch request")
        assert why in caught.value.message and "Jane" not in caught.value.message


def test_each_line_meets_the_parser_of_its_own_url_and_a_per_line_error_passes() -> None:
    seen: list[str] = []

    def parsers(url: str) -> Callable[[bytes], int] | None:
        seen.append(url)
        return embeddings_texts if url == EMBEDDINGS else None

    data = b"\n".join(
        [
            request("a"),
            request("b", url="/v1/rerank"),
            request("c", url="/v1/chat/completions"),
            request("d", body={"model": "m", "input": []}),  # its endpoint refuses it
            request(...),  # no custom_id
            b"{}",
        ]
    )
    assert check_upload(data, max_bytes=1 << 20, max_lines=10, parsers=parsers) == 6
    assert seen == [EMBEDDINGS, "/v1/rerank", "/v1/chat/completions", EMBEDDINGS, EMBEDDINGS]


def test_the_rerank_attack_line_is_refused_at_upload() -> None:
    """The issue's line: a rerank document with an extra field nested ~990 deep, which
    passed the old upload check and raised RecursionError in the executor's parser."""
    body = b'{"query": "q", "documents": [{"text": "' + SECRET.encode() + b'", "x": '
    body += b"[" * 990 + b"]" * 990 + b"}]}"
    line = b'{"custom_id": "a", "method": "POST", "url": "/v1/rerank", "body": ' + body + b"}"
    with pytest.raises(InvalidRequest, match=r"^line 1 nests JSON") as caught:
        check_line(1, line)
    assert "Jane" not in caught.value.message


# Whatever a tenant uploads


PARSERS = {
    endpoint: body_parser(endpoint, LimitsSettings())
    for endpoint in ("/v1/embeddings", "/v1/rerank")
}
hostile_files = st.lists(hostile.jsonl_lines(), min_size=1, max_size=6).map(b"\n".join)


@settings(hostile.FIXED, max_examples=30)
@given(hostile_files)
def test_any_upload_is_its_line_count_or_a_client_error_naming_a_line(data: bytes) -> None:
    counted = hostile.value_or_client_error(
        lambda: check_upload(data, max_bytes=1 << 20, max_lines=100, parsers=PARSERS.get)
    )
    if isinstance(counted, int):
        assert 1 <= counted <= data.count(b"\n") + 1


@settings(hostile.FIXED, max_examples=30)
@given(hostile_files, st.sampled_from(sorted(PARSERS)))
def test_any_file_reads_as_lines_and_line_errors_and_never_raises(
    data: bytes, endpoint: str
) -> None:
    lines, errors = read_lines(data, endpoint, PARSERS[endpoint], max_inputs=None)
    numbers = [line.number for line in lines] + [error.line for error in errors]
    assert len(numbers) == len(set(numbers))
    assert set(numbers) <= set(range(1, data.count(b"\n") + 2))
