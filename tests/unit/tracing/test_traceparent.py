"""W3C traceparent: what parses, what is ignored, and the round trip."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway.tracing.traceparent import TraceParent, format_traceparent, parse

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_the_spec_example_parses():
    assert parse(VALID) == TraceParent(
        0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, sampled=True
    )


def test_the_sampled_flag_is_bit_0_of_the_flags():
    assert parse(VALID[:-2] + "00").sampled is False  # type: ignore[union-attr]
    assert parse(VALID[:-2] + "03").sampled is True  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        VALID.upper(),  # hex must be lower case
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # trace id 0
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # span id 0
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
        VALID + "-extra",  # version 00 has exactly four fields
        VALID.replace("-", "_"),
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
    ],
)
def test_a_malformed_header_is_ignored(header):
    assert parse(header) is None


def test_a_later_version_is_read_by_its_first_four_fields():
    assert parse("01" + VALID[2:] + "-future") is not None


@given(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.booleans())
def test_format_and_parse_round_trip(trace_id, span_id, sampled):
    assert parse(format_traceparent(trace_id, span_id, sampled)) == (trace_id, span_id, sampled)
