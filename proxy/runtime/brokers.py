"""The upstream brokers: where each one really is, and the proxy's address for it.

Broker N is always served at broker_port_base + N (or, with SNI routing, by its name on the
one port), so the addresses clients cache stay valid across proxy restarts. Every response
that names a broker passes its address here; the server opens the broker's listener the
moment it is first named, before the response reaches the client, so a client never learns
an address that is not accepting connections.
"""

from __future__ import annotations

from collections.abc import Callable

from config.proxy import ProxySettings
from proxy.runtime.sni import SniRoutes


class Brokers:
    def __init__(self, settings: ProxySettings, sni: SniRoutes | None = None) -> None:
        self._settings = settings
        #: with [proxy] routing = "sni", every broker is a name on the one port
        self.sni = sni
        #: node_id -> the broker's own (host, port), as the cluster last named it
        self.upstream: dict[int, tuple[str, int]] = {}
        #: told of every broker a response names (the server opens its listener)
        self.on_named: Callable[[int, str, int], None] = lambda node_id, host, port: None

    def port(self, node_id: int) -> int:
        return self._settings.broker_port_base + node_id

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Record where broker `node_id` really is and return the proxy's address for it."""
        self.upstream[node_id] = (host, port)
        self.on_named(node_id, host, port)
        if self.sni is not None:
            return self.sni.broker_host(node_id), self.sni.advertised_port
        return self._settings.advertised, self.port(node_id)

    def node_at(self, host: str, port: int) -> int | None:
        """The broker at this address, as the cluster last named it: where a connection's
        requests go, whichever listener took it (a bootstrap connection reaches a broker
        too); None for an address no response has named."""
        for node_id, address in self.upstream.items():
            if address == (host, port):
                return node_id
        return None

    def targets(self, node_id: int | None) -> list[tuple[str, int]]:
        """Where a listener's clients are connected: the cluster's bootstrap servers for the
        bootstrap listener, the broker itself for a broker's."""
        if node_id is None:
            return self._settings.upstream_addresses()
        address = self.upstream.get(node_id)
        return [address] if address is not None else []
