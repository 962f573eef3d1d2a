"""The endpoints alone, before any port is bound: a broker whose node id puts its port past
65535 is reported, not bound (the bind would raise OverflowError, not OSError, out of the
response that named the broker), and readiness says why the instance does not listen."""

from __future__ import annotations

import socket

from config.proxy import ProxySettings
from localkafka.inprocess.harness import VirtualClock
from proxy.enforcement import Enforcement
from proxy.network.endpoints import Endpoints
from proxy.network.listener import Listener
from proxy.runtime.context import ProxyContext
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig, QuotaSettings


def endpoints(settings: ProxySettings) -> tuple[Endpoints, ProxyContext]:
    enforcement = Enforcement(QuotaEngine(QuotaConfig(QuotaSettings(), {})))
    context = ProxyContext(settings, VirtualClock(), enforcement)

    def admit(listener: Listener, sock: socket.socket, address: tuple[str, ...]) -> None:
        raise AssertionError("nothing is accepted here")

    async def wait_for_slot() -> None:
        return None

    return Endpoints(context, admit, wait_for_slot), context


def test_a_node_id_past_the_port_range_is_unbound_with_the_way_out() -> None:
    ports, context = endpoints(ProxySettings(broker_port_base=9200))
    # the advertised address is the one the port rule gives; no listener is opened
    assert context.advertise(60_000, "kafka-60000", 9092)[1] == 69_200
    assert 60_000 not in ports.listeners
    assert "port 69200 is not a TCP port: lower [proxy] broker_port_base" in (ports.unbound[60_000])
    assert ports.not_listening() == "not listening yet"  # no bootstrap either


def test_the_bootstrap_port_is_the_configured_one_until_one_is_bound() -> None:
    ports, _ = endpoints(ProxySettings(bootstrap_port=19092))
    assert ports.bootstrap_port == 19092
