"""Admission alone, on a virtual clock with stand-in sockets: a client within its connection
quotas is served as itself, one over max.connections.per.ip is closed at once, one over its
connection_creation_rate is held unread until its throttle ends, and a closed connection
frees its slot."""

from __future__ import annotations

import socket
from typing import cast

from config.proxy import ProxySettings
from config.proxy_protocol import ProxyProtocolSettings
from localkafka.inprocess.harness import VirtualClock
from proxy.enforcement import Enforcement
from proxy.network.admission import Admission
from proxy.network.listener import Listener
from proxy.runtime.context import ProxyContext
from quotas.connections import ConnectionLimits
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig

MS = 1_000_000


class StandInSocket:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class StandInListener:
    name = "bootstrap"


def admission(
    limits: ConnectionLimits,
) -> tuple[Admission, ProxyContext, VirtualClock, list[tuple[str, int]]]:
    clock = VirtualClock()
    enforcement = Enforcement(QuotaEngine(QuotaConfig(QuotaSettings(), {})))
    context = ProxyContext(ProxySettings(), clock, enforcement)
    context.connection_quotas.update(limits, MetricConfig(samples=2, window_ms=1000))
    served: list[tuple[str, int]] = []

    def serve(listener: Listener, sock: socket.socket, client: tuple[str, int]) -> None:
        served.append(client)

    return Admission(context, ProxyProtocolSettings(), serve), context, clock, served


def accept(gate: Admission, ip: str, port: int) -> StandInSocket:
    sock = StandInSocket()
    gate.admit(cast(Listener, StandInListener()), cast(socket.socket, sock), (ip, str(port)))
    return sock


def test_a_client_over_max_connections_per_ip_is_closed_at_once() -> None:
    gate, context, _, served = admission(ConnectionLimits(max_connections_per_ip=1))
    first = accept(gate, "::ffff:10.0.0.1", 5000)  # named as the config names addresses
    second = accept(gate, "10.0.0.1", 5001)
    assert served == [("10.0.0.1", 5000)] and not first.closed and second.closed
    assert context.stats.connections_refused["bootstrap"] == 1
    gate.released("10.0.0.1")
    accept(gate, "10.0.0.1", 5002)
    assert served[-1] == ("10.0.0.1", 5002)


def test_a_client_over_its_creation_rate_is_held_until_its_throttle_ends() -> None:
    gate, context, clock, served = admission(
        ConnectionLimits(connection_creation_rate={"10.0.0.2": 1.0})
    )
    accept(gate, "10.0.0.2", 1)
    held = [accept(gate, "10.0.0.2", port) for port in (2, 3, 4)]
    assert served == [("10.0.0.2", 1)]
    assert context.stats.connections_throttled["bootstrap"] >= 1
    assert not any(sock.closed for sock in held)  # open, unread: the client waits
    clock.advance(3_000 * MS)
    assert all(sock.closed for sock in held)
