"""multipart/form-data: the bytes real clients send, hand-made edge cases, round trips."""

from __future__ import annotations

from itertools import pairwise

import aiohttp
import httpx
import pytest
import urllib3
from hypothesis import assume, given
from hypothesis import strategies as st

from headway.errors import HeadwayError, InvalidRequest, UnsupportedMediaType
from headway.http.multipart import (
    FormPart,
    FormReader,
    PartData,
    PartEnd,
    PartStart,
    parse_form,
)
from tests import hostile

JSONL = b'{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {}}\n'
B = "xYz-123"
CT = f"multipart/form-data; boundary={B}"


def body_of(*parts: bytes, boundary: str = B) -> bytes:
    """Parts (headers, blank line, data) between boundary lines, CRLF throughout."""
    out = b"".join(b"--" + boundary.encode() + b"\r\n" + part + b"\r\n" for part in parts)
    return out + b"--" + boundary.encode() + b"--\r\n"


def field(name: str, value: bytes, extra: str = "") -> bytes:
    return f'Content-Disposition: form-data; name="{name}"{extra}\r\n\r\n'.encode() + value


def as_dict(parts: dict[str, FormPart]) -> dict[str, tuple[str | None, str | None, bytes]]:
    return {
        name: (part.filename, part.content_type, bytes(part.data)) for name, part in parts.items()
    }


# What real clients send


def test_the_exact_bytes_the_openai_sdk_sends_through_httpx() -> None:
    # openai-python's files.create(file=..., purpose="batch", expires_after={...}) sends the
    # file under "file" and the rest as form fields, nested keys in brackets.
    request = httpx.Request(
        "POST",
        "http://gateway/v1/files",
        files=[("file", ("batch input.jsonl", JSONL))],
        data={
            "purpose": "batch",
            "expires_after[anchor]": "created_at",
            "expires_after[seconds]": 3600,
        },
    )
    parts = parse_form(request.headers["content-type"], request.read())
    assert list(parts) == ["purpose", "expires_after[anchor]", "expires_after[seconds]", "file"]
    assert as_dict(parts) == {
        "purpose": (None, None, b"batch"),
        "expires_after[anchor]": (None, None, b"created_at"),
        "expires_after[seconds]": (None, None, b"3600"),
        "file": ("batch input.jsonl", "application/octet-stream", JSONL),
    }
    assert parts["purpose"].text() == "batch"


def test_httpx_bytes_without_a_filename_and_with_escaped_quotes_and_backslashes() -> None:
    request = httpx.Request("POST", "http://x/", files={"file": b"raw"})
    assert as_dict(parse_form(request.headers["content-type"], request.read())) == {
        "file": ("upload", "application/octet-stream", b"raw")
    }
    # httpx writes `"` as %22 (HTML5) and `\` as `\\` (a quoted-pair).
    request = httpx.Request("POST", "http://x/", files={"file": ('a"b\\c.jsonl', b"x", "text/x")})
    part = parse_form(request.headers["content-type"], request.read())["file"]
    assert (part.filename, part.content_type) == ("a%22b\\c.jsonl", "text/x")


async def test_bytes_from_aiohttp_form_data_including_an_rfc5987_name() -> None:
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("naïve[名]", "v")  # aiohttp sends this as name*=utf-8''…
    form.add_field("file", JSONL, filename="in.jsonl", content_type="application/jsonl")
    writer = form()
    parts = parse_form(writer.content_type, await writer.as_bytes())
    assert as_dict(parts) == {
        "purpose": (None, "text/plain; charset=utf-8", b"batch"),
        "naïve[名]": (None, "text/plain; charset=utf-8", b"v"),
        "file": ("in.jsonl", "application/jsonl", JSONL),
    }


def test_bytes_from_the_encoder_requests_uses() -> None:
    body, content_type = urllib3.encode_multipart_formdata(
        [("purpose", "batch"), ("file", ("données.jsonl", JSONL, "application/jsonl"))]
    )
    assert as_dict(parse_form(content_type, body)) == {
        "purpose": (None, None, b"batch"),
        "file": ("données.jsonl", "application/jsonl", JSONL),
    }


