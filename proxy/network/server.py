"""The proxy's server: it accepts, serves, closes and drains client connections.

Who is admitted, as whom and towards which upstream is proxy/network/admission.py's; which
ports listen is proxy/network/endpoints.py's; the cluster's brokers, asked up front, are
proxy/control/broker_discovery.py's; proxy/network/listener.py closes a listener while its
upstream is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

from config.proxy_protocol import ProxyProtocolSettings
from protocol.errors import ProtocolError
from proxy.control.broker_discovery import BrokerDiscovery
from proxy.network.admission import Admission, Targets, refuse_name
from proxy.network.connection import ClientConnection
from proxy.network.endpoints import Endpoints
from proxy.network.listener import Listener
from proxy.runtime.context import ProxyContext
from proxy.runtime.sni import UnknownName

log = logging.getLogger(__name__)
#: the idle sweep looks at every connection: not more often than this, however short
#: connections_max_idle_ms is
IDLE_SWEEP_MIN_S = 0.05


class ProxyServer:
    def __init__(
        self, context: ProxyContext, proxy_protocol: ProxyProtocolSettings | None = None
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.admission = Admission(context, proxy_protocol or ProxyProtocolSettings(), self._serve)
        self.endpoints = Endpoints(context, self.admission.admit, self.admission.wait_for_slot)
        self.discovery = BrokerDiscovery(context)
        self.connections: set[ClientConnection] = set()
        self._all_closed = asyncio.Event()
        self._idle_check: asyncio.Task[None] | None = None
        #: accepted sockets being handed to their connections (made once the TLS handshake
        #: starts, and told of it once it is done)
        self._serving: dict[asyncio.Task[None], list[ClientConnection]] = {}

    @property
    def bootstrap_address(self) -> str:
        sni = self.context.sni
        if sni is not None:
            return f"{sni.bootstrap_host}:{sni.advertised_port}"
        return f"{self.settings.advertised}:{self.endpoints.bootstrap_port}"

    async def start(self) -> None:
        self.endpoints.listen(None, self.settings.bootstrap_port)
        if self.settings.connections_max_idle_ms > 0:
            self._idle_check = asyncio.get_running_loop().create_task(self._close_idle())
        await self.discovery.start()
        log.info(
            "proxy serving bootstrap at %s for %s",
            self.bootstrap_address,
            ",".join(self.settings.upstream_bootstrap_servers),
        )

    async def stop(self, drain_timeout_s: float = 0.0) -> None:
        """Stop accepting; let requests already sent upstream be answered for up to
        `drain_timeout_s` (each connection closes once its last one is), then close."""
        if self._idle_check is not None:
            self._idle_check.cancel()
        self.discovery.stop()
        await self.endpoints.close()
        await self.admission.close()
        # a client still in its TLS handshake has sent no request: nothing to drain
        handshaking = [
            task for task, made in self._serving.items() if not made or made[0].core is None
        ]
        for task in handshaking:
            task.cancel()
        await asyncio.gather(*handshaking, return_exceptions=True)
        for connection in list(self.connections):
            connection.drain()
        if self.connections and drain_timeout_s > 0:
            try:
                await asyncio.wait_for(self._all_closed.wait(), drain_timeout_s)
            except TimeoutError:
                log.warning(
                    "drain timed out after %gs: closing %d connections with requests unanswered",
                    drain_timeout_s,
                    len(self.connections),
                )
        for connection in list(self.connections):
            connection.abort()
        if self.connections:  # their transports report the close from the event loop
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_closed.wait(), 1.0)
        self.endpoints.listeners.clear()

    def _serve(self, listener: Listener, sock: socket.socket, client: tuple[str, int]) -> None:
        """An admitted socket served in a task of its own, which closing the listener does
        not cancel."""
        made: list[ClientConnection] = []
        task = asyncio.get_running_loop().create_task(self._hand_over(listener, sock, client, made))
        self._serving[task] = made
        task.add_done_callback(self._serving.pop)

    async def _hand_over(
        self,
        listener: Listener,
        sock: socket.socket,
        client: tuple[str, int],
        made: list[ClientConnection],
    ) -> None:
        """Hand an accepted socket to its connection, made into `made` (with TLS, before the
        handshake, while the connection itself hears of it only after); with SNI routing,
        to the upstream its ClientHello names."""
        ip = client[0]
        tls = self.context.listener_tls
        try:
            targets, unreachable = await self.admission.upstream(listener, sock, ip)
        except ProtocolError as exc:
            log.warning("closing client %s: %s", ip, exc)
            if isinstance(exc, UnknownName):
                refuse_name(sock)
            self._not_served(sock, made, ip)
            return
        except asyncio.CancelledError:  # the proxy stops
            self._not_served(sock, made, ip)
            raise

        def connection() -> ClientConnection:
            made.append(self._connection(client, targets, unreachable))
            return made[-1]

        try:
            # with TLS, returns once the handshake is done; connect_timeout_s bounds a client
            # that stalls it
            await asyncio.get_running_loop().connect_accepted_socket(
                connection,
                sock,
                ssl=tls,
                ssl_handshake_timeout=self.settings.connect_timeout_s if tls is not None else None,
            )
        except OSError as exc:  # the client left before it was served, or failed TLS
            if tls is not None:
                log.warning("closing client %s: TLS handshake failed: %r", ip, exc)
            else:
                log.debug("connection from %s lost at accept: %s", ip, exc)
            self._not_served(sock, made, ip)
        except asyncio.CancelledError:  # the proxy stops
            self._not_served(sock, made, ip)
            raise

    def _not_served(self, sock: socket.socket, made: list[ClientConnection], ip: str) -> None:
        """An accepted socket that never reached its connection: a TLS client's protocol is
        told of the connection only after the handshake, so its loss is counted here."""
        sock.close()
        if made:
            self._closed(made[0], ip)
        else:
            self.admission.released(ip)

    def _connection(
        self, client: tuple[str, int], targets: Targets, unreachable: Callable[[], None] | None
    ) -> ClientConnection:
        ip, port = client
        connection = ClientConnection(
            self.context, f"{ip}:{port}", targets, lambda lost: self._closed(lost, ip), unreachable
        )
        self.connections.add(connection)
        self._all_closed.clear()
        return connection

    def _closed(self, connection: ClientConnection, ip: str) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            self.admission.released(ip)
            if not self.connections:
                self._all_closed.set()

    async def _close_idle(self) -> None:
        """connections.max.idle.ms: a connection nothing was read from, on either side, for
        that long is closed (Kafka's Selector closes its idle channels the same way)."""
        idle_ns = self.settings.connections_max_idle_ms * 1_000_000
        # twice per idle time, at most once a second
        interval_s = max(min(1.0, idle_ns / 2e9), IDLE_SWEEP_MIN_S)
        while True:
            await asyncio.sleep(interval_s)
            now_ns = self.context.clock.now_ns()
            for connection in list(self.connections):
                core = connection.core
                if core is None or core.closed:
                    continue
                if core.activity != connection.seen_activity:
                    connection.seen_activity = core.activity
                    connection.seen_at_ns = now_ns
                elif now_ns - connection.seen_at_ns >= idle_ns:
                    self.context.stats.connections_idle_closed += 1
                    log.info(
                        "closing client %s: idle for connections.max.idle.ms (%d)",
                        core.channel.peer,
                        self.settings.connections_max_idle_ms,
                    )
                    core.close()
