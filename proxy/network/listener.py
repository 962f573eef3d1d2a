"""One listening port of the proxy: it accepts while its upstream is reachable, and is
closed while it is not, so clients get the refused connection a dead broker gives them.

A broker that is down refuses connections, and Kafka clients apply their reconnect backoff
to a refused connection. A proxy that accepted and then closed every connection would
instead look like a live broker dropping clients, and they would reconnect at once, in a
loop (thousands of times a second). So when no upstream address accepts a client's
connection, the listening socket is closed and its upstream probed every PROBE_INTERVAL_S;
the port listens again as soon as the upstream accepts a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence

from proxy.runtime.context import ProxyContext

log = logging.getLogger(__name__)

#: how often an unreachable upstream is tried; a client's reconnect.backoff.max.ms is 1 s
PROBE_INTERVAL_S = 0.5
#: how long the acceptor rests when the process is out of file descriptors
_ACCEPT_ERROR_PAUSE_S = 0.1
_BACKLOG = 1024

Address = tuple[str, int]
#: takes an accepted socket and its peer's address: serves, holds or closes it
Admit = Callable[["Listener", socket.socket, tuple[str, ...]], None]


class Listener:
    def __init__(
        self,
        name: str,
        port: int,
        targets: Callable[[], Sequence[Address]],
        admit: Admit,
        wait_for_slot: Callable[[], Awaitable[None]],
        context: ProxyContext,
    ) -> None:
        #: the label of this listener's metrics: "bootstrap" or "broker-<node id>"
        self.name = name
        self.host = context.settings.listen_host
        self.port = port
        #: the upstream addresses its clients are connected to, in order of preference
        self.targets = targets
        self._admit = admit
        self._wait_for_slot = wait_for_slot
        #: the probe makes the connection clients' would (the context's [upstream] TLS): one
        #: that fails TLS (a broker's expired certificate) is no more reachable than one
        #: refused
        self._context = context
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._probing: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def serving(self) -> bool:
        return self._sock is not None

    def open(self) -> None:
        """Bind and accept; raises OSError if the port cannot be bound."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self._context.settings.workers > 1:  # every worker binds it; the kernel spreads
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((self.host, self.port))
            sock.listen(_BACKLOG)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]  # port 0: the one the system chose
        self._sock = sock
        self._accepting = asyncio.get_running_loop().create_task(self._accept(sock))

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wait_for_slot()  # max.connections: later clients wait in the backlog
            try:
                client, address = await loop.sock_accept(sock)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("listener %s cannot accept: %s", self.name, exc)
                    await asyncio.sleep(_ACCEPT_ERROR_PAUSE_S)
                continue
            try:
                await self._wait_for_slot()  # another listener may have taken the last one
            except BaseException:
                client.close()
                raise
            try:
                self._admit(self, client, address)
            except Exception:  # a defect must not stop this port from accepting
                log.exception("listener %s: admitting %s failed", self.name, address)
                client.close()

    def upstream_unreachable(self) -> None:
        """A client's connection found no upstream: refuse clients until one answers."""
        if self._sock is None or self._closed:
            return
        log.warning(
            "listener %s closed: its upstream %s is unreachable; probing every %gs",
            self.name,
            ", ".join(f"{host}:{port}" for host, port in self.targets()),
            PROBE_INTERVAL_S,
        )
        self._stop_accepting()
        self._probing = asyncio.get_running_loop().create_task(self._probe())

    def _stop_accepting(self) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            self._accepting = None
        if self._sock is not None:
            # the event loop's poller may hold the socket open for a while after close(), and
            # the kernel would go on completing handshakes nobody accepts: shutdown() stops
            # the listening at once, so the next client is refused
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
            self._sock = None

    async def _probe(self) -> None:
        while True:
            await asyncio.sleep(PROBE_INTERVAL_S)
            for host, port in self.targets():
                tls = self._context.upstream_tls
                try:
                    _, writer = await asyncio.wait_for(
                        asyncio.open_connection(
                            host, port, ssl=tls, server_hostname=host if tls is not None else None
                        ),
                        self._context.settings.connect_timeout_s,
                    )
                except (OSError, TimeoutError):
                    continue
                writer.close()
                try:
                    self.open()
                except OSError as exc:
                    log.error("listener %s cannot listen on %d: %s", self.name, self.port, exc)
                    break
                log.warning("listener %s open again: %s:%d answers", self.name, host, port)
                self._probing = None
                return

    async def close(self) -> None:
        self._closed = True
        tasks = [task for task in (self._accepting, self._probing) if task is not None]
        self._stop_accepting()
        if self._probing is not None:
            self._probing.cancel()
            self._probing = None
        await asyncio.gather(*tasks, return_exceptions=True)
