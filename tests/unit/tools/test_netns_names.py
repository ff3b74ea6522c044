"""The names and addresses of a multi-host test network (``headway_tools.testing.netns``)."""

from __future__ import annotations

import ipaddress
import json

import pytest

from headway_tools.testing.netns import (
    IFNAMSIZ,
    Naming,
    NetnsError,
    check_host_name,
    choose_subnet,
    host_address,
    ipv4_networks,
    port_name,
    stale_namespaces,
)

net = ipaddress.IPv4Network


def test_names_carry_the_prefix_and_the_pid_of_the_run() -> None:
    naming = Naming("hwmh", 4242)
    assert naming.switch == "hwmh-4242-switch"
    assert naming.namespace("w1") == "hwmh-4242-w1"
    assert naming.owner("hwmh-4242-w1") == 4242
    assert naming.owner("hwmh-17-switch") == 17


@pytest.mark.parametrize(
    "other", ["hwmhx-1-w1", "hw-1-w1", "hwmh-w1", "hwmh-1-", "hwmh-1-W1", "netns-default", ""]
)
def test_a_name_of_another_prefix_or_shape_has_no_owner(other: str) -> None:
    assert Naming("hwmh", 1).owner(other) is None


def test_only_namespaces_of_dead_runs_and_this_pid_are_stale() -> None:
    naming = Naming("hwmh", 100)
    names = [
        "hwmh-100-gw",  # this pid, left from a run before (a reused pid)
        "hwmh-200-switch",  # a run still alive
        "hwmh-300-w1",  # a run gone
        "hwmh-300-switch",
        "other-300-w1",  # not ours
        "docker-ns",
    ]
    alive = {100, 200}.__contains__
    assert stale_namespaces(names, naming, alive) == [
        "hwmh-100-gw",
        "hwmh-300-w1",
        "hwmh-300-switch",
    ]


def test_a_host_name_fits_its_switch_port_in_an_interface_name() -> None:
    longest = "h" * (IFNAMSIZ - len("v-"))
    check_host_name(longest)
    assert port_name(longest) == "v-" + longest
    assert len(port_name(longest)) == IFNAMSIZ
    for bad in (longest + "x", "", "1w", "W1", "w-1", "w_1", "switch"):
        with pytest.raises(NetnsError):
            check_host_name(bad)


def test_a_prefix_is_short_and_plain() -> None:
    for bad in ("", "Hw", "hw-x", "h" * 17):
        with pytest.raises(NetnsError):
            Naming(bad, 1)


def test_the_subnet_is_the_first_free_24_of_10_203() -> None:
    assert choose_subnet([]) == net("10.203.1.0/24")
    used = [net("10.203.1.0/24"), net("10.203.2.7/32"), net("192.168.0.0/16")]
    assert choose_subnet(used) == net("10.203.3.0/24")


def test_a_wide_network_of_the_machine_rules_out_every_24_inside_it() -> None:
    assert choose_subnet([net("10.203.0.0/20")]) == net("10.203.16.0/24")
    with pytest.raises(NetnsError):
        choose_subnet([net("10.0.0.0/8")])


def test_hosts_are_numbered_from_one_within_the_subnet() -> None:
    subnet = net("10.203.9.0/24")
    assert [str(host_address(subnet, i)) for i in (0, 1, 253)] == [
        "10.203.9.1",
        "10.203.9.2",
        "10.203.9.254",
    ]
    for out_of_range in (-1, 254):
        with pytest.raises(NetnsError):
            host_address(subnet, out_of_range)


def test_the_networks_in_use_are_read_from_ip_json() -> None:
    links = [
        {"ifname": "lo", "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
        {
            "ifname": "eth0",
            "addr_info": [
                {"family": "inet", "local": "10.203.4.2", "prefixlen": 24},
                {"family": "inet6", "local": "fe80::1", "prefixlen": 64},
            ],
        },
        {"ifname": "eth1"},
    ]
    assert ipv4_networks(json.dumps(links)) == [net("127.0.0.0/8"), net("10.203.4.0/24")]
    assert ipv4_networks("") == []
