"""The asyncio side of one client connection: transports in, the connection core between.

asyncio Protocols rather than streams: reading is paused and resumed directly on the
transports (back-pressure, the mute of a throttled client), and frames reach the core from
the read callback without a task switch. Everything the proxy decides is in
proxy/runtime/core.py; this module only connects sockets to it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from proxy.runtime.context import ProxyContext
from proxy.runtime.core import ConnectionCore
from proxy.runtime.read_budget import READ_BYTES
from proxy.runtime.read_gate import Pause

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
        context: ProxyContext,
        peer: str,
        upstream_targets: Callable[[], Sequence[tuple[str, int]]],
        on_close: Callable[[ClientConnection], None],
        on_unreachable: Callable[[], None] | None = None,
    ) -> None:
        self._context = context
        #: "address:port" of the client: the socket's peer, or the one a load balancer's
        #: PROXY protocol header names
        self._peer = peer
        self._upstream_targets = upstream_targets
        self._on_close = on_close
        #: told when no upstream address accepts a connection: the listener then closes
        self._on_unreachable = on_unreachable
        #: the core's activity count when the idle check last saw it change, and when
        self.seen_activity = 0
        self.seen_at_ns = 0
        self.core: ConnectionCore | None = None
        self._transport: Transport | None = None

    def connection_made(self, transport: BaseTransport) -> None:
        client = cast("Transport", transport)  # uvloop's are not asyncio subclasses
        self._transport = client
        client.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        context = self._context
        core = self.core = ConnectionCore(client, context, self._peer, self._start_connecting)
        self.seen_at_ns = context.clock.now_ns()
        tls = client.get_extra_info("ssl_object")
        if tls is not None:
            certificate = tls.getpeercert(binary_form=True)
            if not context.principals.from_certificate(core.channel, certificate):
                core.close()

    def _start_connecting(self) -> None:
        assert self.core is not None
        asyncio.get_running_loop().create_task(self._connect_upstream(self.core))

    async def _connect_upstream(self, core: ConnectionCore) -> None:
        loop = asyncio.get_running_loop()
        tls, timeout_s = self._context.upstream_tls, self._context.settings.connect_timeout_s
        errors = []
        for host, port in self._upstream_targets():
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: _UpstreamProtocol(core),
                        host,
                        port,
                        ssl=tls,
                        server_hostname=host if tls is not None else None,
                    ),
                    timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            if core.closed:
                transport.close()
                return
            log.debug("client %s -> upstream %s:%d", core.channel.peer, host, port)
            transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
            # where its requests go, for the broker's ceilings
            core.channel.broker = self._context.brokers.node_at(host, port)
            core.upstream_connected(transport, f"{host}:{port}")
            return
        if errors and self._on_unreachable is not None:
            self._on_unreachable()  # first: the client must not reconnect before it closes
        log.warning(
            "closing client %s: no upstream broker reachable (%s)",
            core.channel.peer,
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
        self._core.gate.pause(Pause.UPSTREAM_BUSY)

    def resume_writing(self) -> None:
        self._core.gate.resume(Pause.UPSTREAM_BUSY)
