"""The proxy's listeners: one bootstrap listener plus one per upstream broker.

Broker N is always served at broker_port_base + N, so the addresses clients cache stay valid
across proxy restarts. A broker listener opens the moment the proxy first rewrites an address
for that node, before the response naming it reaches the client, so a client never learns an
address that is not accepting connections.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence
from struct import Struct

from config.settings import ProxySettings
from protocol.apis import METADATA
from protocol.errors import ProtocolError
from protocol.headers import encode_request, response_body_offset
from protocol.metadata import OWN_METADATA_VERSION, metadata_request_body
from protocol.rewrite import decode_response
from proxy.clock import Clock
from proxy.connection import ClientConnection
from proxy.core import OWN_CLIENT_ID
from proxy.enforcement import Enforcer
from proxy.metrics import ProxyStats
from proxy.topics import TopicCache
from proxy.usage import UsageRecorder

log = logging.getLogger(__name__)

_INT32 = Struct(">i")


class ProxyServer:
    def __init__(
        self,
        settings: ProxySettings,
        enforcer: Enforcer,
        stats: ProxyStats,
        clock: Clock,
        usage: UsageRecorder | None = None,
    ) -> None:
        self.settings = settings
        #: where every connection counts its requests for usage samples
        self.usage = usage
        self.enforcer = enforcer
        self.stats = stats
        self.clock = clock
        #: partition counts by topic, from every Metadata response through the proxy
        self.topics = TopicCache()
        #: node_id -> the upstream broker's own (host, port), learned from its responses
        self.upstream_nodes: dict[int, tuple[str, int]] = {}
        self._servers: dict[int | None, asyncio.Server] = {}
        #: nodes whose listener is open or opening
        self._broker_nodes: set[int] = set()
        self._pending: set[asyncio.Task[None]] = set()
        self.connections: set[ClientConnection] = set()

    @property
    def bootstrap_address(self) -> str:
        return f"{self.settings.advertised}:{self.bootstrap_port}"

    @property
    def bootstrap_port(self) -> int:
        server = self._servers.get(None)
        if server is not None and server.sockets:
            port: int = server.sockets[0].getsockname()[1]
            return port
        return self.settings.bootstrap_port

    def broker_port(self, node_id: int) -> int:
        return self.settings.broker_port_base + node_id

    async def start(self) -> None:
        await self._listen(None, self._bind(self.settings.bootstrap_port))
        try:
            await self.discover_brokers()
        except (OSError, TimeoutError, ValueError, EOFError, ProtocolError) as exc:
            # a SASL listener closes on a request before authentication; listeners then
            # open as clients' own Metadata responses name the brokers
            log.warning("no broker listeners opened at start-up: %r", exc)
        log.info(
            "proxy serving bootstrap at %s for %s",
            self.bootstrap_address,
            ",".join(self.settings.upstream_bootstrap_servers),
        )

    async def stop(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending)
        for server in self._servers.values():
            server.close()
        for connection in list(self.connections):
            connection.close()
        for server in self._servers.values():
            await server.wait_closed()
        self._servers.clear()

    def _bind(self, port: int) -> socket.socket:
        sock = socket.socket(
            socket.AF_INET6 if ":" in self.settings.listen_host else socket.AF_INET
        )
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.settings.listen_host, port))
        sock.listen(1024)
        sock.setblocking(False)
        return sock

    async def _listen(self, node_id: int | None, sock: socket.socket) -> None:
        def factory() -> ClientConnection:
            connection = ClientConnection(
                upstream_targets=lambda: self._targets(node_id),
                advertise=self.advertise,
                max_frame_bytes=self.settings.max_frame_bytes,
                connect_timeout_s=self.settings.connect_timeout_s,
                on_close=self.connections.discard,
                enforcer=self.enforcer,
                clock=self.clock,
                topics=self.topics,
                usage=self.usage,
            )
            self.connections.add(connection)
            self.stats.connections_accepted += 1
            return connection

        loop = asyncio.get_running_loop()
        self._servers[node_id] = await loop.create_server(factory, sock=sock)

    def _targets(self, node_id: int | None) -> Sequence[tuple[str, int]]:
        if node_id is None:
            return self.settings.upstream_addresses()
        address = self.upstream_nodes.get(node_id)
        return [address] if address is not None else []

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Record where broker `node_id` really is and return the proxy's address for it."""
        self.upstream_nodes[node_id] = (host, port)
        if node_id not in self._broker_nodes:
            proxy_port = self.broker_port(node_id)
            try:
                sock = self._bind(proxy_port)
            except OSError as exc:
                log.error(
                    "cannot open the listener for broker %d on port %d: %s",
                    node_id,
                    proxy_port,
                    exc,
                )
            else:
                self._broker_nodes.add(node_id)
                task = asyncio.get_running_loop().create_task(self._listen(node_id, sock))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)
                log.info(
                    "broker %d (%s:%d) served at %s:%d",
                    node_id,
                    host,
                    port,
                    self.settings.advertised,
                    proxy_port,
                )
        return self.settings.advertised, self.broker_port(node_id)

    async def discover_brokers(self) -> None:
        """Open every broker's listener up front, so clients with cached metadata reconnect."""
        for host, port in self.settings.upstream_addresses():
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), self.settings.connect_timeout_s
                )
            except (OSError, TimeoutError):
                continue
            version = OWN_METADATA_VERSION
            try:
                body = metadata_request_body([])  # brokers only
                writer.write(encode_request(METADATA, version, 0, OWN_CLIENT_ID, body))
                size = _INT32.unpack(await reader.readexactly(4))[0]
                frame = _INT32.pack(size) + await reader.readexactly(size)
            finally:
                writer.close()
            offset = response_body_offset(frame, METADATA, version)
            metadata = decode_response(frame, offset, METADATA, version)
            for broker in metadata.brokers:
                self.advertise(broker.node_id, broker.host, broker.port)
            if self._pending:
                await asyncio.gather(*self._pending)
            return
        raise OSError("no upstream bootstrap server reachable")
