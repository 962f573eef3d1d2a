"""One client connection and its upstream connection, without I/O: the per-frame hot path.

Bytes and the clock go in (requests_received, responses_received, timers on the Clock); what
comes out goes through two peers (the client side and the upstream side), each only written
to, paused, resumed and closed. proxy/network/connection.py connects it to asyncio's transports; the
unit tests and the fidelity simulation drive it with recording peers on a virtual clock.

The core knows no API: the registry routes each request to its handler, the handler decides,
and the core carries out the outcome, keeps the connection's order, pauses reading for the
reasons below, and has the enforcement settle each response's throttle.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import ClassVar, Final, Protocol

from protocol.errors import ProtocolError
from protocol.frames import FrameSplitter
from protocol.headers import (
    OWN_CLIENT_ID,
    encode_request,
    parse_request_header,
    response_correlation_id,
)
from protocol.throttle import with_throttle_time
from proxy.handlers.base import Answer, Defer, Forward, Request, Session, Stage
from proxy.handlers.registry import ROUTES
from proxy.runtime.clock import Timer
from proxy.runtime.context import ProxyContext
from proxy.runtime.read_budget import READ_BYTES, ReadBudget
from quotas.principal import Principal

log = logging.getLogger(__name__)


#: the proxy's own requests are numbered from here, apart from what clients use in practice
_OWN_CORRELATION_IDS: Final = 0x7F000000


class Peer(Protocol):
    """One side of the connection as the core uses it: an asyncio transport's subset."""

    def write(self, data: bytes) -> None: ...

    def writelines(self, data: Iterable[bytes]) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...


#: requests of one connection awaiting responses before the proxy stops reading it. A broker
#: handles one request of a connection at a time; clients pipeline a few (Java producers 5),
#: and a client that would pipeline thousands past a throttle is held here instead. Every
#: request in flight is charged its request time when it is answered, even after the first
#: answer throttled the connection, and Kafka caps a request-time throttle at one window:
#: with 64 a raw pipelining client got 1.15 x its request_percentage (tests/support/fidelity.py).
MAX_IN_FLIGHT: Final = 5


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


class OwnRequest:
    """A request of the proxy's own in the in-flight queue: its response is the asker's."""

    __slots__ = ("correlation_id", "on_answer")
    #: as a client's Request: it holds no reading, and the proxy does not answer it
    stops_reading: ClassVar[bool] = False
    local_response: ClassVar[None] = None

    def __init__(self, correlation_id: int, on_answer: Callable[[bytes], object]) -> None:
        self.correlation_id = correlation_id
        self.on_answer = on_answer


