"""The real connection core without sockets or sleeps: a virtual clock and recording transports.

The core only reads time and sets timers through its Clock and only moves bytes through its
two peers, so driving those by hand runs the production code path exactly: frames
in, frames and read pauses out, on a time line the test owns.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from protocol.headers import parse_request_header
from protocol.rewrite import Advertise
from proxy.clock import Clock
from proxy.core import ConnectionCore
from proxy.enforcement import Enforcer
from proxy.handlers.base import Exchange, Request
from proxy.memory_pool import MemoryPool
from proxy.topics import TopicCache
from proxy.usage import UsageRecorder
from quotas.usage import UsageCounters


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


def connect(
    enforcer: Enforcer,
    clock: Clock,
    client: RecordingTransport | None = None,
    upstream: RecordingTransport | None = None,
    usage: UsageRecorder | None = None,
    pool: MemoryPool | None = None,
) -> tuple[ConnectionCore, RecordingTransport, RecordingTransport]:
    """A connection core whose client and upstream sides are already connected."""
    client = client or RecordingTransport()
    upstream = upstream or RecordingTransport()
    advertise: Advertise = lambda n, h, p: (h, p)  # noqa: E731
    core = ConnectionCore(
        client, enforcer, advertise, TopicCache(), 10**8, clock, usage=usage, pool=pool
    )
    core.upstream_connected(upstream)
    return core, client, upstream


def handler_request(
    frame: bytes, now_ms: int = 0, refreshed: bool = False, usage: UsageCounters | None = None
) -> Request:
    """A request as the core hands it to a handler, for calling handlers directly."""
    header = parse_request_header(frame)
    return Request(frame, header, header.client_id or "", now_ms, refreshed, usage)


def handler_exchange(frame: bytes, state: object = None) -> Exchange:
    """The in-flight entry of that request, as the core hands it back with the response."""
    header = parse_request_header(frame)
    return Exchange(header.correlation_id, header.api_key, header.api_version, "app", state=state)
