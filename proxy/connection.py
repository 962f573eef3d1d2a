"""One client connection and its upstream connection: the proxy's per-frame hot path.

asyncio Protocols rather than streams: reading is paused and resumed directly on the
transports (for back-pressure now, for muting throttled clients later), and frames are
forwarded from the data_received callback without a task switch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from protocol.api_versions import cap_api_versions, unsupported_version_response
from protocol.apis import (
    API_VERSIONS,
    FETCH,
    MAX_DECODABLE_VERSION,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from protocol.errors import ProtocolError
from protocol.fetch import empty_fetch_response, prepare_fetch
from protocol.frames import FrameSplitter
from protocol.headers import parse_request_header, response_correlation_id
from protocol.produce import produce_acks
from protocol.rewrite import Advertise, carries_addresses, rewrite_addresses
from protocol.sasl import SaslExchange
from protocol.throttle import with_throttle_time
from proxy.clock import Clock, Timer
from proxy.enforcement import Decision, Enforcer

if TYPE_CHECKING:
    from asyncio import BaseTransport, Transport

log = logging.getLogger(__name__)

#: Upstream responses are trusted; Fetch responses may legitimately be large.
_MAX_RESPONSE_BYTES = 2**31 - 1
_WRITE_HIGH_WATER = 4 * 1024 * 1024
#: requests of one connection awaiting responses before the proxy stops reading it. A broker
#: handles one request of a connection at a time; clients pipeline a few (Java producers 5),
#: and a client that would pipeline thousands past a throttle is held here instead. Every
#: request in flight is charged its request time when it is answered, even after the first
#: answer throttled the connection, and Kafka caps a request-time throttle at one window:
#: with 64 a raw pipelining client got 1.15 x its request_percentage (tests/fidelity.py).
MAX_IN_FLIGHT = 5


@dataclass(slots=True)
class InFlight:
    """A request awaiting its response; Kafka answers one connection's requests in order."""

    correlation_id: int
    api_key: int
    api_version: int
    client_id: str = ""
    #: the Produce byte-rate decision taken when the request was read
    produce: Decision | None = None
    #: when the request was read, on the connection's clock
    received_ns: int = 0
    #: how long a long-poll Fetch may wait at the broker, not charged as request time
    wait_ns: int = 0
    #: reading stays paused until this request's response is written: a throttled Produce,
    #: or a Fetch whose response the consumer quota has yet to charge
    held: bool = False
    #: a response the proxy produced itself, sent when every earlier response has gone out
    local_response: bytes | None = None


