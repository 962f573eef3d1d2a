"""A broker whose node id puts its port past 65535 is reported, not bound: the bind would
raise OverflowError, not OSError, out of the response that named the broker."""

from __future__ import annotations

from config.proxy import ProxySettings
from proxy.enforcement import Enforcement
from proxy.network.server import ProxyServer
from proxy.runtime.context import ProxyContext
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig, QuotaSettings
from tests.support.harness import VirtualClock


def test_a_node_id_past_the_port_range_is_unbound_with_the_way_out() -> None:
    enforcement = Enforcement(QuotaEngine(QuotaConfig(QuotaSettings(), {})))
    context = ProxyContext(ProxySettings(broker_port_base=9200), VirtualClock(), enforcement)
    server = ProxyServer(context)
    # the advertised address is the one the port rule gives; no listener is opened
    assert context.advertise(60_000, "kafka-60000", 9092)[1] == 69_200
    assert 60_000 not in server.listeners
    assert "port 69200 is not a TCP port: lower [proxy] broker_port_base" in server.unbound[60_000]
