"""One client connection and its upstream connection, without I/O: the per-frame hot path.

Bytes and the clock go in (requests_received, responses_received, timers on the Clock); what
comes out goes through two peers (the client side and the upstream side), each only written
to, paused, resumed and closed. proxy/connection.py connects it to asyncio's transports; the
unit tests and the fidelity simulation drive it with recording peers on a virtual clock.
"""

from __future__ import annotations

import logging
import struct
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from enum import Enum
from typing import Protocol

from protocol.apis import (
    API_VERSIONS,
    DESCRIBE_CONFIGS,
    METADATA,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from protocol.errors import ProtocolError
from protocol.frames import FrameSplitter
from protocol.headers import (
    RequestHeader,
    encode_request,
    parse_request_header,
    response_correlation_id,
)
from protocol.metadata import OWN_METADATA_VERSION, metadata_request_body
from protocol.mutations import default_partitions, describe_default_partitions_body
from protocol.rewrite import Advertise
from protocol.throttle import with_throttle_time
from proxy.clock import Clock, Timer
from proxy.enforcement import Enforcer
from proxy.handlers.base import Answer, Defer, Drop, Exchange, Forward, Request, Session
from proxy.handlers.metadata import read_metadata
from proxy.handlers.registry import HANDLERS
from proxy.memory_pool import MemoryPool
from proxy.topics import TopicCache
from proxy.usage import UsageRecorder

log = logging.getLogger(__name__)


#: the client-id of the proxy's own requests, as a broker's request log shows it
OWN_CLIENT_ID = "kafka-quota-proxy"
#: the proxy's own requests are numbered from here, apart from what clients use in practice
_OWN_CORRELATION_IDS = 0x7F000000
_AUTHENTICATION = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})


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
#: with 64 a raw pipelining client got 1.15 x its request_percentage (tests/fidelity.py).
MAX_IN_FLIGHT = 5
#: the most one read of a client takes (asyncio's and uvloop's own read size)
READ_BYTES = 256 * 1024
#: the most one read takes at a frame boundary while the memory pool is short (read_limit)
PRESSURE_READ_BYTES = 64 * 1024


class Pause(Enum):
    """Why the client is not being read; reading resumes when no reason is left."""

    #: the upstream connection is not up yet
    CONNECTING = "connecting"
    #: requests already read wait for an earlier pause to end
    BACKLOG = "backlog"
    #: a held request's response has not been written yet (Forward.held)
    HELD = "held"
    #: a throttle is being served (KIP-219's mute)
    THROTTLED = "throttled"
    #: MAX_IN_FLIGHT requests await their responses
    IN_FLIGHT = "in-flight"
    #: the upstream connection's write buffer is full
    UPSTREAM_BUSY = "upstream-busy"
    #: a handler waits for the cluster to answer about topics (Defer)
    DEFERRED = "deferred"
    #: the client does not read its responses, and the proxy would add answers of its own
    CLIENT_BUSY = "client-busy"
    #: the memory pool granted nothing for the frame being read (queued.max.request.bytes)
    MEMORY = "memory"
    #: the proxy is shutting down: requests already sent upstream are answered, no more read
    DRAINING = "draining"


