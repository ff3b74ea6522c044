"""The test NATS server's first start survives a port taken between its pick and its bind
(the race of tests in parallel, each picking free ports), and keeps its ports afterwards."""

from __future__ import annotations

import socket

from headway_tools.testing.nats_server import NatsServer


def test_a_port_taken_before_the_first_start_is_picked_again() -> None:
    server = NatsServer()
    taken = server.monitor_port
    with socket.socket() as squatter:
        squatter.bind((server.host, taken))
        squatter.listen()
        with server:
            assert server.monitor_port != taken and server.running
            url, monitor = server.url, server.monitor_port
            server.stop()
            server.start()  # a restart keeps its ports: clients hold the URL
            assert (server.url, server.monitor_port) == (url, monitor)
