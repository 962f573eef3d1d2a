"""Every reason one client is not being read, and the requests read before it stopped.

Kafka stops reading a connection for several reasons at once: a throttle being served
(KIP-219's mute), a request whose response must go before the next is read, too many
requests in flight, a full memory pool. Each is a Pause here; the client is read again when
no reason is left. The one question the core asks is whether `pauses` is empty.

A socket read may carry more requests than may be handled: those wait in the backlog,
handled first, in order, once BACKLOG is the only reason left.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from enum import Enum

from proxy.handlers.base import Request
from proxy.runtime.clock import Clock, Timer
from proxy.runtime.peer import Peer

#: what a read of the client gave: frames not parsed yet, or a deferred Request
Item = bytes | Request


class Pause(Enum):
    """Why the client is not being read; reading resumes when no reason is left."""

    #: the upstream connection is not up yet
    CONNECTING = "connecting"
    #: requests already read wait for an earlier pause to end
    BACKLOG = "backlog"
    #: a request that stops reading has no response written yet (Forward.stops_reading)
    UNTIL_RESPONSE = "until_response"
    #: a throttle is being served (KIP-219's mute)
    THROTTLED = "throttled"
    #: MAX_IN_FLIGHT requests await their responses
    IN_FLIGHT = "in-flight"
    #: the upstream connection's write buffer is full
    UPSTREAM_BUSY = "upstream-busy"
    #: a handler waits for the cluster to answer what it asked (Defer)
    DEFERRED = "deferred"
    #: the client does not read its responses, and the proxy would add answers of its own
    CLIENT_BUSY = "client-busy"
    #: the memory pool granted nothing for the frame being read (queued.max.request.bytes)
    MEMORY = "memory"
    #: the proxy is shutting down: requests already sent upstream are answered, no more read
    DRAINING = "draining"
    #: a connection guard refused the connection: it is closed once its hold ends
    REFUSED = "refused"


class ReadGate:
    def __init__(
        self, client: Peer, clock: Clock, handle: Callable[[Sequence[Item]], None]
    ) -> None:
        self._client = client
        self._clock = clock
        #: the core's: handles requests in order until something pauses reading
        self._handle = handle
        self.pauses: set[Pause] = set()
        #: requests read but not yet handled because reading is paused: before the upstream
        #: connection is up (uvloop reads accepted sockets even while paused), while muted,
        #: or at the in-flight limit; at most one socket read's worth. A deferred request
        #: waits here as its Request, handled again first.
        self.backlog: deque[Item] = deque()
        #: the clock's time (ns) until which reading stays paused for a throttle (KIP-219)
        self._muted_until_ns = 0
        self._unmute: Timer | None = None
        #: the client's write buffer is over its high-water mark
        self.client_busy = False
        self._closed = False

    def pause(self, reason: Pause) -> None:
        if reason not in self.pauses:
            self._client.pause_reading()
        self.pauses.add(reason)

    def resume(self, reason: Pause) -> None:
        if self._closed:
            return
        pauses = self.pauses
        pauses.discard(reason)
        if self.backlog and pauses == {Pause.BACKLOG}:
            pauses.clear()
            items = list(self.backlog)
            self.backlog.clear()
            self._handle(items)
        if not pauses:
            self._client.resume_reading()

    def hold(self, items: Sequence[Item]) -> None:
        """Requests read that wait until reading resumes."""
        self.backlog.extend(items)
        self.pause(Pause.BACKLOG)

    def wait_for_memory(self) -> None:
        self.pause(Pause.MEMORY)

    def granted(self) -> None:
        self.resume(Pause.MEMORY)

    def mute(self, throttle_ms: int) -> None:
        """Stop reading this client until the throttle has passed (Kafka mutes the channel).

        The socket's receive buffer then fills and TCP flow control holds the client, so a
        client that ignores throttle_time_ms is slowed without the proxy buffering for it.
        """
        if self._closed:
            return
        now = self._clock.now_ns()
        delay = throttle_ms * 1_000_000
        if now + delay <= self._muted_until_ns:
            return
        self._muted_until_ns = now + delay
        if self._unmute is not None:
            self._unmute.cancel()
        self.pause(Pause.THROTTLED)
        self._unmute = self._clock.call_later(delay, self._end_mute)

    def _end_mute(self) -> None:
        self._unmute = None
        self.resume(Pause.THROTTLED)

    def close(self) -> None:
        """Nothing is read again: the backlog is dropped with the connection."""
        self._closed = True
        self.backlog.clear()
        if self._unmute is not None:
            self._unmute.cancel()