class ConnectionCore:
    def __init__(
        self,
        client: Peer,
        enforcer: Enforcer,
        advertise: Advertise,
        topics: TopicCache,
        max_frame_bytes: int,
        clock: Clock,
        peer: str = "?",
        usage: UsageRecorder | None = None,
        pool: MemoryPool | None = None,
        connect_upstream: Callable[[], object] | None = None,
    ) -> None:
        self._client = client
        #: queued.max.request.bytes, shared by every connection
        self._pool = pool
        #: what the pool granted the frame being read (0: nothing granted, or no frame)
        self._granted = 0
        #: opens the upstream connection; called at the client's first bytes, so a client
        #: that connects and sends nothing costs the cluster no connection
        self._connect_upstream = connect_upstream
        #: bumped by every read from either side: the idle check compares it over time
        self.activity = 0
        #: closing once every request sent upstream has been answered (shutdown)
        self._draining = False
        #: where this connection's requests are counted for usage samples (None: not counted)
        self._usage = usage
        self._upstream: Peer | None = None
        self._enforcer = enforcer
        self._clock = clock
        self.session = Session(enforcer, advertise, topics, peer)
        #: the clock's time (ns) until which reading stays paused for a throttle (KIP-219)
        self._muted_until_ns = 0
        self._unmute: Timer | None = None
        self._requests = FrameSplitter(max_frame_bytes)
        # upstream responses are trusted; Fetch responses may legitimately be large
        self._responses = FrameSplitter()
        self._in_flight: deque[Exchange] = deque()
        self._read_pauses: set[Pause] = set()
        #: requests read but not yet handled because reading is paused: before the upstream
        #: connection is up (uvloop reads accepted sockets even while paused), while muted,
        #: or at the in-flight limit; at most one socket read's worth
        self._backlog: deque[bytes] = deque()
        self.closed = False
        #: the largest throttle among the responses being written now
        self._throttle_ms = 0
        #: when the last upstream response arrived (clock ns), for request time
        self._last_answered_ns = 0
        #: requests bound upstream while a read is being handled, written together after it
        self._forward: list[bytes] | None = None
        #: whether the proxy may send requests of its own on the upstream connection: once
        #: the client has sent a request other than ApiVersions and SASL, and not while it
        #: authenticates again (a broker takes nothing else in the middle of an exchange)
        self._authenticated = False
        self._own_correlation_id = _OWN_CORRELATION_IDS
        #: the request a handler deferred until the cluster has answered about its topics
        self._deferred: bytes | None = None
        #: the client's write buffer is over its high-water mark
        self._client_busy = False

    def upstream_connected(self, upstream: Peer) -> None:
        self._upstream = upstream
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
        if self._pool is not None and (self._granted or requests.buffered):
            self._account_memory(bool(frames))
        if self._backlog:
            self._backlog.extend(frames)
        else:
            self._handle_requests(frames)

    def _handle_requests(self, frames: Sequence[bytes]) -> None:
        """Handle requests in order until something pauses reading; keep the rest for later,
        so a pause (a mute, the in-flight limit) holds even the requests of the same read."""
        forward = self._forward = []
        handled = 0
        try:
            for frame in frames:
                if self._read_pauses:
                    break
                header = parse_request_header(frame)
                principal = self.session.principal(header.client_id or "")
                now_ms = self._clock.now_ns() // 1_000_000
                held = self._enforcer.held_ms(principal, header.api_key, now_ms)
                if held:  # another connection of the principal crossed its quota
                    self._mute(held)
                    break
                handled += 1
                upstream_frame = self._on_request(frame, header)
                if upstream_frame is not None:
                    forward.append(upstream_frame)
                elif self._deferred is frame:
                    handled -= 1  # handled again, first, when the topics are known
                    break
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
        if handled < len(frames):
            self._backlog.extend(frames[handled:])
            self.pause_reading(Pause.BACKLOG)

    def read_limit(self) -> int:
        """How many bytes the next read of the client may take.

        While the pool could not grant a frame of the largest size, a read takes at most
        PRESSURE_READ_BYTES at a frame boundary, then no more than the frame it has memory
        for: a connection waiting for memory holds at most that much, not a whole socket
        read of a frame it has no memory for, while requests that fit in one such read still
        arrive whole and need no memory (Kafka's NetworkReceive reads only the size prefix,
        so when its pool is empty every client waits).
        """
        pool = self._pool
        requests = self._requests
        if pool is None or pool.available >= requests.max_frame_bytes:
            return READ_BYTES
        size = requests.incomplete_frame_bytes
        if not size:
            return PRESSURE_READ_BYTES
        return min(size - requests.buffered, READ_BYTES)

    def _account_memory(self, completed: bool) -> None:
        """Return the grant of a frame that completed; ask one for a frame left waiting for
        bytes, and stop reading if the pool has none (Kafka's KafkaChannel.read mutes)."""
        pool = self._pool
        assert pool is not None
        if completed and self._granted:  # frames complete in order: the granted one did
            granted, self._granted = self._granted, 0
            pool.release(granted)
        if not self._granted:
            size = self._requests.incomplete_frame_bytes
            if size and not pool.try_allocate(size):
                if Pause.MEMORY not in self._read_pauses:
                    self.pause_reading(Pause.MEMORY)
                    pool.wait(self, self._retry_memory)
            elif size:
                self._granted = size

    def _retry_memory(self) -> None:
        pool = self._pool
        assert pool is not None
        if self.closed:
            return
        size = self._requests.incomplete_frame_bytes
        if size and not pool.try_allocate(size):
            pool.wait(self, self._retry_memory)
            return
        self._granted = size
        # resumed from the event loop, not inside the connection whose release woke it
        self._clock.call_later(0, self._end_memory_wait)

    def _end_memory_wait(self) -> None:
        self.resume_reading(Pause.MEMORY)

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

    def send_own_request(
        self, api_key: int, api_version: int, body: bytes, on_response: Callable[[bytes], None]
    ) -> bool:
        """Send a request of the proxy's own on this client's upstream connection; its
        response goes to `on_response` and never to the client. Kafka answers a connection's
        requests in order, so it takes its place in the in-flight queue like the client's.
        On a SASL cluster the client's authenticated connection is the only one the proxy
        has. False when the connection cannot take one now (not yet authenticated, closed).
        """
        if self.closed or self._upstream is None or not self._authenticated:
            return False
        self._own_correlation_id = self._own_correlation_id % 0x7FFFFFFF + 1
        correlation_id = self._own_correlation_id
        frame = encode_request(api_key, api_version, correlation_id, OWN_CLIENT_ID, body)
        self._in_flight.append(
            Exchange(
                correlation_id,
                api_key,
                api_version,
                received_ns=self._clock.now_ns(),
                on_own_response=on_response,
            )
        )
        if self._forward is not None:  # in order with the requests of the read being handled
            self._forward.append(frame)
        else:
            self._upstream.write(frame)
        return True

    def request_topics(
        self,
        names: Sequence[str],
        then: Callable[[], object] | None = None,
        topic_ids: Sequence[uuid.UUID] = (),
    ) -> bool:
        """Refresh the topic cache for these topics with a Metadata request of the proxy's;
        `then` runs once the answer is in the cache, after the responses that arrived with it
        have gone to the client. A broker given topic ids answers for those alone, so names
        and ids are asked in two requests, answered in order."""
        if names and topic_ids:
            return self.request_topics(names) and self.request_topics((), then, topic_ids)

        def learn(frame: bytes) -> None:
            read_metadata(self.session, frame, OWN_METADATA_VERSION)
            if then is not None:
                self._clock.call_later(0, then)

        body = metadata_request_body(names, topic_ids=topic_ids)
        return self.send_own_request(METADATA, OWN_METADATA_VERSION, body, learn)

    def request_default_partitions(self, then: Callable[[], object]) -> bool:
        """Ask the brokers for num.partitions; a broker describes only itself, so every
        known broker is named. False when no broker is known yet or nothing can be sent."""
        topics = self.session.topics
        if not topics.broker_ids:
            return False
        version, body = describe_default_partitions_body(topics.broker_ids)

        def learn(frame: bytes) -> None:
            try:
                count = default_partitions(frame, version)
            except ProtocolError as exc:
                log.warning("num.partitions unreadable in the cluster's answer: %s", exc)
                count = None
            topics.learn_default_partitions(count, self._clock.now_ns() // 1_000_000)
            self._clock.call_later(0, then)

        return self.send_own_request(DESCRIBE_CONFIGS, version, body, learn)

    def inquire(self, defer: Defer, then: Callable[[], object]) -> bool:
        """Ask what a deferring handler needs; `then` runs once every answer is in. The
        topics (and the brokers, which every Metadata answer names) come first."""
        if not defer.default_partitions:
            return self.request_topics(defer.topics, then, defer.topic_ids)
        if not (defer.topics or defer.topic_ids) and self.session.topics.broker_ids:
            return self.request_default_partitions(then)

        def after_metadata() -> None:
            if not self.request_default_partitions(then):
                then()

        return self.request_topics(defer.topics, after_metadata, defer.topic_ids)

    def _on_request(self, frame: bytes, header: RequestHeader) -> bytes | None:
        """Track one request; the frame to send upstream, or None when answered here."""
        if header.api_key in _AUTHENTICATION:
            self._authenticated = False
        elif header.api_key != API_VERSIONS:
            self._authenticated = True
        now_ns = self._clock.now_ns()
        client_id = header.client_id or ""
        handler = HANDLERS.get(header.api_key)
        usage = None
        if self._usage is not None:
            usage = self._usage.counters(self.session.user, client_id, header.api_key)
        entry = Exchange(
            header.correlation_id,
            header.api_key,
            header.api_version,
            client_id,
            handler,
            received_ns=now_ns,
            usage=usage,
        )
        size = len(frame)
        if handler is not None:
            refreshed = frame is self._deferred
            self._deferred = None
            request = Request(frame, header, client_id, now_ns // 1_000_000, refreshed, usage)
            outcome = handler.on_request(self.session, request)
            if isinstance(outcome, Defer):
                if not refreshed and self.inquire(outcome, self._end_deferral):
                    self._deferred = frame
                    self.pause_reading(Pause.DEFERRED)
                    return None
                # the cluster cannot be asked on this connection now: go on with the cache
                outcome = handler.on_request(self.session, request._replace(refreshed=True))
                if isinstance(outcome, Defer):
                    outcome = Forward(frame)
            if usage is not None:
                usage.requests += 1
                usage.bytes_in += size
                usage.throttled(outcome.mute_ms)
            if outcome.mute_ms:
                self._mute(outcome.mute_ms)
            if isinstance(outcome, Drop):
                return None
            if isinstance(outcome, Answer):
                if usage is not None:
                    usage.bytes_out += len(outcome.response)
                entry.local_response = outcome.response
                self._answer_locally(entry)
                if len(self._in_flight) >= MAX_IN_FLIGHT:  # answers waiting behind a response
                    self.pause_reading(Pause.IN_FLIGHT)
                return None
            frame = outcome.frame
            if not outcome.expects_response:
                return frame
            entry.state, entry.wait_ns = outcome.state, outcome.wait_ns
            if outcome.held:
                # Kafka reads nothing more from a connection until its response has gone out
                entry.held = True
                self.pause_reading(Pause.HELD)
        elif usage is not None:
            usage.requests += 1
            usage.bytes_in += size
        self._in_flight.append(entry)
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            self.pause_reading(Pause.IN_FLIGHT)
        return frame

    def _end_deferral(self) -> None:
        self.resume_reading(Pause.DEFERRED)

    def _answer_locally(self, entry: Exchange) -> None:
        if self._client_busy:
            # a client not reading its responses would have the proxy's answers pile up
            self.pause_reading(Pause.CLIENT_BUSY)
        self._in_flight.append(entry)
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
            frames = list(self._backlog)
            self._backlog.clear()
            self._handle_requests(frames)
        if not pauses:
            self._client.resume_reading()

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
        self._backlog.clear()
        if self._pool is not None:
            self._pool.cancel(self)
            granted, self._granted = self._granted, 0
            if granted:
                self._pool.release(granted)
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
            for frame in self._responses.feed(data):
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
        if Pause.HELD in pauses and not any(entry.held for entry in self._in_flight):
            self.resume_reading(Pause.HELD)
        if Pause.IN_FLIGHT in pauses and len(self._in_flight) < MAX_IN_FLIGHT:
            self.resume_reading(Pause.IN_FLIGHT)

    def _on_response(self, frame: bytes, now_ns: int) -> bytes | None:
        if not self._in_flight:
            raise ProtocolError("response without an outstanding request")
        entry = self._in_flight.popleft()
        correlation_id = response_correlation_id(frame)
        if correlation_id != entry.correlation_id:
            raise ProtocolError(
                f"response correlation id {correlation_id}, expected {entry.correlation_id}"
            )
        if entry.on_own_response is not None:
            self._last_answered_ns = now_ns  # the broker was busy with it: see _request_time_ns
            entry.on_own_response(frame)
            return None
        now_ms = now_ns // 1_000_000
        bandwidth = None
        if entry.handler is not None:
            frame, bandwidth = entry.handler.on_response(self.session, frame, entry, now_ms)
        request_time_ns = self._request_time_ns(entry, now_ns)
        throttle = self._enforcer.settle_response(
            self.session.principal(entry.client_id),
            entry.api_key,
            bandwidth,
            request_time_ns,
            now_ms,
        )
        if throttle:
            frame = with_throttle_time(frame, entry.api_key, entry.api_version, throttle)
            self._throttle_ms = max(self._throttle_ms, throttle)
        usage = entry.usage
        if usage is not None:
            if usage.retired:
                assert self._usage is not None
                usage = self._usage.current(usage)
            usage.bytes_out += len(frame)
            usage.request_time_ns += request_time_ns
            usage.throttled(throttle)
        return frame

    def _request_time_ns(self, entry: Exchange, now: int) -> int:
        """The time this request cost, without the time it queued behind this connection's
        earlier requests (a broker handles one request of a connection at a time, so a
        pipelined request starts when the previous response has come back) and without a
        long-poll Fetch's allowed wait."""
        started = max(entry.received_ns, self._last_answered_ns)
        self._last_answered_ns = now
        return max(now - started - entry.wait_ns, 0)

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            log.info("closing client %s: upstream connection lost (%s)", self.session.peer, exc)
        self.close()
