"""What every admin route reads before its store (``control/admin/access.py``): a numeric
path id (404 for anything else) and the query's parameters (422), whatever a client sent."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.control.admin.access import MAX_ID, path_id, query_values
from headway.errors import NotFound, ValidationFailed
from headway.http.asgi import Message, Request
from tests import hostile

AUDIT = frozenset({"actor", "action", "target", "since", "until", "limit", "before_id"})


async def _nothing() -> Message:
    raise AssertionError("no body is read")


def request(query: bytes = b"", **path: str) -> Request:
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": query, "headers": []}
    return Request(scope, {}, _nothing, path_params=path)


@hostile.FIXED
@given(hostile.client_values)
def test_any_path_id_is_a_whole_number_up_to_the_largest_id_or_a_404(value: str) -> None:
    found = hostile.value_or_client_error(lambda: path_id(request(id=value)))
    if isinstance(found, NotFound):
        assert "ids are whole numbers" in found.message
    else:
        assert isinstance(found, int) and 0 <= found <= MAX_ID
        assert value.isascii() and value.isdigit()


def test_the_largest_id_is_one_and_one_more_is_none() -> None:
    assert path_id(request(id=str(MAX_ID))) == MAX_ID
    assert path_id(request(id="0" * 5_000 + "7")) == 7
    for value in (str(MAX_ID + 1), "9" * 5_000, "²", "٣", "-1", ""):
        with pytest.raises(NotFound):
            path_id(request(id=value))


query_strings = st.one_of(
    st.binary(max_size=60),
    hostile.some_of(
        st.tuples(st.sampled_from(sorted(AUDIT)) | hostile.texts, hostile.client_values)
    ).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs).encode("utf-8", "replace")),
)


@settings(hostile.FIXED, max_examples=50)
@given(query_strings)
def test_any_query_string_is_one_value_a_parameter_or_a_422(raw: bytes) -> None:
    values = hostile.value_or_client_error(lambda: query_values(request(raw), AUDIT))
    assert isinstance(values, ValidationFailed) or set(values) <= AUDIT
