"""One client connection and its upstream connection, without I/O: the per-frame hot path.

Bytes and the clock go in (requests_received, responses_received, timers on the Clock); what
comes out goes through two peers (the client side and the upstream side), each only written
to, paused, resumed and closed. proxy/network/connection.py connects it to asyncio's transports; the
unit tests and the fidelity simulation drive it with recording peers on a virtual clock.

The core knows no API: the registry routes each request to its handler, the handler decides,
and the core carries out the outcome and has the enforcement settle each response's throttle.
What it keeps, each in a room of its own: the order of requests awaiting responses
(in_flight.py), every reason not to read the client (read_gate.py), the round trips that
become request time (round_trips.py), and the upstream connection with the proxy's own
questions on it (upstream_link.py). Their hot data are plain attributes the core reads
directly (the gate's `pauses`, the queue's `entries`): a method call there would cost each
request instructions (bench.core_cost --instructions).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence

from protocol.errors import ProtocolError
from protocol.frames import FrameSplitter
from protocol.throttle import with_throttle_time
from proxy.handlers.base import Answer, Channel, Defer, Forward, Request, Stage
from proxy.runtime.context import ProxyContext
from proxy.runtime.deferral import Deferral
from proxy.runtime.in_flight import InFlight, OwnRequest
from proxy.runtime.peer import Peer
from proxy.runtime.principal_admission import PrincipalAdmission
from proxy.runtime.read_budget import READ_BYTES, ReadBudget
from proxy.runtime.read_gate import Item, Pause, ReadGate
from proxy.runtime.request_reader import RequestReader
from proxy.runtime.round_trips import RoundTrips
from proxy.runtime.upstream_link import UpstreamLink

log = logging.getLogger(__name__)


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
        self._guards = context.quotas.guards
        self._admission = PrincipalAdmission(context.quotas.connections, clock, self)
        self._round_trips = RoundTrips(context.thread_times)
        #: opens the upstream connection at the client's first bytes (none for a silent one)
        self._connect_upstream = connect_upstream
        #: bumped by every read from either side: the idle check compares it over time
        self.activity = 0
        #: closing once every request sent upstream has been answered (shutdown)
        self._draining = False
        self.channel = Channel(context, self, peer, sasl=context.principals.exchange())
        self._reader = RequestReader(self.channel, clock, self._sensors, context.usage)
        self.gate = gate = ReadGate(client, clock, self._handle_requests)
        self._requests = FrameSplitter(context.settings.max_frame_bytes)
        #: queued.max.request.bytes; None: every read takes READ_BYTES
        self._budget = None
        if context.memory_pool is not None:
            self._budget = ReadBudget(
                context.memory_pool, self._requests, clock, gate.wait_for_memory, gate.granted
            )
        self._responses = FrameSplitter()  # upstream's are trusted; a Fetch's may be large
        self._in_flight = InFlight()
        self.closed = False
        #: the largest throttle among the responses being written now
        self._throttle_ms = 0
        self._deferral = Deferral(clock, gate)
        self._upstream = UpstreamLink(self._in_flight, self._deferral)
        #: the handlers' Cluster: a deferral waits for what was begun, and for what was asked
        self.begin = self._deferral.begin
        self.ask = self._upstream.ask

    def upstream_connected(self, upstream: Peer, broker: str = "") -> None:
        self._upstream.peer = upstream
        self._round_trips.connected(broker, self._clock.now_ns())
        self.gate.resume(Pause.CONNECTING)

    # client side ---------------------------------------------------------------------------

    def requests_received(self, data: bytes) -> None:
        self.activity += 1
        gate = self.gate
        if self._upstream.peer is None and Pause.CONNECTING not in gate.pauses:
            gate.pause(Pause.CONNECTING)
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
        if gate.backlog:
            gate.backlog.extend(frames)
        else:
            self._handle_requests(frames)

    def read_limit(self) -> int:
        """How many bytes the next read of the client may take (see ReadBudget)."""
        return READ_BYTES if self._budget is None else self._budget.read_limit()

    def _handle_requests(self, items: Sequence[Item]) -> None:
        """Handle requests in order until something pauses reading; keep the rest for later,
        so a pause (a mute, the in-flight limit) holds even the requests of the same read."""
        upstream = self._upstream
        forward = upstream.batch = []
        pauses = self.gate.pauses
        index = 0
        try:
            while index < len(items):
                if pauses:
                    break
                item = items[index]
                request = (
                    self._deferral.again(item, self._sensors.current)
                    if isinstance(item, Request)
                    else self._reader.read(item)
                )
                hold_ms = self._settlement.held_ms(request, self.channel)
                if hold_ms:  # another connection crossed its principal's or a topic's quota
                    self.gate.mute(hold_ms)
                    break
                upstream_frame = self._on_request(request)
                if upstream_frame is not None:
                    forward.append(upstream_frame)
                elif self._deferral.request is request:  # handled again, first, once answered
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
            upstream.batch = None
        if forward and upstream.peer is not None:
            upstream.peer.writelines(forward)
        if index < len(items):
            self.gate.hold(items[index:])

    def drain(self) -> None:
        """Shutdown: read nothing more; close once every request sent upstream has its
        response written (no acknowledged write lost, no half response). Requests read but
        not sent are dropped with the connection: the client sends them again elsewhere."""
        self._draining = True
        self.gate.pause(Pause.DRAINING)
        if not self._in_flight.entries:
            self.close()

    def _refuse(self, exc: ProtocolError) -> None:
        """Bytes that are not Kafka protocol cost the client its connection, nothing more."""
        log.warning("closing client %s: %s", self.channel.peer, exc)
        self.close()

    def _on_request(self, request: Request) -> bytes | None:
        """Track one request; the frame to send upstream, or None when answered here."""
        route = request.route
        stage = route.stage
        if stage is Stage.SESSION:  # the proxy may ask its own questions from now
            self._upstream.authenticated = True
            if self._admission.waiting and not self._admission.admit(request):
                return None  # refused for its principal's connections: closed
        elif stage is Stage.AUTHENTICATION:
            self._upstream.authenticated = False
        if (route.guard is not None or self._guards.request_ceiling) and not request.refreshed:
            self._guards.charge(request, self.channel.broker)
        handler = route.handler
        usage = request.usage
        frame = request.frame
        if handler is None:
            if usage is not None:
                usage.requests += 1
                usage.bytes_in += len(frame)
            if request.stops_reading:  # over its guard
                self.gate.pause(Pause.UNTIL_RESPONSE)
            if self._in_flight.add(request):
                self.gate.pause(Pause.IN_FLIGHT)
            return frame
        outcome = handler.on_request(self.channel, request)
        if outcome.__class__ is Defer:
            if self._deferral.defer(request):
                return None
            outcome = Forward(frame)  # nothing was asked: there is nothing to wait for
        if usage is not None:
            usage.requests += 1
            usage.bytes_in += len(frame)
        if outcome.__class__ is Forward:
            assert isinstance(outcome, Forward)
            if outcome.expects_response:
                if outcome.stops_reading or request.stops_reading:
                    # Kafka reads nothing more from a connection until its response has gone
                    request.stops_reading = True
                    self.gate.pause(Pause.UNTIL_RESPONSE)
                if outcome.waits:
                    request.waits = True
                if self._in_flight.add(request):
                    self.gate.pause(Pause.IN_FLIGHT)
                return outcome.frame
            self._settle_now(request)
            return outcome.frame
        self._settle_now(request)
        if isinstance(outcome, Answer):
            if usage is not None:
                usage.answered_here(len(outcome.response))
            request.local_response = outcome.response
            self._answer_locally(request)
        return None  # Drop

    def _settle_now(self, request: Request) -> None:
        """A request no broker response will settle: its throttle applies as a mute at once."""
        if request.verdict is None:
            return
        throttle = self._settlement.settle_now(request, request.now_ms)
        if request.usage is not None:
            request.usage.throttled(throttle)
        if throttle:
            self.gate.mute(throttle)

    def _answer_locally(self, request: Request) -> None:
        gate = self.gate
        if gate.client_busy:
            # a client not reading its responses would have the proxy's answers pile up
            gate.pause(Pause.CLIENT_BUSY)
        in_flight = self._in_flight
        in_flight.add(request)
        ready: list[bytes] = []
        in_flight.take_local_responses(ready)
        if ready:
            self._client.writelines(ready)
        if in_flight.full:  # answers waiting behind a response
            gate.pause(Pause.IN_FLIGHT)

    def client_write_blocked(self) -> None:
        """See _answer_locally for the proxy's own answers to a client that does not read."""
        self.gate.client_busy = True
        self._upstream.pause_reading()

    def client_write_unblocked(self) -> None:
        self.gate.client_busy = False
        self._upstream.resume_reading()
        self.gate.resume(Pause.CLIENT_BUSY)

    def watch_client(self) -> None:
        if not self.closed:
            self._client.resume_reading()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._reader.close()
        self._admission.close()
        self.gate.close()
        if self._budget is not None:
            self._budget.close()
        self._client.close()
        self._upstream.close()

    # upstream side -------------------------------------------------------------------------

    def responses_received(self, data: bytes) -> None:
        self.activity += 1
        self._throttle_ms = 0
        out: list[bytes] = []
        now_ns = self._clock.now_ns()
        in_flight = self._in_flight
        try:
            frames = self._responses.feed(data)
            self._round_trips.read(now_ns, len(frames), in_flight)
            for frame in frames:
                response = self._on_response(frame, now_ns)
                if response is not None:
                    out.append(response)
                in_flight.take_local_responses(out)
        except ProtocolError as exc:
            log.warning("closing client %s: upstream response unusable: %s", self.channel.peer, exc)
            self.close()
            return
        self._client.writelines(out)
        if self._draining and not in_flight.entries:
            self.close()
            return
        gate = self.gate
        if self._throttle_ms:
            gate.mute(self._throttle_ms)
        pauses = gate.pauses
        if Pause.UNTIL_RESPONSE in pauses and not in_flight.stops_reading():
            gate.resume(Pause.UNTIL_RESPONSE)
        if Pause.IN_FLIGHT in pauses and not in_flight.full:
            gate.resume(Pause.IN_FLIGHT)

    def _on_response(self, frame: bytes, now_ns: int) -> bytes | None:
        entry = self._in_flight.answered(frame)
        if entry.__class__ is OwnRequest:
            assert isinstance(entry, OwnRequest)
            self._round_trips.own_answered(now_ns)
            entry.on_answer(frame)
            self._deferral.answered()
            return None
        assert isinstance(entry, Request)
        request = entry
        now_ms = request.now_ms = now_ns // 1_000_000
        size = len(request.frame) + len(frame)
        handler = request.route.handler
        if handler is not None:
            frame = handler.on_response(self.channel, frame, request)
        request_time_ns = self._round_trips.charge(request, size, now_ns)
        throttle = self._settlement.settle(request, request_time_ns, now_ms)
        if throttle:
            header = request.header
            frame = with_throttle_time(frame, header.api_key, header.api_version, throttle)
            self._throttle_ms = max(self._throttle_ms, throttle)
        usage = request.usage
        if usage is not None:
            if usage.retired:
                assert self._reader.usage is not None
                usage = self._reader.usage.current(usage)
            usage.answered(len(frame), request_time_ns, throttle)
        return frame

    def upstream_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            log.info("closing client %s: upstream connection lost (%s)", self.channel.peer, exc)
        self.close()
