"""The real connection core without sockets or sleeps: a virtual clock and recording transports.

The core only reads time and sets timers through its Clock and only moves bytes through its
two peers, so driving those by hand runs the production code path exactly: frames
in, frames and read pauses out, on a time line the test owns.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from config.proxy import ProxySettings
from protocol.headers import parse_request_header
from proxy.enforcement import Enforcement
from proxy.handlers.base import Channel, Request
from proxy.handlers.registry import ROUTES
from proxy.runtime.clock import Clock
from proxy.runtime.context import ProxyContext
from proxy.runtime.core import ConnectionCore
from proxy.runtime.memory_pool import MemoryPool
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.principal import Principal
from quotas.usage_samples import UsageCounters


class _VirtualTimer:
    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock(Clock):
    """Discrete-event time: timers run in time order (ties in the order they were set) as the
    test advances the clock; nothing happens between two timers."""

    def __init__(self, start_ns: int = 0) -> None:
        self._now = start_ns
        self._timers: list[tuple[int, int, _VirtualTimer]] = []
        self._set = 0

    def now_ns(self) -> int:
        return self._now

    def call_later(self, delay_ns: int, callback: Callable[[], object]) -> _VirtualTimer:
        timer = _VirtualTimer(callback)
        heapq.heappush(self._timers, (self._now + max(delay_ns, 0), self._set, timer))
        self._set += 1
        return timer

    def advance_to(self, until_ns: int) -> None:
        timers = self._timers
        while timers and timers[0][0] <= until_ns:
            when, _, timer = heapq.heappop(timers)
            if not timer.cancelled:
                self._now = when
                timer.callback()
        self._now = max(self._now, until_ns)

    def advance(self, delay_ns: int) -> None:
        self.advance_to(self._now + delay_ns)

    def pending(self) -> bool:
        """A timer is set and not cancelled."""
        return any(not timer.cancelled for _, _, timer in self._timers)


class RecordingTransport:
    """Stands in for one side's asyncio transport. What the connection writes is kept in
    `written`, or handed to `on_write` when a simulated peer consumes it; `on_resume` runs
    when the connection resumes reading, as the event loop would then deliver waiting bytes."""

    def __init__(
        self,
        on_write: Callable[[bytes], None] | None = None,
        on_resume: Callable[[], None] | None = None,
    ) -> None:
        self.written: list[bytes] = []
        self.reading = True
        self.closed = False
        self._on_write = on_write
        self._on_resume = on_resume

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1)

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True
        if self._on_resume is not None:
            self._on_resume()

    def write(self, data: bytes) -> None:
        if self._on_write is None:
            self.written.append(data)
        else:
            self._on_write(data)

    def writelines(self, data: Iterable[bytes]) -> None:
        for chunk in data:
            self.write(chunk)

    def close(self) -> None:
        self.closed = True


#: the client of every core connect() makes (a documentation address, RFC 5737)
CLIENT_PEER = "192.0.2.1:50000"


def proxy_context(
    enforcement: Enforcement,
    clock: Clock | None = None,
    usage: UsageRecorder | None = None,
    pool: MemoryPool | None = None,
    settings: ProxySettings | None = None,
) -> ProxyContext:
    """The proxy's context as start-up builds it, for a core or a handler under test."""
    return ProxyContext(
        settings or ProxySettings(max_frame_bytes=10**8),
        clock or VirtualClock(),
        enforcement,
        usage=usage,
        memory_pool=pool,
    )


def connect(
    enforcement: Enforcement | ProxyContext,
    clock: Clock | None = None,
    client: RecordingTransport | None = None,
    upstream: RecordingTransport | None = None,
    usage: UsageRecorder | None = None,
    pool: MemoryPool | None = None,
) -> tuple[ConnectionCore, RecordingTransport, RecordingTransport]:
    """A connection core whose client and upstream sides are already connected."""
    client = client or RecordingTransport()
    upstream = upstream or RecordingTransport()
    context = enforcement
    if not isinstance(context, ProxyContext):
        context = proxy_context(context, clock, usage, pool)
    core = ConnectionCore(client, context, CLIENT_PEER)
    core.upstream_connected(upstream)
    return core, client, upstream


class RecordingCluster:
    """The cluster as a handler under test asks it: each question is kept with its
    callback, and answered by the test (answer) or refused (`reachable` False). It stands in
    for the connection, so it also keeps the connection's principal between requests."""

    def __init__(self, reachable: bool = True) -> None:
        self.reachable = reachable
        self.asked: list[tuple[int, int, bytes, Callable[[bytes], object]]] = []
        self.principal: Principal | None = None
        #: what handlers began and has not ended yet (a deferral waits for it too)
        self.pending = 0
        #: times the client was read again while a request of its was held
        self.watched = 0

    def begin(self) -> Callable[[], None]:
        self.pending += 1

        def done() -> None:
            self.pending -= 1

        return done

    def watch_client(self) -> None:
        self.watched += 1

    def ask(
        self, api_key: int, api_version: int, body: bytes, on_answer: Callable[[bytes], object]
    ) -> bool:
        if self.reachable:
            self.asked.append((api_key, api_version, body, on_answer))
        return self.reachable

    def answer(self, frame: bytes) -> None:
        """Answer the oldest question not yet answered."""
        _, _, _, on_answer = self.asked.pop(0)
        on_answer(frame)


def handler_channel(
    context: ProxyContext, cluster: RecordingCluster | None = None, user: str = "ANONYMOUS"
) -> Channel:
    """A connection's session as the core makes it, for calling handlers directly."""
    channel = Channel(
        context, cluster or RecordingCluster(), sasl=context.principals.exchange(), user=user
    )
    return channel


def handler_request(
    channel: Channel,
    frame: bytes,
    now_ms: int = 0,
    refreshed: bool = False,
    usage: UsageCounters | None = None,
) -> Request:
    """A request as the core hands it to a handler: its principal resolved for the session's
    user in the enforcement's current generation, and kept as the connection keeps it."""
    header = parse_request_header(frame)
    runtime, cluster = channel.runtime, channel.cluster
    assert isinstance(runtime, ProxyContext) and isinstance(cluster, RecordingCluster)
    principal = cluster.principal = runtime.quotas.sensors.principal(
        cluster.principal, channel.user, header.client_id or ""
    )
    request = Request(frame, header, ROUTES[header.api_key], principal, now_ms * 1_000_000, usage)
    request.refreshed = refreshed
    return request


def responded(request: Request, now_ms: int) -> Request:
    """The request as the core hands it back with its response, at `now_ms`."""
    request.now_ms = now_ms
    return request
