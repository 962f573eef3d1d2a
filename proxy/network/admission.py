"""Which accepted sockets are served, as whom, and towards which upstream.

Every accepted socket passes Kafka's connection quotas (quotas/connections.py) before it is
served, as the client it is: behind a load balancer, the one its PROXY protocol header names
([proxy_protocol]), read before anything else. A client over its connection_creation_rate is
held open, unread, until its throttle ends, then closed, as Kafka's broker does; one over
max.connections.per.ip is closed at once. On the one port of SNI routing, the ClientHello's
name says which broker the connection is for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Sequence
from functools import partial

from config.proxy_protocol import HeaderMode, ProxyProtocolSettings
from protocol.client_hello import MAX_HELLO, UNRECOGNIZED_NAME_ALERT
from protocol.errors import ProtocolError
from protocol.proxy_header import ProxyHeaderError
from proxy.network.listener import Listener
from proxy.network.peek import read_proxy_header, read_server_name
from proxy.runtime.context import ProxyContext
from proxy.runtime.sni import UnknownName
from quotas.connections import ConnectionVerdict, canonical_ip

log = logging.getLogger(__name__)

#: the upstream addresses of a connection, in order of preference
Targets = Callable[[], Sequence[tuple[str, int]]]
#: serves an admitted socket as its client (ip, port)
Serve = Callable[[Listener, socket.socket, tuple[str, int]], None]


def peer_ip(address: str) -> str:
    """A peer's address as the config names addresses (quotas.connections.canonical_ip),
    without the scope of a link-local IPv6 peer."""
    address = address.partition("%")[0]
    return canonical_ip(address) or address


class Admission:
    def __init__(
        self, context: ProxyContext, proxy_protocol: ProxyProtocolSettings, serve: Serve
    ) -> None:
        self._context = context
        self._proxy_protocol = proxy_protocol
        self._serve = serve
        #: accepted sockets whose PROXY protocol header is being read
        self._headers: set[asyncio.Task[None]] = set()
        #: connections over a connection_creation_rate, held until their throttle ends
        self._throttled: set[socket.socket] = set()
        self._slot_freed = asyncio.Event()

    async def wait_for_slot(self) -> None:
        while not self._context.connection_quotas.has_slot():
            self._slot_freed.clear()
            await self._slot_freed.wait()

    def slot_freed(self) -> None:
        """Acceptors waiting for max.connections look again (a reload may have raised it)."""
        self._slot_freed.set()

    def released(self, ip: str) -> None:
        """A served connection of `ip` closed: its slot is free again."""
        self._context.connection_quotas.release(ip)
        self._slot_freed.set()

    def admit(self, listener: Listener, sock: socket.socket, address: tuple[str, ...]) -> None:
        """A socket just accepted: admitted as its peer, or, where a PROXY protocol header
        is read, as the client the header names once it is read."""
        peer = (peer_ip(address[0]), int(address[1]))
        mode = self._proxy_protocol.mode_for(bootstrap=listener.name == "bootstrap")
        if mode is HeaderMode.OFF:
            self._admit_client(listener, sock, peer)
            return
        self._context.connection_quotas.hold_slot()  # max.connections counts it already
        task = asyncio.get_running_loop().create_task(self._read_header(listener, sock, peer, mode))
        self._headers.add(task)
        task.add_done_callback(self._headers.discard)

    async def close(self) -> None:
        """Throttled sockets closed, headers no longer read."""
        for sock in self._throttled:
            sock.close()
        self._throttled.clear()
        for task in self._headers:
            task.cancel()
        await asyncio.gather(*self._headers, return_exceptions=True)

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
                sock, mode is HeaderMode.REQUIRED, self._context.settings.connect_timeout_s
            )
            if header is not None and not trusted:
                raise ProxyHeaderError(
                    "a PROXY protocol header from a source not in [proxy_protocol] trusted_sources"
                )
        except ProtocolError as exc:
            self._context.stats.proxy_header_refused[listener.name] += 1
            log.warning("closing connection from %s on %s: %s", peer[0], listener.name, exc)
            self._unheld(sock)
            return
        except BaseException:  # the proxy stops
            self._unheld(sock)
            raise
        self._context.connection_quotas.unhold_slot()  # the client takes a slot as itself
        if header is None or header.source is None:  # none, or the balancer's own
            self._admit_client(listener, sock, peer)
            return
        client = (peer_ip(header.source[0]), header.source[1])
        log.debug("connection from %s:%d through %s", *client, peer[0])
        self._admit_client(listener, sock, client)

    def _unheld(self, sock: socket.socket) -> None:
        """A socket whose client never became known: its slot is free again."""
        sock.close()
        self._context.connection_quotas.unhold_slot()
        self._slot_freed.set()

    def _admit_client(
        self, listener: Listener, sock: socket.socket, client: tuple[str, int]
    ) -> None:
        """ConnectionQuotas.inc for the client of a socket, then the connection served.

        Without a header to read, runs in the acceptor before its next accept, so the slot
        count is exact.
        """
        context = self._context
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
        self._serve(listener, sock, client)

    def _end_throttle(self, sock: socket.socket) -> None:
        if sock in self._throttled:
            self._throttled.discard(sock)
            sock.close()

    async def upstream(
        self, listener: Listener, sock: socket.socket, ip: str
    ) -> tuple[Targets, Callable[[], None] | None]:
        """Where a connection's requests go, and whom to tell when nothing answers there:
        the listener's upstream, or, on the one port of SNI routing, the bootstrap or the
        broker its ClientHello names; that port stays open whatever is unreachable (it
        serves the others too). Raises UnknownName for a name served nowhere here."""
        context = self._context
        sni = context.sni
        if sni is None:
            return listener.targets, listener.upstream_unreachable
        name = await read_server_name(sock, context.settings.connect_timeout_s)
        node_id = sni.route(name)  # UnknownName: no such name here
        if node_id is None:
            return listener.targets, None
        known = context.brokers.upstream
        if not known:  # the proxy still reading the cluster's metadata: a closed
            # connection, which clients retry, rather than a TLS alert, which they do not
            raise ProtocolError(f"{name!r}: the cluster's brokers are not known yet")
        if node_id not in known:
            raise UnknownName(f"{name!r}: the cluster has no broker {node_id}")
        log.debug("client %s asks for broker %d by name %s", ip, node_id, name)
        return partial(context.brokers.targets, node_id), None


def refuse_name(sock: socket.socket) -> None:
    """TLS's unrecognized_name alert, as a server that does not serve the name sends it.
    The ClientHello, only peeked at, is read first: closing a socket with unread bytes
    resets the connection, and a reset can lose the alert before the client reads it."""
    with contextlib.suppress(OSError):
        sock.recv(MAX_HELLO)
        sock.send(UNRECOGNIZED_NAME_ALERT)
        sock.shutdown(socket.SHUT_WR)
