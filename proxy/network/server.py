"""The proxy's listeners: one bootstrap listener plus one per upstream broker.

Broker N is always served at broker_port_base + N, so the addresses clients cache stay valid
across proxy restarts. A broker listener opens the moment the proxy first rewrites an address
for that node, before the response naming it reaches the client, so a client never learns an
address that is not accepting connections.

Every accepted socket passes Kafka's connection quotas (quotas/connections.py) before it is
served, as the client it is: behind a load balancer, the one its PROXY protocol header names
([proxy_protocol]), read before anything else; proxy/network/listener.py closes a listener
while its upstream is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Sequence
from functools import partial

from config.proxy_protocol import HeaderMode, ProxyProtocolSettings
from protocol.apis import METADATA
from protocol.client_hello import MAX_HELLO, UNRECOGNIZED_NAME_ALERT
from protocol.errors import ProtocolError
from protocol.metadata import OWN_METADATA_VERSION, metadata_request_body, read_metadata_response
from protocol.proxy_header import ProxyHeaderError
from proxy.control.cluster import ClusterClient
from proxy.network.connection import ClientConnection
from proxy.network.listener import Listener
from proxy.network.peek import read_proxy_header, read_server_name
from proxy.runtime.context import ProxyContext
from proxy.runtime.sni import UnknownName
from quotas.connections import ConnectionVerdict, canonical_ip

log = logging.getLogger(__name__)
#: how often the brokers are asked again while their metadata could not be read
METADATA_RETRY_S = 1.0
#: the idle sweep looks at every connection: not more often than this, however short
#: connections_max_idle_ms is
IDLE_SWEEP_MIN_S = 0.05


def peer_ip(address: str) -> str:
    """A peer's address as the config names addresses (quotas.connections.canonical_ip),
    without the scope of a link-local IPv6 peer."""
    address = address.partition("%")[0]
    return canonical_ip(address) or address


class ProxyServer:
    def __init__(
        self, context: ProxyContext, proxy_protocol: ProxyProtocolSettings | None = None
    ) -> None:
        self.context = context
        self.settings = context.settings
        self._proxy_protocol = proxy_protocol or ProxyProtocolSettings()
        #: accepted sockets whose PROXY protocol header is being read
        self._headers: set[asyncio.Task[None]] = set()
        self.listeners: dict[int | None, Listener] = {}
        self.connections: set[ClientConnection] = set()
        #: connections over a connection_creation_rate, held until their throttle ends
        self._throttled: set[socket.socket] = set()
        self._slot_freed = asyncio.Event()
        self._all_closed = asyncio.Event()
        self._idle_check: asyncio.Task[None] | None = None
        self._discovering: asyncio.Task[None] | None = None
        #: why the cluster's brokers are not known yet (None once a response named them)
        self.metadata_problem: str | None = "not read yet"
        #: broker listeners that could not be bound: node id -> why (readiness)
        self.unbound: dict[int, str] = {}
        self._stopping = False
        #: accepted sockets being handed to their connections (made once the TLS handshake
        #: starts, and told of it once it is done)
        self._serving: dict[asyncio.Task[None], list[ClientConnection]] = {}
        context.brokers.on_named = self._broker_named

    @property
    def bootstrap_address(self) -> str:
        sni = self.context.sni
        if sni is not None:
            return f"{sni.bootstrap_host}:{sni.advertised_port}"
        return f"{self.settings.advertised}:{self.bootstrap_port}"

    @property
    def bootstrap_port(self) -> int:
        listener = self.listeners.get(None)
        return listener.port if listener is not None else self.settings.bootstrap_port

    async def start(self) -> None:
        self._listen(None, self.settings.bootstrap_port)
        if self.settings.connections_max_idle_ms > 0:
            self._idle_check = asyncio.get_running_loop().create_task(self._close_idle())
        if not await self._try_discovery():
            log.warning(
                "no broker listeners opened at start-up ([proxy] upstream_bootstrap_servers "
                "= [%s]: %s): asking again every %gs, not ready until then",
                ", ".join(self.settings.upstream_bootstrap_servers),
                self.metadata_problem,
                METADATA_RETRY_S,
            )
            self._discovering = asyncio.get_running_loop().create_task(self._discover())
        log.info(
            "proxy serving bootstrap at %s for %s",
            self.bootstrap_address,
            ",".join(self.settings.upstream_bootstrap_servers),
        )

    @property
    def metadata_read(self) -> str | None:
        """None once the cluster's brokers are known, else why not (readiness)."""
        return None if self.context.brokers.upstream else self.metadata_problem

    async def _try_discovery(self) -> bool:
        """Whether the brokers were read; an unreachable or not yet answering cluster is
        False. Anything else (the proxy's own credentials refused) is raised: at start-up,
        a clear error rather than an instance that never turns ready."""
        try:
            await self.discover_brokers()
        except (OSError, TimeoutError, ValueError, EOFError, ProtocolError) as exc:
            # a SASL listener closes on a request before authentication (without [cluster]
            # credentials); listeners then open as clients' own Metadata responses name them
            self.metadata_problem = f"the cluster's metadata cannot be read: {exc!r}"
            return False
        return True

    async def _discover(self) -> None:
        while not self.context.brokers.upstream:
            await asyncio.sleep(METADATA_RETRY_S)
            try:
                if await self._try_discovery():
                    log.info("broker listeners opened: the cluster's metadata was read")
            except Exception as exc:  # asked again whatever it is: readiness waits on it
                problem = f"the cluster's metadata cannot be read: {exc!r}"
                if problem != self.metadata_problem:
                    log.error("%s; asking again every %gs", problem, METADATA_RETRY_S)
                self.metadata_problem = problem

    async def stop(self, drain_timeout_s: float = 0.0) -> None:
        """Stop accepting; let requests already sent upstream be answered for up to
        `drain_timeout_s` (each connection closes once its last one is), then close."""
        self._stopping = True  # a broker named from now on opens no listener
        for task in (self._idle_check, self._discovering):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(listener.close() for listener in self.listeners.values()))
        for sock in self._throttled:
            sock.close()
        self._throttled.clear()
        for task in self._headers:
            task.cancel()
        await asyncio.gather(*self._headers, return_exceptions=True)
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
        self.listeners.clear()

    def _listen(self, node_id: int | None, port: int) -> Listener:
        listener = Listener(
            "bootstrap" if node_id is None else f"broker-{node_id}",
            port,
            lambda: self.context.brokers.targets(node_id),
            self._admit,
            self._wait_for_slot,
            self.context,
        )
        listener.open()
        self.listeners[node_id] = listener
        return listener

    async def _wait_for_slot(self) -> None:
        while not self.context.connection_quotas.has_slot():
            self._slot_freed.clear()
            await self._slot_freed.wait()

    def slot_freed(self) -> None:
        """Acceptors waiting for max.connections look again (a reload may have raised it)."""
        self._slot_freed.set()

    def _admit(self, listener: Listener, sock: socket.socket, address: tuple[str, ...]) -> None:
        """A socket just accepted: admitted as its peer, or, where a PROXY protocol header
        is read, as the client the header names once it is read."""
        peer = (peer_ip(address[0]), int(address[1]))
        mode = self._proxy_protocol.mode_for(bootstrap=listener.name == "bootstrap")
        if mode is HeaderMode.OFF:
            self._admit_client(listener, sock, peer)
            return
        self.context.connection_quotas.hold_slot()  # max.connections counts it already
        task = asyncio.get_running_loop().create_task(self._read_header(listener, sock, peer, mode))
        self._headers.add(task)
        task.add_done_callback(self._headers.discard)

    async def _read_header(
        self, listener: Listener, sock: socket.socket, peer: tuple[str, int], mode: HeaderMode
    ) -> None:
        """Only a trusted balancer may name another client; a connection with a header
        missing where one is required, malformed, or from anyone else is closed."""
        trusted = self._proxy_protocol.trusts(peer[0])
        try:
            if not trusted and mode is HeaderMode.REQUIRED:
                raise ProxyHeaderError("not in [proxy_protocol] trusted_sources")
            header = await read_proxy_header(
                sock, mode is HeaderMode.REQUIRED, self.settings.connect_timeout_s
            )
            if header is not None and not trusted:
                raise ProxyHeaderError(
                    "a PROXY protocol header from a source not in [proxy_protocol] trusted_sources"
                )
        except ProtocolError as exc:
            self.context.stats.proxy_header_refused[listener.name] += 1
            log.warning("closing connection from %s on %s: %s", peer[0], listener.name, exc)
            self._unheld(sock)
            return
        except BaseException:  # the proxy stops
            self._unheld(sock)
            raise
        self.context.connection_quotas.unhold_slot()  # the client takes a slot as itself
        if header is None or header.source is None:  # none, or the balancer's own
            self._admit_client(listener, sock, peer)
            return
        client = (peer_ip(header.source[0]), header.source[1])
        log.debug("connection from %s:%d through %s", *client, peer[0])
        self._admit_client(listener, sock, client)

    def _unheld(self, sock: socket.socket) -> None:
        """A socket whose client never became known: its slot is free again."""
        sock.close()
        self.context.connection_quotas.unhold_slot()
        self._slot_freed.set()

    def _admit_client(
        self, listener: Listener, sock: socket.socket, client: tuple[str, int]
    ) -> None:
        """ConnectionQuotas.inc for the client of a socket, then the connection served.

        Without a header to read, runs in the acceptor before its next accept, so the slot
        count is exact; serving the socket runs in a task of its own, which closing the
        listener does not cancel.
        """
        context = self.context
        ip = client[0]
        verdict, throttle_ms = context.connection_quotas.admit(ip, context.clock.now_ms())
        if verdict is ConnectionVerdict.THROTTLE:
            context.stats.connections_throttled[listener.name] += 1
            log.info(
                "throttling connection from %s for %d ms: over its connection_creation_rate",
                ip,
                throttle_ms,
            )
            self._throttled.add(sock)
            context.clock.call_later(throttle_ms * 1_000_000, lambda: self._end_throttle(sock))
            return
        if verdict is ConnectionVerdict.REFUSE:
            context.stats.connections_refused[listener.name] += 1
            log.info(
                "rejected connection from %s: it already has max.connections.per.ip (%d)",
                ip,
                context.connection_quotas.limits.max_for(ip),
            )
            sock.close()
            return
        context.stats.connections_accepted[listener.name] += 1
        made: list[ClientConnection] = []
        task = asyncio.get_running_loop().create_task(self._serve(listener, sock, client, made))
        self._serving[task] = made
        task.add_done_callback(self._serving.pop)

    async def _serve(
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
            targets, unreachable = await self._upstream(listener, sock, ip)
        except ProtocolError as exc:
            log.warning("closing client %s: %s", ip, exc)
            if isinstance(exc, UnknownName):
                _refuse_name(sock)
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

    async def _upstream(
        self, listener: Listener, sock: socket.socket, ip: str
    ) -> tuple[Callable[[], Sequence[tuple[str, int]]], Callable[[], None] | None]:
        """Where a connection's requests go, and whom to tell when nothing answers there:
        the listener's upstream, or, on the one port of SNI routing, the bootstrap or the
        broker its ClientHello names; that port stays open whatever is unreachable (it
        serves the others too). Raises UnknownName for a name served nowhere here."""
        sni = self.context.sni
        if sni is None:
            return listener.targets, listener.upstream_unreachable
        name = await read_server_name(sock, self.settings.connect_timeout_s)
        node_id = sni.route(name)  # UnknownName: no such name here
        if node_id is None:
            return listener.targets, None
        known = self.context.brokers.upstream
        if not known:  # the proxy still reading the cluster's metadata: a closed
            # connection, which clients retry, rather than a TLS alert, which they do not
            raise ProtocolError(f"{name!r}: the cluster's brokers are not known yet")
        if node_id not in known:
            raise UnknownName(f"{name!r}: the cluster has no broker {node_id}")
        log.debug("client %s asks for broker %d by name %s", ip, node_id, name)
        return partial(self.context.brokers.targets, node_id), None

    def _not_served(self, sock: socket.socket, made: list[ClientConnection], ip: str) -> None:
        """An accepted socket that never reached its connection: a TLS client's protocol is
        told of the connection only after the handshake, so its loss is counted here."""
        sock.close()
        if made:
            self._closed(made[0], ip)
        else:
            self.context.connection_quotas.release(ip)
            self._slot_freed.set()

    def _end_throttle(self, sock: socket.socket) -> None:
        if sock in self._throttled:
            self._throttled.discard(sock)
            sock.close()

    def _connection(
        self,
        client: tuple[str, int],
        targets: Callable[[], Sequence[tuple[str, int]]],
        unreachable: Callable[[], None] | None,
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
            self.context.connection_quotas.release(ip)
            self._slot_freed.set()
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
                        core.session.peer,
                        self.settings.connections_max_idle_ms,
                    )
                    core.close()

    def _broker_named(self, node_id: int, host: str, port: int) -> None:
        """Open the listener of a broker a response names, before the client learns it."""
        if node_id in self.listeners or self.context.sni is not None or self._stopping:
            return
        proxy_port = self.context.brokers.port(node_id)
        if proxy_port >= 1 << 16:  # a node id past what broker_port_base leaves
            self.unbound[node_id] = (
                f"broker {node_id}'s port {proxy_port} is not a TCP port: lower [proxy] "
                'broker_port_base, or route by name (routing = "sni")'
            )
            log.error("cannot open the listener for %s", self.unbound[node_id])
            return
        try:
            self._listen(node_id, proxy_port)
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
                self.settings.advertised,
                proxy_port,
            )

    async def discover_brokers(self) -> None:
        """Open every broker's listener up front, so clients with cached metadata reconnect:
        the brokers asked with the proxy's own client, as its [cluster] principal."""
        addresses = self.settings.upstream_addresses()
        timeout_s = self.settings.connect_timeout_s
        version = OWN_METADATA_VERSION
        async with ClusterClient(self.context.own_client, addresses, timeout_s) as cluster:
            frame = await cluster.ask(METADATA, version, metadata_request_body([]))  # brokers only
        for broker in read_metadata_response(frame, version).brokers:
            self.context.brokers.advertise(broker.node_id, broker.host, broker.port)


def _refuse_name(sock: socket.socket) -> None:
    """TLS's unrecognized_name alert, as a server that does not serve the name sends it.
    The ClientHello, only peeked at, is read first: closing a socket with unread bytes
    resets the connection, and a reset can lose the alert before the client reads it."""
    with contextlib.suppress(OSError):
        sock.recv(MAX_HELLO)
        sock.send(UNRECOGNIZED_NAME_ALERT)
        sock.shutdown(socket.SHUT_WR)
