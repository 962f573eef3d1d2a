"""The asyncio side of one client connection: transports in, the connection core between.

asyncio Protocols rather than streams: reading is paused and resumed directly on the
transports (back-pressure, the mute of a throttled client), and frames reach the core from
the read callback without a task switch. Everything the proxy decides is in
proxy/core.py; this module only connects sockets to it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from config.ssl_principal import SslPrincipalMapper, distinguished_name
from protocol.rewrite import Advertise
from proxy.clock import Clock
from proxy.core import READ_BYTES, ConnectionCore, Pause
from proxy.enforcement import Enforcer
from proxy.memory_pool import MemoryPool
from proxy.topics import TopicCache
from proxy.usage import UsageRecorder

if TYPE_CHECKING:
    from asyncio import BaseTransport, Transport

log = logging.getLogger(__name__)

_WRITE_HIGH_WATER = 4 * 1024 * 1024


#: every client read lands here first: reads run one at a time on the event loop's thread,
#: and each is copied out before the next
_READ_BUFFER = memoryview(bytearray(READ_BYTES))


class ClientConnection(asyncio.BufferedProtocol):
    """A BufferedProtocol so that the core decides how much each read takes (read_limit)."""

    def __init__(
        self,
        upstream_targets: Callable[[], Sequence[tuple[str, int]]],
        advertise: Advertise,
        max_frame_bytes: int,
        connect_timeout_s: float,
        on_close: Callable[[ClientConnection], None],
        enforcer: Enforcer,
        clock: Clock,
        topics: TopicCache,
        usage: UsageRecorder | None = None,
        pool: MemoryPool | None = None,
        on_unreachable: Callable[[], None] | None = None,
        upstream_tls: ssl.SSLContext | None = None,
        principal_mapper: SslPrincipalMapper | None = None,
    ) -> None:
        self._upstream_targets = upstream_targets
        #: names a client from the certificate it presented ([listener] ssl.client.auth)
        self._principal_mapper = principal_mapper
        #: TLS towards the brokers ([upstream]); None speaks plaintext
        self._upstream_tls = upstream_tls
        self._pool = pool
        #: told when no upstream address accepts a connection: the listener then closes
        self._on_unreachable = on_unreachable
        #: the core's activity count when the idle check last saw it change, and when
        self.seen_activity = 0
        self.seen_at_ns = 0
        self._usage = usage
        self._topics = topics
        self._advertise = advertise
        self._max_frame_bytes = max_frame_bytes
        self._connect_timeout_s = connect_timeout_s
        self._on_close = on_close
        self._enforcer = enforcer
        self._clock = clock
        self.core: ConnectionCore | None = None
        self._transport: Transport | None = None

    def connection_made(self, transport: BaseTransport) -> None:
        client = cast("Transport", transport)  # uvloop's are not asyncio subclasses
        self._transport = client
        peer = client.get_extra_info("peername")
        client.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        self.core = ConnectionCore(
            client,
            self._enforcer,
            self._advertise,
            self._topics,
            self._max_frame_bytes,
            self._clock,
            f"{peer[0]}:{peer[1]}" if peer else "?",
            self._usage,
            self._pool,
            self._start_connecting,
        )
        self.seen_at_ns = self._clock.now_ns()
        if self._principal_mapper is not None:
            self._name_from_certificate(client, self.core)

    def _name_from_certificate(self, client: Transport, core: ConnectionCore) -> None:
        """User: + the certificate's subject through ssl.principal.mapping.rules, as Kafka's
        DefaultKafkaPrincipalBuilder; a client without one is User:ANONYMOUS, and a subject
        no rule maps fails, as the client's authentication fails on a broker. A SASL
        exchange on top names the client again, as on a SASL_SSL broker."""
        assert self._principal_mapper is not None
        tls = client.get_extra_info("ssl_object")
        certificate = tls.getpeercert(binary_form=True) if tls is not None else None
        if not certificate:
            return
        try:
            core.session.user = self._principal_mapper.name(distinguished_name(certificate))
        except ValueError as exc:  # NoMatchingRule, or a replacement Java would refuse
            log.warning(
                "closing client %s: no principal for its certificate: %s", core.session.peer, exc
            )
            core.close()
            return
        log.info(
            "client %s authenticated as User:%s by its certificate",
            core.session.peer,
            core.session.user,
        )

    def _start_connecting(self) -> None:
        assert self.core is not None
        asyncio.get_running_loop().create_task(self._connect_upstream(self.core))

    async def _connect_upstream(self, core: ConnectionCore) -> None:
        loop = asyncio.get_running_loop()
        errors = []
        for host, port in self._upstream_targets():
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: _UpstreamProtocol(core),
                        host,
                        port,
                        ssl=self._upstream_tls,
                        server_hostname=host if self._upstream_tls is not None else None,
                    ),
                    self._connect_timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            if core.closed:
                transport.close()
                return
            log.debug("client %s -> upstream %s:%d", core.session.peer, host, port)
            transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
            core.upstream_connected(transport)
            return
        if errors and self._on_unreachable is not None:
            self._on_unreachable()  # first: the client must not reconnect before it closes
        log.warning(
            "closing client %s: no upstream broker reachable (%s)",
            core.session.peer,
            "; ".join(errors) or "no known address",
        )
        core.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        assert self.core is not None
        return _READ_BUFFER[: self.core.read_limit()]

    def buffer_updated(self, nbytes: int) -> None:
        assert self.core is not None
        self.core.requests_received(_READ_BUFFER[:nbytes].tobytes())

    def connection_lost(self, exc: Exception | None) -> None:
        """The socket is closed and its last response flushed: only now does the connection
        stop counting against the connection quotas and the drain."""
        self.close()
        self._on_close(self)

    def pause_writing(self) -> None:
        assert self.core is not None
        self.core.client_write_blocked()

    def resume_writing(self) -> None:
        assert self.core is not None
        self.core.client_write_unblocked()

    def drain(self) -> None:
        if self.core is not None:
            self.core.drain()
        else:
            self.close()

    def close(self) -> None:
        if self.core is not None:
            self.core.close()

    def abort(self) -> None:
        """Close now, dropping what the client has not read (a drain that timed out)."""
        self.close()
        if self._transport is not None:
            self._transport.abort()


class _UpstreamProtocol(asyncio.Protocol):
    """Delegates to the connection core, which owns all state of the pair."""

    def __init__(self, core: ConnectionCore) -> None:
        self._core = core

    def data_received(self, data: bytes) -> None:
        self._core.responses_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._core.upstream_lost(exc)

    def pause_writing(self) -> None:
        self._core.pause_reading(Pause.UPSTREAM_BUSY)

    def resume_writing(self) -> None:
        self._core.resume_reading(Pause.UPSTREAM_BUSY)