def test_curl_style_bytes_with_a_webkit_boundary() -> None:
    boundary = "------------------------d74496d66958873e"
    body = (
        (
            f"--{boundary}\r\n"
            'Content-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f"--{boundary}\r\n"
            'Content-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + JSONL
        + f"\r\n--{boundary}--\r\n".encode()
    )
    parts = parse_form(f"multipart/form-data; boundary={boundary}", body)
    assert bytes(parts["file"].data) == JSONL and parts["file"].filename == "in.jsonl"


# The grammar's corners


def read_in_pieces(content_type: str, body: bytes, cuts: list[int]) -> dict[str, FormPart]:
    """``FormReader`` fed ``body`` cut at ``cuts``: the parts it hands on, put together."""
    reader = FormReader(content_type, max_parts=16)
    parts: dict[str, FormPart] = {}
    current: PartStart | None = None
    data = b""
    edges = [0, *sorted(cuts), len(body)]
    for start, end in pairwise(edges):
        for event in reader.feed(body[start:end]):
            if isinstance(event, PartStart):
                current, data = event, b""
            elif isinstance(event, PartData):
                data += event.data
            else:
                assert current is not None
                parts[current.name] = FormPart(
                    current.name, current.filename, current.content_type, data
                )
    reader.close()
    return parts


@given(st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_a_body_fed_in_any_pieces_reads_as_the_whole_body(cuts: list[int]) -> None:
    tricky = b"\r\n--\r\n--" + B.encode() + b"x\r\n--" + B.encode() + b"-\r\n\r\n"
    body = (
        b"preamble\r\n--"
        + B.encode()
        + b" \r\n"
        + field("purpose", b"batch")
        + b"\r\n--"
        + B.encode()
        + b"\r\n"
        + field("file", tricky + JSONL, '; filename="in.jsonl"')
        + b"\r\n--"
        + B.encode()
        + b"--\r\nepilogue"
    )
    cuts = [cut for cut in cuts if cut <= len(body)]
    assert as_dict(read_in_pieces(CT, body, cuts)) == as_dict(parse_form(CT, body))
    assert as_dict(parse_form(CT, body))["file"] == ("in.jsonl", None, tricky + JSONL)


def test_a_parts_data_is_handed_on_as_it_comes_not_held() -> None:
    reader = FormReader(CT)
    head = reader.feed(f"--{B}\r\n".encode() + field("file", b"", '; filename="a.jsonl"'))
    assert head == [PartStart("file", "a.jsonl", None)]
    handed_on = 0
    for fed in range(1, 1001):
        events = reader.feed(b"x" * 4096)
        assert all(isinstance(event, PartData) for event in events)
        handed_on += sum(len(event.data) for event in events if isinstance(event, PartData))
        # Only what might begin the next delimiter (CRLF, "--", the boundary) waits.
        assert fed * 4096 - handed_on == len(B) + 3
    assert reader.feed(f"\r\n--{B}--\r\n".encode())[-1] == PartEnd()
    reader.close()


def test_a_malformed_body_is_refused_as_soon_as_its_bytes_show_it() -> None:
    reader = FormReader(CT)
    with pytest.raises(InvalidRequest, match="bare LF"):
        reader.feed(f"--{B}\n".encode())  # nothing after it needs to arrive
    with pytest.raises(UnsupportedMediaType):
        FormReader("application/json")  # before any byte of the body


def test_quoted_and_unquoted_boundaries_names_and_filenames() -> None:
    body = body_of(
        b"Content-Disposition: form-data; name=purpose\r\n\r\nbatch",
        b'Content-Disposition: form-data; name="file"; filename=in.jsonl\r\n\r\nx',
        boundary="a b:c",
    )
    parts = parse_form('multipart/form-data; charset=utf-8; boundary="a b:c"', body)
    assert as_dict(parts) == {"purpose": (None, None, b"batch"), "file": ("in.jsonl", None, b"x")}


def test_header_names_types_and_parameter_names_are_case_insensitive() -> None:
    body = body_of(
        b'CONTENT-DISPOSITION: Form-Data; NAME="file"; FileName="x.jsonl"\r\n'
        b"content-TYPE: application/jsonl\r\n\r\ndata"
    )
    parts = parse_form(f"Multipart/Form-Data;BOUNDARY={B}", body)
    assert as_dict(parts) == {"file": ("x.jsonl", "application/jsonl", b"data")}


def test_an_rfc5987_filename_wins_over_the_plain_one() -> None:
    disposition = (
        'Content-Disposition: form-data; name=file; filename="EURO rates.jsonl";'
        " filename*=UTF-8''%e2%82%ac%20rates.jsonl\r\n\r\n"
    )
    part = parse_form(CT, body_of(disposition.encode() + b"x"))["file"]
    assert part.filename == "€ rates.jsonl"
    latin = "Content-Disposition: form-data; name=f; filename*=iso-8859-1'fr'caf%E9\r\n\r\n"
    assert parse_form(CT, body_of(latin.encode()))["f"].filename == "café"


def test_raw_utf8_in_headers_is_read_as_utf8() -> None:
    part = parse_form(CT, body_of(field("file", b"x", '; filename="rapport é.jsonl"')))["file"]
    assert part.filename == "rapport é.jsonl"


def test_quoted_pairs_in_a_quoted_parameter_are_undone() -> None:
    part = parse_form(CT, body_of(field("f", b"", '; filename="say \\"hi\\" \\\\o/"')))["f"]
    assert part.filename == 'say "hi" \\o/'


def test_data_may_hold_crlf_dashes_and_the_boundary_text_mid_line() -> None:
    tricky = b"\r\n--\r\n--" + B.encode() + b"x\r\n--" + B.encode() + b"-\r\n\r\n"
    body = body_of(field("file", tricky), field("purpose", b"batch"))
    assert as_dict(parse_form(CT, body))["file"] == (None, None, tricky)


def test_a_preamble_an_epilogue_and_blanks_after_a_boundary_are_ignored() -> None:
    body = (
        b"This is a preamble.\r\n--"
        + B.encode()
        + b" \t\r\n"
        + field("a", b"1")
        + b"\r\n--"
        + B.encode()
        + b"--\r\nepilogue\r\n"
    )
    assert as_dict(parse_form(CT, body)) == {"a": (None, None, b"1")}


def test_a_part_may_be_empty() -> None:
    assert as_dict(parse_form(CT, body_of(field("a", b"")))) == {"a": (None, None, b"")}


def test_a_field_that_is_not_utf8_is_refused_when_read_as_text() -> None:
    part = parse_form(CT, body_of(field("purpose", b"\xff")))["purpose"]
    with pytest.raises(InvalidRequest, match="'purpose' is not UTF-8"):
        part.text()


# Refusals


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "", "multipart/mixed; boundary=x", "text/plain; not a parameter"],
)
def test_another_content_type_is_415(content_type: str) -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        parse_form(content_type, body_of(field("a", b"1")))
    assert caught.value.status == 415
    assert "send multipart/form-data with fields purpose and file" in caught.value.message