class ClientConnection(asyncio.Protocol):
    def __init__(
        self,
        upstream_targets: Callable[[], Sequence[tuple[str, int]]],
        advertise: Advertise,
        max_frame_bytes: int,
        connect_timeout_s: float,
        on_close: Callable[[ClientConnection], None],
        enforcer: Enforcer,
        clock: Clock,
    ) -> None:
        self._upstream_targets = upstream_targets
        self._enforcer = enforcer
        self._clock = clock
        #: the principal's user name; PLAINTEXT connections are User:ANONYMOUS in Kafka, and
        #: a SASL exchange replaces it only once the broker reports success
        self.user = "ANONYMOUS"
        self._sasl = SaslExchange()
        #: the clock's time (ns) until which reading stays paused for a throttle (KIP-219)
        self._muted_until_ns = 0
        self._unmute: Timer | None = None
        self._advertise = advertise
        self._connect_timeout_s = connect_timeout_s
        self._on_close = on_close
        self._requests = FrameSplitter(max_frame_bytes)
        self._responses = FrameSplitter(_MAX_RESPONSE_BYTES)
        self._in_flight: deque[InFlight] = deque()
        self._read_pauses: set[str] = set()
        #: requests read but not yet handled because reading is paused: before the upstream
        #: connection is up (uvloop reads accepted sockets even while paused), while muted,
        #: or at the in-flight limit; at most one socket read's worth
        self._backlog: deque[bytes] = deque()
        self.transport: Transport | None = None
        self.upstream: Transport | None = None
        self.peer = "?"
        self._closed = False
        #: the largest throttle among the responses being written now
        self._throttle_ms = 0
        #: when the last upstream response arrived (clock ns), for request time
        self._last_answered_ns = 0

    # client side ---------------------------------------------------------------------------

    def connection_made(self, transport: BaseTransport) -> None:
        self.transport = cast("Transport", transport)  # uvloop's are not asyncio subclasses
        peer = self.transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        self.pause_reading("connecting")
        asyncio.get_running_loop().create_task(self._connect_upstream())

    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        errors = []
        for host, port in self._upstream_targets():
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(lambda: _UpstreamProtocol(self), host, port),
                    self._connect_timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                errors.append(f"{host}:{port}: {exc or type(exc).__name__}")
                continue
            if self._closed:
                transport.close()
                return
            log.debug("client %s -> upstream %s:%d", self.peer, host, port)
            self.upstream = transport
            self.upstream.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
            self.resume_reading("connecting")
            return
        log.warning(
            "closing client %s: no upstream broker reachable (%s)",
            self.peer,
            "; ".join(errors) or "no known address",
        )
        self.close()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._requests.feed(data)
        except ProtocolError as exc:
            self._refuse(exc)
            return
        if self._backlog:
            self._backlog.extend(frames)
        else:
            self._handle_requests(frames)

    def _handle_requests(self, frames: Sequence[bytes]) -> None:
        """Handle requests in order until something pauses reading; keep the rest for later,
        so a pause (a mute, the in-flight limit) holds even the requests of the same read."""
        forward = []
        handled = 0
        try:
            for frame in frames:
                if self._read_pauses:
                    break
                handled += 1
                upstream_frame = self._on_request(frame)
                if upstream_frame is not None:
                    forward.append(upstream_frame)
        except ProtocolError as exc:
            self._refuse(exc)
            return
        if forward and self.upstream is not None:
            self.upstream.writelines(forward)
        if handled < len(frames):
            self._backlog.extend(frames[handled:])
            self.pause_reading("backlog")

    def _refuse(self, exc: ProtocolError) -> None:
        """Bytes that are not Kafka protocol cost the client its connection, nothing more."""
        log.warning("closing client %s: %s", self.peer, exc)
        self.close()

    def _on_request(self, frame: bytes) -> bytes | None:
        """Track one request; the frame to send upstream, or None when answered here."""
        header = parse_request_header(frame)
        api_key, api_version = header.api_key, header.api_version
        if api_key == API_VERSIONS and api_version > MAX_DECODABLE_VERSION[API_VERSIONS]:
            self._answer_locally(
                InFlight(
                    header.correlation_id,
                    api_key,
                    api_version,
                    local_response=unsupported_version_response(header.correlation_id),
                )
            )
            return None
        client_id = header.client_id or ""
        produce = None
        wait_ms = 0
        held = False
        now_ns = self._clock.now_ns()
        if api_key == PRODUCE:
            now = now_ns // 1_000_000
            produce = self._enforcer.on_produce(self.user, client_id, len(frame) - 4, now)
            if produce_acks(frame, header) == 0:
                throttle = produce and self._enforcer.settle_without_response(produce, now)
                if throttle:
                    self._mute(throttle)
                return frame
        elif api_key == FETCH:
            throttle, max_bytes = self._enforcer.before_fetch(
                self.user, client_id, now_ns // 1_000_000
            )
            if throttle:
                self._answer_locally(
                    InFlight(
                        header.correlation_id,
                        api_key,
                        api_version,
                        local_response=empty_fetch_response(
                            header.correlation_id, api_version, throttle
                        ),
                    )
                )
                self._mute(throttle)
                return None
            frame, wait_ms = prepare_fetch(frame, header, max_bytes)
            # a fetch under a consumer quota is charged when its response comes back, and a
            # broker reads nothing more from a connection while it handles a request: held so,
            # a client pipelining fetches cannot have several cross the quota at once
            held = max_bytes is not None
        elif api_key == SASL_HANDSHAKE:
            self._sasl.on_handshake_request(frame, header)
        elif api_key == SASL_AUTHENTICATE:
            self._sasl.on_authenticate_request(frame, header)
        entry = InFlight(
            header.correlation_id,
            api_key,
            api_version,
            client_id,
            produce,
            now_ns,
            wait_ms * 1_000_000,
        )
        if held or (produce is not None and self._enforcer.holds(produce)):
            # Kafka reads nothing more from a connection until its throttled response has
            # gone out and the throttle has passed
            entry.held = True
            self.pause_reading("held")
        self._in_flight.append(entry)
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            self.pause_reading("in-flight")
        return frame

    def _answer_locally(self, entry: InFlight) -> None:
        self._in_flight.append(entry)
        ready: list[bytes] = []
        self._take_local_responses(ready)
        if ready and self.transport is not None:
            self.transport.writelines(ready)

    def _take_local_responses(self, out: list[bytes]) -> None:
        """Move the proxy's own answers now at the head of the queue to `out`: every earlier
        response is already there, so they go next, in order."""
        in_flight = self._in_flight
        while in_flight and (local_response := in_flight[0].local_response) is not None:
            in_flight.popleft()
            out.append(local_response)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def pause_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and not self._closed:
            self.upstream.resume_reading()

    def pause_reading(self, reason: str) -> None:
        if reason not in self._read_pauses and self.transport is not None:
            self.transport.pause_reading()
        self._read_pauses.add(reason)

    def resume_reading(self, reason: str) -> None:
        if self._closed:
            return
        pauses = self._read_pauses
        pauses.discard(reason)
        if self._backlog and pauses == {"backlog"}:
            pauses.clear()
            frames = list(self._backlog)
            self._backlog.clear()
            self._handle_requests(frames)
        if not pauses and self.transport is not None:
            self.transport.resume_reading()

    def _mute(self, throttle_ms: int) -> None:
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
        self.pause_reading("throttled")
        self._unmute = self._clock.call_later(delay, self._end_mute)

    def _end_mute(self) -> None:
        self._unmute = None
        self.resume_reading("throttled")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._backlog.clear()
        if self._unmute is not None:
            self._unmute.cancel()
        if self.transport is not None:
            self.transport.close()
        if self.upstream is not None:
            self.upstream.close()
        self._on_close(self)

    # upstream side -------------------------------------------------------------------------

    def upstream_data_received(self, data: bytes) -> None:
        self._throttle_ms = 0
        out: list[bytes] = []
        now_ns = self._clock.now_ns()
        try:
            for frame in self._responses.feed(data):
                out.append(self._on_response(frame, now_ns))
                self._take_local_responses(out)
        except ProtocolError as exc:
            log.warning("closing client %s: upstream response unusable: %s", self.peer, exc)
            self.close()
            return
        if self.transport is not None:
            self.transport.writelines(out)
        if self._throttle_ms:
            self._mute(self._throttle_ms)
        pauses = self._read_pauses
        if "held" in pauses and not any(entry.held for entry in self._in_flight):
            self.resume_reading("held")
        if "in-flight" in pauses and len(self._in_flight) < MAX_IN_FLIGHT:
            self.resume_reading("in-flight")

    def _on_response(self, frame: bytes, now_ns: int) -> bytes:
        if not self._in_flight:
            raise ProtocolError("response without an outstanding request")
        entry = self._in_flight.popleft()
        correlation_id = response_correlation_id(frame)
        if correlation_id != entry.correlation_id:
            raise ProtocolError(
                f"response correlation id {correlation_id}, expected {entry.correlation_id}"
            )
        api_key, api_version = entry.api_key, entry.api_version
        if api_key == API_VERSIONS:
            frame = cap_api_versions(frame, api_version) or frame
        elif carries_addresses(api_key, api_version):
            frame = rewrite_addresses(frame, api_key, api_version, self._advertise) or frame
        elif api_key == SASL_HANDSHAKE:
            self._sasl.on_handshake_response(frame, api_version)
            if self._sasl.mechanism is not None and not self._sasl.learnable:
                log.warning(
                    "client %s authenticates with %s, whose principal the proxy cannot learn: "
                    "its quotas are those of User:%s",
                    self.peer,
                    self._sasl.mechanism,
                    self.user,
                )
        elif api_key == SASL_AUTHENTICATE:
            user = self._sasl.on_authenticate_response(frame, api_version)
            if user is not None:
                log.info("client %s authenticated as User:%s", self.peer, user)
                self.user = user
        throttle = self._enforcer.on_response(
            self.user,
            entry.client_id,
            api_key,
            entry.produce,
            len(frame) - 4,
            self._request_time_ns(entry, now_ns),
            now_ns // 1_000_000,
        )
        if throttle:
            frame = with_throttle_time(frame, api_key, api_version, throttle)
            self._throttle_ms = max(self._throttle_ms, throttle)
        return frame

    def _request_time_ns(self, entry: InFlight, now: int) -> int:
        """The time this request cost, without the time it queued behind this connection's
        earlier requests (a broker handles one request of a connection at a time, so a
        pipelined request starts when the previous response has come back) and without a
        long-poll Fetch's allowed wait."""
        started = max(entry.received_ns, self._last_answered_ns)
        self._last_answered_ns = now
        return max(now - started - entry.wait_ns, 0)

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self._closed:
            log.info("closing client %s: upstream connection lost (%s)", self.peer, exc)
        self.close()


class _UpstreamProtocol(asyncio.Protocol):
    """Delegates to the client connection, which owns all state of the pair."""

    def __init__(self, client: ClientConnection) -> None:
        self._client = client

    def data_received(self, data: bytes) -> None:
        self._client.upstream_data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._client.upstream_lost(exc)

    def pause_writing(self) -> None:
        self._client.pause_reading("upstream-busy")

    def resume_writing(self) -> None:
        self._client.resume_reading("upstream-busy")
