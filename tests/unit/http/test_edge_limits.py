"""The edge guard's pure parts: connection caps, the header-timeout answer, its settings
and its metrics."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from headway.http.client_address import (
    NO_PROXIES,
    TrustedProxies,
    client_address,
    request_scheme,
)
from headway.http.connection_caps import ConnectionCaps
from headway.http.connection_metrics import ConnectionMetrics
from headway.http.guard import on_header_timeout
from headway.http.request_limits import TAIL_BYTES, body_deadline, header_section_size
from headway.settings import EdgeLimits, SettingsError, load_settings


def test_a_client_over_its_cap_is_refused_while_others_are_admitted():
    caps = ConnectionCaps(max_connections=10, max_per_client=2)
    assert caps.admit("10.0.0.1") is None
    assert caps.admit("10.0.0.1") is None
    assert caps.admit("10.0.0.1") == "max_connections_per_client"
    assert caps.admit("10.0.0.2") is None
    assert (caps.open, caps.open_from("10.0.0.1"), caps.clients) == (3, 2, 2)


def test_the_process_cap_binds_whoever_asks_and_is_named_first():
    caps = ConnectionCaps(max_connections=3, max_per_client=2)
    for client in ("a", "a", "b"):
        assert caps.admit(client) is None
    assert caps.admit("c") == "max_connections"
    assert caps.admit("a") == "max_connections"  # over both: the process is the reason
    assert caps.open == 3


def test_a_refusal_counts_nothing_and_a_release_makes_room_again():
    caps = ConnectionCaps(max_connections=2, max_per_client=1)
    assert caps.admit("a") is None
    assert caps.admit("a") == "max_connections_per_client"
    assert caps.open == 1
    caps.release("a")
    assert (caps.open, caps.clients) == (0, 0)  # an address leaves the table at zero
    assert caps.admit("a") is None


def test_open_is_the_sum_over_clients_through_any_sequence():
    caps = ConnectionCaps(max_connections=5, max_per_client=3)
    held: list[str] = []
    for step, client in enumerate("abcabcaabbccab"):
        if step % 3 == 2 and held:
            caps.release(held.pop(0))
        elif caps.admit(client) is None:
            held.append(client)
        assert caps.open == len(held) == sum(caps.open_from(c) for c in "abc")
        assert caps.open <= 5 and all(caps.open_from(c) <= 3 for c in "abc")


def test_a_release_without_an_admit_is_an_error():
    caps = ConnectionCaps(max_connections=2, max_per_client=2)
    with pytest.raises(ValueError, match="without a matching admit"):
        caps.release("a")
    with pytest.raises(ValueError, match="at least 1"):
        ConnectionCaps(max_connections=0, max_per_client=1)


@pytest.mark.parametrize(
    ("begun", "in_flight", "answer"),
    [
        (False, False, "close"),  # connected and sent nothing
        (True, False, "answer_408"),  # half a request line or headers
        (True, True, "close_after_response"),  # late pipelined request behind a response
        (False, True, "close_after_response"),
    ],
)
def test_what_a_connection_with_late_headers_gets(begun, in_flight, answer):
    assert on_header_timeout(request_begun=begun, response_in_flight=in_flight) == answer


def test_edge_limits_defaults_and_environment(monkeypatch):
    settings = load_settings()
    assert settings.gateway.edge == EdgeLimits(
        header_timeout_s=10, idle_timeout_s=75, max_connections=10_000,
        max_connections_per_client=256,
    )  # fmt: skip
    # A worker's clients are a few gateways: its per-client cap is its process cap.
    assert settings.worker.edge.max_connections_per_client == 10_000
    monkeypatch.setenv("HEADWAY_GATEWAY__EDGE__HEADER_TIMEOUT_S", "1.5")
    monkeypatch.setenv("HEADWAY_WORKER__EDGE__MAX_CONNECTIONS", "500")
    settings = load_settings(flags={"gateway": {"edge": {"max_connections_per_client": 8}}})
    assert settings.gateway.edge.header_timeout_s == 1.5
    assert settings.gateway.edge.max_connections_per_client == 8
    assert settings.worker.edge.max_connections == 500


@pytest.mark.parametrize(
    "edge",
    [
        {"header_timeout_s": 0},
        {"idle_timeout_s": -1},
        {"max_connections": 0},
        {"max_connections_per_client": False},
        {"max_connection": 5},
    ],
)
def test_bad_edge_limits_are_refused(edge):
    with pytest.raises(SettingsError):
        load_settings(flags={"gateway": {"edge": edge}})


def test_metrics_count_refusals_and_timeouts_by_label_and_read_open_at_scrape():
    registry = CollectorRegistry()
    caps = ConnectionCaps(max_connections=4, max_per_client=4)
    metrics = ConnectionMetrics(registry, lambda: caps.open)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("headway_connections_refused_total", reason="max_connections") == 0
    assert value("headway_connections_timed_out_total", phase="idle") == 0
    metrics.refused("max_connections_per_client")
    metrics.timed_out("headers")
    metrics.timed_out("headers")
    caps.admit("a")
    caps.admit("b")
    assert value("headway_connections_refused_total", reason="max_connections_per_client") == 1
    assert value("headway_connections_refused_total", reason="max_connections") == 0
    assert value("headway_connections_timed_out_total", phase="headers") == 2
    assert value("headway_open_connections") == 2


# The measures of a request in flight (http/request_limits.py).


@given(
    headers=st.lists(
        st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\r", b"_")), max_size=8
    ),
    body=st.binary(max_size=200),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=12),
)
def test_the_header_section_is_measured_exactly_however_the_reads_split_it(headers, body, cuts):
    section = b"POST / HTTP/1.1\r\n" + b"".join(b"x: " + h + b"\r\n" for h in headers) + b"\r\n"
    stream = section + body
    reads, start = [], 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        if start < cut <= len(stream):
            reads.append(stream[start:cut])
            start = cut
    counted, tail = 0, b""
    for data in reads:
        size = header_section_size(counted, tail, data)
        if size is not None:
            assert size == len(section)
            return
        counted += len(data)
        tail = (tail + data)[-TAIL_BYTES:]
        assert counted < len(section)  # a read without the end is all header bytes
    raise AssertionError("the end of the headers was never found")


def test_a_body_has_its_allowance_plus_a_second_per_min_rate_bytes():
    assert body_deadline(100.0, 0, 20.0, 500.0) == 120.0
    assert body_deadline(100.0, 9, 20.0, 500.0) == 120.018  # 9 of 100 bytes, then a stall
    assert body_deadline(100.0, 150 << 20, 20.0, 500.0) > 100.0 + (150 << 20) / 500


# Who a request comes from (http/client_address.py).


def test_an_ipv6_client_is_counted_by_its_64_and_a_mapped_one_as_ipv4():
    assert client_address("2001:db8:1:2:aaaa::1") == client_address("2001:db8:1:2:bbbb::9")
    assert client_address("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert client_address("2001:db8:1:3::1") != client_address("2001:db8:1:2::1")
    assert client_address("::ffff:198.51.100.7") == "198.51.100.7"
    assert client_address("198.51.100.7") == "198.51.100.7"
    assert client_address(None) == client_address("") == "unknown"


def test_x_forwarded_for_is_believed_only_from_a_trusted_proxy():
    proxies = TrustedProxies(["10.0.0.0/8", "2001:db8:ff::/48"])
    spoofed = "6.6.6.6, 198.51.100.7"
    assert client_address("203.0.113.9", spoofed, proxies) == "203.0.113.9"  # not a proxy
    assert client_address("127.0.0.1", spoofed) == "127.0.0.1"  # none trusted by default
    # Behind the proxy: the rightmost entry it did not write itself.
    assert client_address("10.0.0.5", spoofed, proxies) == "198.51.100.7"
    assert client_address("10.0.0.5", "6.6.6.6, 198.51.100.7, 10.1.1.1", proxies) == (
        "198.51.100.7"
    )  # through two proxies
    assert client_address("10.0.0.5", "2001:db8:1:2::7", proxies) == "2001:db8:1:2::/64"
    assert client_address("2001:db8:ff::1", "198.51.100.7", proxies) == "198.51.100.7"
    assert client_address("10.0.0.5", "not-an-address", proxies) == "10.0.0.5"
    assert client_address("10.0.0.5", None, proxies) == "10.0.0.5"
    assert client_address("10.0.0.5", "10.2.2.2", proxies) == "10.2.2.2"  # proxies all along


def test_the_scheme_a_trusted_proxy_forwards_is_the_requests():
    proxies = TrustedProxies(["10.0.0.0/8"])
    forwarded = {"x-forwarded-proto": "https"}
    assert request_scheme({"scheme": "http", "client": ("10.0.0.5", 1)}, forwarded, proxies) == (
        "https"
    )
    assert request_scheme({"scheme": "http", "client": ("6.6.6.6", 1)}, forwarded, proxies) == (
        "http"
    )
    assert request_scheme({"scheme": "https", "client": ("6.6.6.6", 1)}, {}, NO_PROXIES) == (
        "https"
    )


def test_trusted_proxies_must_be_networks():
    assert EdgeLimits(trusted_proxies=("10.0.0.0/8", "::1")).trusted_proxies == (
        "10.0.0.0/8",
        "::1",
    )
    with pytest.raises(ValidationError, match="not an address or CIDR"):
        EdgeLimits(trusted_proxies=("10.0.0.0/33",))


def test_a_trusted_proxy_is_held_only_to_the_process_cap():
    caps = ConnectionCaps(max_connections=3, max_per_client=1)
    assert caps.admit("10.0.0.1", exempt=True) is None
    assert caps.admit("10.0.0.1", exempt=True) is None
    assert caps.admit("10.0.0.2") is None
    assert caps.admit("10.0.0.1", exempt=True) == "max_connections"