@pytest.mark.parametrize(
    ("content_type", "body", "message"),
    [
        ("multipart/form-data", body_of(field("a", b"1")), "has no boundary parameter"),
        ('multipart/form-data; boundary=""', body_of(field("a", b"1")), "no boundary"),
        ("multipart/form-data; boundary=" + "b" * 71, b"", "1 to 70 ASCII characters"),
        ("multipart/form-data; boundary=x; boundary=y", b"", "gives boundary twice"),
        ("multipart/form-data; boundary=x y", b"", "parameters are malformed"),
        (CT, b"", "does not contain the boundary"),
        ("multipart/form-data; boundary=other", body_of(field("a", b"1")), "does not contain"),
        (CT, f"--{B}--\r\n".encode(), "has no parts"),
        (CT, body_of(field("a", b"1"))[:-4], "ends before its final boundary"),
        (CT, body_of(field("a", b"1"))[:-10], "ends before its final boundary"),
        (CT, f"--{B}\r\nContent-Disposition: form-data".encode(), "no blank line after"),
        (CT, f"--{B}".encode(), "ends inside a boundary line"),
        (CT, body_of(field("a", b"1")).replace(b"\r\n", b"\n"), "bare LF"),
        (CT, body_of(b"Content-Type: text/plain\r\n\r\n1"), "no Content-Disposition header"),
        (CT, body_of(b"\r\n1"), "no Content-Disposition header"),
        (CT, body_of(b"Content-Disposition: form-data\r\n\r\n1"), "part 1 of the form has no name"),
        (CT, body_of(field("", b"1")), "has no name"),
        (CT, body_of(b"Content-Disposition: attachment; name=a\r\n\r\n1"), "not form-data"),
        (CT, body_of(b"Content-Disposition form-data\r\n\r\n1"), "malformed header line"),
        (CT, body_of(field("a", b"1", "; name=b")), "gives name twice"),
        (CT, body_of(field("a", b"1", "; filename*=utf-8%E2")), "RFC 5987"),
        (CT, body_of(field("a", b"1", "; filename*=utf-8''%FF")), "is not utf-8"),
        (CT, body_of(field("a", b"1"), field("b", b"2"), field("a", b"3")), "'a' is given twice"),
        (
            CT,
            body_of(b"Content-Disposition: form-data; name=a\r\nContent-Disposition: x\r\n\r\n"),
            "two content-disposition headers",
        ),
        (CT, f"--{B}garbage\r\n".encode() + field("a", b"") + f"\r\n--{B}--".encode(), "after"),
    ],
)
def test_malformed_bodies_are_400_saying_what_is_wrong(
    content_type: str, body: bytes, message: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_form(content_type, body)
    assert caught.value.status == 400
    assert message in caught.value.message


def test_more_parts_than_allowed_are_refused_but_exactly_that_many_are_not() -> None:
    body = body_of(*(field(f"f{i}", b"x") for i in range(4)))
    assert len(parse_form(CT, body, max_parts=4)) == 4
    with pytest.raises(InvalidRequest, match="more than 3 parts"):
        parse_form(CT, body, max_parts=3)


# Round trips

names = st.text(
    st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters='"\\'),
    min_size=1,
    max_size=20,
)
fragments = st.sampled_from([b"\r\n", b"--", b"\r", b"\n", b"-", b"\r\n--", b'"', b"\x00"])
payloads = st.lists(st.binary(max_size=12) | fragments, max_size=20).map(b"".join)