class ConnectionCore:
    def __init__(
        self,
        client: Peer,
        context: ProxyContext,
        peer: str = "?",
        connect_upstream: Callable[[], object] | None = None,
    ) -> None:
        self._client = client
        self._clock = clock = context.clock
        self._sensors = context.quotas.sensors
        self._settlement = context.quotas.settlement
        self._thread_times = context.thread_times
        #: what requests cost the broker this connection's upstream reached: the request-time
        #: estimate learns it and charges by it
        self._costs = context.thread_times.broker("")
        #: where this connection's requests are counted for usage samples (None: not counted)
        self._usage = context.usage
        #: opens the upstream connection; called at the client's first bytes, so a client
        #: that connects and sends nothing costs the cluster no connection
        self._connect_upstream = connect_upstream
        #: bumped by every read from either side: the idle check compares it over time
        self.activity = 0
        #: closing once every request sent upstream has been answered (shutdown)
        self._draining = False
        self._upstream: Peer | None = None
        self.session = Session(context, self, peer, sasl=context.principals.exchange())
        #: the address the usage samples name, kept: its key is built for every request
        self._client_ip = self.session.address
        #: the principal of this connection's last request, kept while it still applies
        self._principal: Principal | None = None
        #: (user, client_id, client_ip) this connection is counted under in usage samples
        self._counted: tuple[str, str, str] | None = None
        #: the clock's time (ns) until which reading stays paused for a throttle (KIP-219)
        self._muted_until_ns = 0
        self._unmute: Timer | None = None
        self._requests = FrameSplitter(context.settings.max_frame_bytes)
        #: queued.max.request.bytes; None: every read takes READ_BYTES
        self._budget = None
        if context.memory_pool is not None:
            self._budget = ReadBudget(
                context.memory_pool, self._requests, clock, self._wait_for_memory, self._granted
            )
        # upstream responses are trusted; Fetch responses may legitimately be large
        self._responses = FrameSplitter()
        self._in_flight: deque[Request | OwnRequest] = deque()
        self._read_pauses: set[Pause] = set()
        #: requests read but not yet handled because reading is paused: before the upstream
        #: connection is up (uvloop reads accepted sockets even while paused), while muted,
        #: or at the in-flight limit; at most one socket read's worth. A deferred request
        #: waits here as its Request, handled again first.
        self._backlog: deque[bytes | Request] = deque()
        self.closed = False
        #: the largest throttle among the responses being written now
        self._throttle_ms = 0
        #: when the last upstream response arrived, or the upstream connection was made
        #: (clock ns): a request cannot start upstream before, for request time
        self._last_answered_ns = 0
        #: the round trip each of the responses read at once is given, -1 for a response
        #: read alone (see _shared_round_trip)
        self._share_ns = -1
        #: requests bound upstream while a read is being handled, written together after it
        self._forward: list[bytes] | None = None
        #: whether the proxy may send requests of its own on the upstream connection: once
        #: the client has sent a request of the session, and not while it authenticates
        #: again (a broker takes nothing else in the middle of an exchange)
        self._authenticated = False
        self._own_correlation_id = _OWN_CORRELATION_IDS
        #: requests of the proxy's own awaiting their answers
        self._asked = 0
        #: the request a handler deferred until its questions are answered
        self._deferred: Request | None = None
        #: the client's write buffer is over its high-water mark
        self._client_busy = False

    def upstream_connected(self, upstream: Peer, broker: str = "") -> None:
        self._upstream = upstream
        self._costs = self._thread_times.broker(broker)
        # requests read while the proxy connected reach the broker only now: the time they
        # waited for the connection is not request time (see _request_time_ns)
        self._last_answered_ns = self._clock.now_ns()
        self.resume_reading(Pause.CONNECTING)

    # client side ---------------------------------------------------------------------------

    def requests_received(self, data: bytes) -> None:
        self.activity += 1
        if self._upstream is None and Pause.CONNECTING not in self._read_pauses:
            self.pause_reading(Pause.CONNECTING)
            if self._connect_upstream is not None:
                self._connect_upstream()
        requests = self._requests
        try:
            frames = requests.feed(data)
        except ProtocolError as exc:
            self._refuse(exc)
            return
        budget = self._budget
        if budget is not None and (budget.granted or requests.buffered):
            budget.account(bool(frames))
        if self._backlog:
            self._backlog.extend(frames)
        else:
            self._handle_requests(frames)

    def read_limit(self) -> int:
        """How many bytes the next read of the client may take (see ReadBudget)."""
        return READ_BYTES if self._budget is None else self._budget.read_limit()

    def _handle_requests(self, items: Sequence[bytes | Request]) -> None:
        """Handle requests in order until something pauses reading; keep the rest for later,
        so a pause (a mute, the in-flight limit) holds even the requests of the same read."""
        forward = self._forward = []
        index = 0
        try:
            while index < len(items):
                if self._read_pauses:
                    break
                item = items[index]
                request = self._again(item) if isinstance(item, Request) else self._read(item)
                hold_ms = self._settlement.held_ms(request.principal, request.route, request.now_ms)
                if not hold_ms and request.now_ms < self._settlement.topic_holds_end_ms:
                    handler = request.route.handler
                    if handler is not None:
                        hold_ms = handler.held_ms(self.session, request)
                if hold_ms:  # another connection crossed its principal's or a topic's quota
                    self._mute(hold_ms)
                    break
                upstream_frame = self._on_request(request)
                if upstream_frame is not None:
                    forward.append(upstream_frame)
                elif self._deferred is request:  # handled again, first, once answered
                    items = [*items[:index], request, *items[index + 1 :]]
                    break
                index += 1
        except ProtocolError as exc:
            self._refuse(exc)
            return
        except (struct.error, IndexError, ValueError) as exc:
            # a reader that missed a bounds check: still one connection, never the proxy
            self._refuse(ProtocolError(f"malformed request: {exc!r}"))
            return
        finally:
            self._forward = None
        if forward and self._upstream is not None:
            self._upstream.writelines(forward)
        if index < len(items):
            self._backlog.extend(items[index:])
            self.pause_reading(Pause.BACKLOG)

    def _read(self, frame: bytes) -> Request:
        """A request as its handler sees it: the header parsed, the principal resolved and
        the clock read, once."""
        header = parse_request_header(frame)
        now_ns = self._clock.now_ns()
        client_id = header.client_id or ""
        user = self.session.user
        principal = self._principal
        if (
            principal is None
            or principal.generation != self._sensors.generation
            or principal.client_id != client_id
            or principal.user != user
        ):
            principal = self._principal = Principal(user, client_id, self._sensors.generation)
            if self._usage is not None:
                self._count_connection((user, client_id, self._client_ip))
        usage = self._usage
        counters = (
            None
            if usage is None
            else usage.counters(user, client_id, header.api_key, self._client_ip)
        )
        return Request(frame, header, ROUTES[header.api_key], principal, now_ns, counters)

    def _count_connection(self, counted: tuple[str, str, str]) -> None:
        """Usage samples count this connection under the principal of its latest request."""
        assert self._usage is not None
        if counted != self._counted and not self.closed:
            if self._counted is not None:
                self._usage.disconnected(self._counted)
            self._usage.connected(counted)
            self._counted = counted

    def _again(self, request: Request) -> Request:
        """A deferred request, handled again now that the cluster has answered: from now,
        as the broker handles it, with what the topic cache knows."""
        self._deferred = None
        request.refreshed = True
        request.received_ns = now_ns = self._clock.now_ns()
        request.now_ms = now_ns // 1_000_000
        request.principal = self._sensors.current(request.principal)
        return request

    def drain(self) -> None:
        """Shutdown: read nothing more, and close once every request already sent upstream
        has its response written, so no acknowledged write is lost and no client gets half
        a response. Requests read but not sent are dropped with the connection; the client
        sends them again elsewhere."""
        self._draining = True
        self.pause_reading(Pause.DRAINING)
        if not self._in_flight:
            self.close()

    def _refuse(self, exc: ProtocolError) -> None:
        """Bytes that are not Kafka protocol cost the client its connection, nothing more."""
        log.warning("closing client %s: %s", self.session.peer, exc)
        self.close()

    def begin(self) -> Callable[[], None]:
        """The handlers' Cluster: a deferral also waits for the callback returned."""
        self._asked += 1
        return self._answered

    def _answered(self) -> None:
        self._asked -= 1
        if not self._asked and self._deferred is not None:
            # resumed from the event loop, once the responses that came with the answer
            # have gone to the client
            self._clock.call_later(0, self._end_deferral)

    def ask(
        self, api_key: int, api_version: int, body: bytes, on_answer: Callable[[bytes], object]
    ) -> bool:
        """The handlers' Cluster: a request of the proxy's own on this client's upstream
        connection, in the in-flight queue like the client's, its response consumed."""
        if self.closed or self._upstream is None or not self._authenticated:
            return False
        self._own_correlation_id = correlation_id = self._own_correlation_id % 0x7FFFFFFF + 1
        frame = encode_request(api_key, api_version, correlation_id, OWN_CLIENT_ID, body)
        self._in_flight.append(OwnRequest(correlation_id, on_answer))
        self._asked += 1
        if self._forward is not None:  # in order with the requests of the read being handled
            self._forward.append(frame)
        else:
            self._upstream.write(frame)
        return True

    def _on_request(self, request: Request) -> bytes | None:
        """Track one request; the frame to send upstream, or None when answered here."""
        route = request.route
        stage = route.stage
        if stage is Stage.SESSION:
            self._authenticated = True
        elif stage is Stage.AUTHENTICATION:
            self._authenticated = False
        handler = route.handler
        usage = request.usage
        frame = request.frame
        if handler is None:
            if usage is not None:
                usage.requests += 1
                usage.bytes_in += len(frame)
            return self._in_flight_frame(request, frame)
        outcome = handler.on_request(self.session, request)
        if outcome.__class__ is Defer:
            if not request.refreshed and self._asked:
                self._deferred = request
                self.pause_reading(Pause.DEFERRED)
                return None
            outcome = Forward(frame)  # nothing was asked: there is nothing to wait for
        if usage is not None:
            usage.requests += 1
            usage.bytes_in += len(frame)
        if outcome.__class__ is Forward:
            assert isinstance(outcome, Forward)
            if outcome.expects_response:
                if outcome.stops_reading:
                    # Kafka reads nothing more from a connection until its response has gone
                    request.stops_reading = True
                    self.pause_reading(Pause.UNTIL_RESPONSE)
                if outcome.waits:
                    request.waits = True
                return self._in_flight_frame(request, outcome.frame)
            self._settle_now(request)
            return outcome.frame
        self._settle_now(request)
        if isinstance(outcome, Answer):
            if usage is not None:
                usage.answered_here(len(outcome.response))
            request.local_response = outcome.response
            self._answer_locally(request)
            if len(self._in_flight) >= MAX_IN_FLIGHT:  # answers waiting behind a response
                self.pause_reading(Pause.IN_FLIGHT)
        return None  # Drop

    def _in_flight_frame(self, request: Request, frame: bytes) -> bytes:
        self._in_flight.append(request)
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            self.pause_reading(Pause.IN_FLIGHT)
        return frame

    def _settle_now(self, request: Request) -> None:
        """A request no broker response will settle: its throttle applies as a mute at once."""
        if request.verdict is None:
            return
        throttle = self._settlement.settle_now(request, request.now_ms)
        if request.usage is not None:
            request.usage.throttled(throttle)
        if throttle:
            self._mute(throttle)

    def _end_deferral(self) -> None:
        self.resume_reading(Pause.DEFERRED)

    def _answer_locally(self, request: Request) -> None:
        if self._client_busy:
            # a client not reading its responses would have the proxy's answers pile up
            self.pause_reading(Pause.CLIENT_BUSY)
        self._in_flight.append(request)
        ready: list[bytes] = []
        self._take_local_responses(ready)
        if ready:
            self._client.writelines(ready)

    def _take_local_responses(self, out: list[bytes]) -> None:
        """Move the proxy's own answers now at the head of the queue to `out`: every earlier
        response is already there, so they go next, in order."""
        in_flight = self._in_flight
        while in_flight and (local_response := in_flight[0].local_response) is not None:
            in_flight.popleft()
            out.append(local_response)

    def client_write_blocked(self) -> None:
        """The client reads slower than its responses come: stop reading upstream, so the
        broker's responses wait in socket buffers, not here (see _answer_locally for the
        proxy's own answers)."""
        self._client_busy = True
        if self._upstream is not None:
            self._upstream.pause_reading()

    def client_write_unblocked(self) -> None:
        self._client_busy = False
        if self._upstream is not None and not self.closed:
            self._upstream.resume_reading()
        self.resume_reading(Pause.CLIENT_BUSY)

    def pause_reading(self, reason: Pause) -> None:
        if reason not in self._read_pauses:
            self._client.pause_reading()
        self._read_pauses.add(reason)

    def resume_reading(self, reason: Pause) -> None:
        if self.closed:
            return
        pauses = self._read_pauses
        pauses.discard(reason)
        if self._backlog and pauses == {Pause.BACKLOG}:
            pauses.clear()
            items = list(self._backlog)
            self._backlog.clear()
            self._handle_requests(items)
        if not pauses:
            self._client.resume_reading()

    def _wait_for_memory(self) -> None:
        self.pause_reading(Pause.MEMORY)

    def _granted(self) -> None:
        self.resume_reading(Pause.MEMORY)

    def _mute(self, throttle_ms: int) -> None:
        """Stop reading this client until the throttle has passed (Kafka mutes the channel).

        The socket's receive buffer then fills and TCP flow control holds the client, so a
        client that ignores throttle_time_ms is slowed without the proxy buffering for it.
        """
        if self.closed:
            return
        now = self._clock.now_ns()
        delay = throttle_ms * 1_000_000
        if now + delay <= self._muted_until_ns:
            return
        self._muted_until_ns = now + delay
        if self._unmute is not None:
            self._unmute.cancel()
        self.pause_reading(Pause.THROTTLED)
        self._unmute = self._clock.call_later(delay, self._end_mute)

    def _end_mute(self) -> None:
        self._unmute = None
        self.resume_reading(Pause.THROTTLED)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._counted is not None:
            assert self._usage is not None
            self._usage.disconnected(self._counted)
            self._counted = None
        self._backlog.clear()
        if self._budget is not None:
            self._budget.close()
        if self._unmute is not None:
            self._unmute.cancel()
        self._client.close()
        if self._upstream is not None:
            self._upstream.close()

    # upstream side -------------------------------------------------------------------------

    def responses_received(self, data: bytes) -> None:
        self.activity += 1
        self._throttle_ms = 0
        out: list[bytes] = []
        now_ns = self._clock.now_ns()
        try:
            frames = self._responses.feed(data)
            self._share_ns = self._shared_round_trip(now_ns, len(frames))
            for frame in frames:
                response = self._on_response(frame, now_ns)
                if response is not None:
                    out.append(response)
                self._take_local_responses(out)
        except ProtocolError as exc:
            log.warning("closing client %s: upstream response unusable: %s", self.session.peer, exc)
            self.close()
            return
        self._client.writelines(out)
        if self._draining and not self._in_flight:
            self.close()
            return
        if self._throttle_ms:
            self._mute(self._throttle_ms)
        pauses = self._read_pauses
        if Pause.UNTIL_RESPONSE in pauses and not any(
            entry.stops_reading for entry in self._in_flight
        ):
            self.resume_reading(Pause.UNTIL_RESPONSE)
        if Pause.IN_FLIGHT in pauses and len(self._in_flight) < MAX_IN_FLIGHT:
            self.resume_reading(Pause.IN_FLIGHT)

    def _on_response(self, frame: bytes, now_ns: int) -> bytes | None:
        if not self._in_flight:
            raise ProtocolError("response without an outstanding request")
        entry = self._in_flight.popleft()
        correlation_id = response_correlation_id(frame)
        if entry.__class__ is OwnRequest:
            assert isinstance(entry, OwnRequest)
            self._check_correlation(correlation_id, entry.correlation_id)
            self._last_answered_ns = now_ns  # the broker was busy with it: see _request_time_ns
            entry.on_answer(frame)
            self._answered()
            return None
        assert isinstance(entry, Request)
        request = entry
        self._check_correlation(correlation_id, request.header.correlation_id)
        now_ms = request.now_ms = now_ns // 1_000_000
        size = len(request.frame) + len(frame)
        handler = request.route.handler
        if handler is not None:
            frame = handler.on_response(self.session, frame, request)
        request_time_ns = self._request_time_ns(request, size, now_ns)
        throttle = self._settlement.settle(request, request_time_ns, now_ms)
        if throttle:
            header = request.header
            frame = with_throttle_time(frame, header.api_key, header.api_version, throttle)
            self._throttle_ms = max(self._throttle_ms, throttle)
        usage = request.usage
        if usage is not None:
            if usage.retired:
                assert self._usage is not None
                usage = self._usage.current(usage)
            usage.answered(len(frame), request_time_ns, throttle)
        return frame

    @staticmethod
    def _check_correlation(got: int, expected: int) -> None:
        if got != expected:
            raise ProtocolError(f"response correlation id {got}, expected {expected}")

    def _request_time_ns(self, request: Request, size: int, now: int) -> int:
        """The thread time this request is charged (quotas/thread_time.py), from its round
        trip without the time it queued behind this connection's earlier requests (a broker
        handles one request of a connection at a time, so a pipelined request starts when
        the previous response has come back)."""
        started = max(request.received_ns, self._last_answered_ns)
        self._last_answered_ns = now
        share = self._share_ns
        round_trip = share if share >= 0 else max(now - started, 0)
        return self._costs.charge(
            request.header.api_key,
            size,
            round_trip,
            request.waits,
            request.route.bound,
        )

    def _shared_round_trip(self, now: int, answered: int) -> int:
        """The round trip of each of `answered` responses read at once, -1 for one alone.

        A broker answered them one after another within the round trip of the first: each
        is given an equal share of it. Otherwise the first would carry the time of all and
        the others none, and a pipelining client's round trips, mostly 0, would teach the
        estimate that its requests cost nothing."""
        if answered < 2 or not self._in_flight:
            return -1
        first = self._in_flight[0]
        received = first.received_ns if isinstance(first, Request) else 0
        return max(now - max(received, self._last_answered_ns), 0) // answered

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            log.info("closing client %s: upstream connection lost (%s)", self.session.peer, exc)
        self.close()
