"""The proxy's listening ports by node id: the bootstrap (None) and one per broker, bound or
not, with their ports.

Broker N is always served at broker_port_base + N, so the addresses clients cache stay valid
across proxy restarts. A broker's listener opens the moment the proxy first rewrites an
address for that node, before the response naming it reaches the client, so a client never
learns an address that is not accepting connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from proxy.network.listener import Admit, Listener
from proxy.runtime.context import ProxyContext

log = logging.getLogger(__name__)


class Endpoints:
    def __init__(
        self,
        context: ProxyContext,
        admit: Admit,
        wait_for_slot: Callable[[], Awaitable[None]],
    ) -> None:
        self._context = context
        self._admit = admit
        self._wait_for_slot = wait_for_slot
        self.listeners: dict[int | None, Listener] = {}
        #: broker listeners that could not be bound: node id -> why (readiness)
        self.unbound: dict[int, str] = {}
        self._closing = False
        context.brokers.on_named = self._broker_named

    @property
    def bootstrap_port(self) -> int:
        listener = self.listeners.get(None)
        return listener.port if listener is not None else self._context.settings.bootstrap_port

    def listen(self, node_id: int | None, port: int) -> Listener:
        listener = Listener(
            "bootstrap" if node_id is None else f"broker-{node_id}",
            port,
            lambda: self._context.brokers.targets(node_id),
            self._admit,
            self._wait_for_slot,
            self._context,
        )
        listener.open()
        self.listeners[node_id] = listener
        return listener

    def not_listening(self) -> str | None:
        """Why the instance does not serve every port it should (readiness), or None."""
        bootstrap = self.listeners.get(None)
        if bootstrap is None:
            return "not listening yet"
        if not bootstrap.serving:
            return "closed: no upstream address answers"
        return "; ".join(self.unbound.values()) or None

    async def close(self) -> None:
        """Every port closed; a broker named from now on opens none."""
        self._closing = True
        await asyncio.gather(*(listener.close() for listener in self.listeners.values()))

    def _broker_named(self, node_id: int, host: str, port: int) -> None:
        """Open the listener of a broker a response names, before the client learns it."""
        context = self._context
        if node_id in self.listeners or context.sni is not None or self._closing:
            return
        proxy_port = context.brokers.port(node_id)
        if proxy_port >= 1 << 16:  # a node id past what broker_port_base leaves
            self.unbound[node_id] = (
                f"broker {node_id}'s port {proxy_port} is not a TCP port: lower [proxy] "
                'broker_port_base, or route by name (routing = "sni")'
            )
            log.error("cannot open the listener for %s", self.unbound[node_id])
            return
        try:
            self.listen(node_id, proxy_port)
        except OSError as exc:
            self.unbound[node_id] = f"broker {node_id}'s port {proxy_port} cannot be bound: {exc}"
            log.error(
                "cannot open the listener for broker %d on port %d: %s", node_id, proxy_port, exc
            )
        else:
            self.unbound.pop(node_id, None)
            log.info(
                "broker %d (%s:%d) served at %s:%d",
                node_id,
                host,
                port,
                context.settings.advertised,
                proxy_port,
            )