@given(st.dictionaries(names, payloads, min_size=1, max_size=6))
def test_httpx_round_trip_of_files(fields: dict[str, bytes]) -> None:
    files = {name: ("f.bin", data) for name, data in fields.items()}
    request = httpx.Request("POST", "http://x/", files=files)
    parts = parse_form(request.headers["content-type"], request.read())
    assert {name: bytes(part.data) for name, part in parts.items()} == fields


@given(st.dictionaries(names, st.text(st.characters(blacklist_categories=("Cs",))), max_size=6))
def test_httpx_round_trip_of_text_fields(fields: dict[str, str]) -> None:
    assume("file" not in fields)
    # With a file, httpx sends the fields as multipart too (each as UTF-8).
    request = httpx.Request("POST", "http://x/", data=fields, files={"file": b""})
    parts = parse_form(request.headers["content-type"], request.read())
    assert bytes(parts.pop("file").data) == b""
    assert {name: part.text() for name, part in parts.items()} == fields


def quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


printable = st.text(st.characters(blacklist_categories=("Cc", "Cs")))


@given(
    st.dictionaries(
        printable.filter(bool),
        st.tuples(payloads, st.none() | printable),
        min_size=1,
        max_size=8,
    ),
    st.text(st.sampled_from("abcXYZ019'()+_,-./:=? "), max_size=68).map(lambda s: s + "z"),
)
def test_round_trip_with_quoted_pairs_and_near_miss_boundaries(
    fields: dict[str, tuple[bytes, str | None]], boundary: str
) -> None:
    delimiter = b"\r\n--" + boundary.encode()
    assume(all(delimiter not in data for data, _ in fields.values()))
    # The boundary inside the data but not followed by "--" or CRLF, and a boundary cut short.
    sent = {
        name: (delimiter + b"x" + data + delimiter[:-1], filename)
        for name, (data, filename) in fields.items()
    }
    parts = []
    for name, (data, filename) in sent.items():
        disposition = f"Content-Disposition: form-data; name={quoted(name)}"
        if filename is not None:
            disposition += f"; filename={quoted(filename)}"
        parts.append(disposition.encode() + b"\r\n\r\n" + data)
    body = body_of(*parts, boundary=boundary)
    parsed = parse_form(f"multipart/form-data; boundary={quoted(boundary)}", body, max_parts=8)
    assert {name: (bytes(p.data), p.filename) for name, p in parsed.items()} == sent


# Whatever a client sends


def outcome(content_type: str, body: bytes, cuts: list[int]) -> object:
    """The parts ``body`` read in the pieces ``cuts`` makes, or the client's error it gives
    (its class and message), or anything else raised (which fails the test)."""
    read = hostile.value_or_client_error(lambda: as_dict(read_in_pieces(content_type, body, cuts)))
    return (type(read), read.message) if isinstance(read, HeadwayError) else read


@hostile.FIXED
@given(
    st.one_of(hostile.multipart_forms(), st.tuples(hostile.header_values, st.binary())),
    st.lists(st.integers(min_value=0, max_value=2_000), max_size=8),
)
def test_any_body_in_any_pieces_reads_as_it_does_whole_or_is_refused_the_same(
    form: tuple[str, bytes], cuts: list[int]
) -> None:
    content_type, body = form
    cuts = [cut for cut in cuts if cut <= len(body)]
    assert outcome(content_type, body, cuts) == outcome(content_type, body, [])


@pytest.mark.parametrize(
    "disposition",
    [
        'name="fi\x00le"',
        'name="file"; filename="in\x00.jsonl"',
        "name=\"file\"; filename*=UTF-8''in%00",
    ],
)
def test_a_nul_in_a_name_or_filename_is_refused(disposition: str) -> None:
    part = f"Content-Disposition: form-data; {disposition}\r\n\r\n".encode() + JSONL
    with pytest.raises(InvalidRequest, match="NUL"):
        parse_form(CT, body_of(part))
