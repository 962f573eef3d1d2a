"""Quota fidelity, exactly: greedy simulated clients against the real connection and enforcement.

A real broker and a real client measure the machine as much as the proxy: a slow machine makes
a client under-offer, and no rate it reaches says whether the quota was right. Here the client
and the broker are simulated on a virtual clock, and everything between them is the proxy's
production code: ConnectionCore (reading, pausing, the backlog, the in-flight limit, the
mute) and the Enforcer on a QuotaEngine. The result is the same on every machine.

The simulated client always has a request ready. It either honours throttle_time_ms (sends
nothing more on the connection until the throttle has passed, as the Java clients, kafka-python
and librdkafka do) or ignores it and is held only by the mute (aiokafka, a raw socket). It keeps
up to `pipeline` requests unanswered: 1, 5 (the Java producer's default) or without limit
(librdkafka), and what it sends while the proxy is not reading waits in socket buffers of
SOCKET_BUFFER bytes. The simulated broker answers one request of the connection at a time.

`python -m tests.support.fidelity` prints the table; tests/unit/quotas/test_quota_fidelity.py
asserts it.
"""

from __future__ import annotations

import argparse
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from localkafka.inprocess.harness import RecordingTransport, VirtualClock, connect
from localkafka.inprocess.wire import request_frame, response_frame
from protocol.apis import FETCH, METADATA, PRODUCE
from protocol.frames import FrameSplitter
from protocol.headers import response_correlation_id
from proxy.enforcement import Enforcement
from proxy.runtime.context import ProxyContext
from proxy.runtime.core import ConnectionCore
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaLimits, QuotaSettings
from quotas.stats import MetricConfig

MS = 1_000_000
SECOND = 1000 * MS
#: one way between the client and the proxy; the proxy and the broker share a host
CLIENT_LATENCY_NS = 100_000
#: at most what one socket read hands the proxy (uvloop reads 256 KiB)
READ_BYTES = 256 * 1024
#: the kernel's send and receive buffers between client and proxy
SOCKET_BUFFER = 4 * 2**20
#: the producer's default batch.size; one batch per Produce request
BATCH_BYTES = 16_384
#: what one partition returns at most (max.partition.fetch.bytes), in whole batches
PARTITION_FETCH_BYTES = 2**20
#: broker thread time for one Produce or Fetch, and for one Metadata request
DATA_SERVICE_NS = 100_000
METADATA_SERVICE_NS = 2 * MS
#: the Metadata requests' topics: so many that a busy broker's threads may take
#: METADATA_SERVICE_NS to answer one (quotas.thread_time.HANDLED bounds what the proxy
#: charges by the request's bytes), and the proxy's estimate of it is its round trip
METADATA_TOPICS = 1500
#: the span the quota must hold over, after the first quota.window.num windows
SPAN_S = 30
#: the long run, where a greedy client's first burst no longer weighs
LONG_RUN_S = 300


def whole_periods(seconds: int, windows: tuple[int, int], *, at_least: bool) -> int:
    """`seconds` rounded to whole echo periods (quota.window.num x window size).

    A greedy client's first burst comes back every time its window ages out, so what it gets
    repeats with that period: 10 connections with Kafka's 11 x 1 s windows got 1.0019 x in
    every 11 s, and 1.028 x over 300 s only because the last 3 s held one echo's 10 MB.
    A rate is read over whole periods: at least `seconds` (the first span) or at most (the
    long run).
    """
    period = windows[0] * windows[1]
    whole = -(-seconds // period) if at_least else seconds // period
    return whole * period


@dataclass(frozen=True)
class Behaviour:
    name: str
    honours_throttle: bool
    #: requests kept unanswered at once
    pipeline: int


BEHAVIOURS = (
    Behaviour("honours, 1 in flight", True, 1),
    Behaviour("honours, 5 in flight (Java)", True, 5),
    Behaviour("honours, unbounded (librdkafka)", True, 10**9),
    Behaviour("ignores, 1 in flight (aiokafka)", False, 1),
    Behaviour("ignores, 5 in flight", False, 5),
    Behaviour("ignores, unbounded (raw socket)", False, 10**9),
)

#: (quota.window.num, quota.window.size.seconds); Kafka's default first
WINDOWS = ((11, 1), (2, 1), (5, 2), (1, 1))


class Workload:
    """One quota type's traffic: what the client sends, what the broker answers, and how much
    of the quota each answered request used, in the quota's own unit."""

    quota_type: QuotaType
    quota: float
    api_key: int
    version: int
    #: the most one request may use, in quota units
    largest_use: float

    def request_body(self) -> bytes:
        raise NotImplementedError

    def service_ns(self, frame: bytes) -> int:
        raise NotImplementedError

    def response_body(self, frame: bytes) -> bytes:
        raise NotImplementedError

    def used(self, request: bytes, response: bytes, service_ns: int) -> float:
        """What the broker would charge this request: bytes, or thread time as %-seconds."""
        raise NotImplementedError

    def throttle_time_ms(self, response: bytes) -> int:
        raise NotImplementedError

    def rate(self, used: float, seconds: float) -> float:
        return used / seconds


class Produce(Workload):
    quota_type, quota, api_key, version = QuotaType.PRODUCE, 1e6, PRODUCE, 7
    largest_use = BATCH_BYTES + 200

    def request_body(self) -> bytes:
        return bytes(
            ProduceRequest(
                version=7,
                transactional_id=None,
                acks=1,
                timeout_ms=30_000,
                topic_data=[("t", [(0, b"r" * BATCH_BYTES)])],
            ).encode(version=7)
        )

    def service_ns(self, frame: bytes) -> int:
        return DATA_SERVICE_NS

    def response_body(self, frame: bytes) -> bytes:
        return _PRODUCE_RESPONSE

    def used(self, request: bytes, response: bytes, service_ns: int) -> float:
        return len(request) - 4  # Kafka charges the request's size

    def throttle_time_ms(self, response: bytes) -> int:
        return int(struct.unpack_from(">i", response, 12)[0])  # after an empty responses array


class Fetch(Workload):
    quota_type, quota, api_key, version = QuotaType.FETCH, 1e6, FETCH, 11
    largest_use = PARTITION_FETCH_BYTES + 200

    def request_body(self) -> bytes:
        return bytes(
            FetchRequest(
                version=11,
                replica_id=-1,
                max_wait_ms=500,
                min_bytes=1,
                max_bytes=52_428_800,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[("t", [(0, -1, 0, -1, PARTITION_FETCH_BYTES)])],
                forgotten_topics_data=[],
                rack_id="",
            ).encode(version=11)
        )

    def service_ns(self, frame: bytes) -> int:
        return DATA_SERVICE_NS

    def response_body(self, frame: bytes) -> bytes:
        """Whole batches up to the request's max_bytes (as the proxy capped it), and at least
        one batch, as Kafka returns the first batch even when it is larger."""
        max_bytes = struct.unpack_from(">i", frame, _FETCH_MAX_BYTES_AT)[0]
        batches = max(1, min(max_bytes, PARTITION_FETCH_BYTES) // BATCH_BYTES)
        return _fetch_response_body(batches * BATCH_BYTES)

    def used(self, request: bytes, response: bytes, service_ns: int) -> float:
        return len(response) - 4  # Kafka charges the response's size

    def throttle_time_ms(self, response: bytes) -> int:
        return int(struct.unpack_from(">i", response, 8)[0])  # first in the body


class Request(Workload):
    """Metadata requests that each take METADATA_SERVICE_NS of a broker thread."""

    quota_type, quota, api_key, version = QuotaType.REQUEST, 10.0, METADATA, 4
    largest_use = METADATA_SERVICE_NS * 100 / SECOND

    def request_body(self) -> bytes:
        return _METADATA_REQUEST

    def service_ns(self, frame: bytes) -> int:
        return METADATA_SERVICE_NS

    def response_body(self, frame: bytes) -> bytes:
        return _METADATA_RESPONSE

    def used(self, request: bytes, response: bytes, service_ns: int) -> float:
        return service_ns * 100 / SECOND  # %-seconds of one thread

    def throttle_time_ms(self, response: bytes) -> int:
        return int(struct.unpack_from(">i", response, 8)[0])


WORKLOADS: tuple[Workload, ...] = (Produce(), Fetch(), Request())

_PRODUCE_RESPONSE = bytes(
    ProduceResponse(version=7, responses=[], throttle_time_ms=0).encode(version=7)
)
_METADATA_REQUEST = bytes(
    MetadataRequest(
        version=4,
        topics=[
            MetadataRequest.MetadataRequestTopic(version=4, name=f"topic-{index:04d}")
            for index in range(METADATA_TOPICS)
        ],
        allow_auto_topic_creation=False,
    ).encode(version=4)
)
_METADATA_RESPONSE = bytes(
    MetadataResponse(
        version=4, throttle_time_ms=0, brokers=[], cluster_id="sim", controller_id=1, topics=[]
    ).encode(version=4)
)

_fetch_bodies: dict[int, bytes] = {}
#: v11 (header v1, client_id "app"): size, header (8 + 2 + 3), replica_id, max_wait, min_bytes
_FETCH_MAX_BYTES_AT = 4 + 13 + 12


def _fetch_response_body(records: int) -> bytes:
    body = _fetch_bodies.get(records)
    if body is None:
        partition = FetchResponse.FetchableTopicResponse.PartitionData
        msg = FetchResponse(
            version=11,
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[
                (
                    "t",
                    [
                        partition(
                            version=11,
                            partition_index=0,
                            error_code=0,
                            high_watermark=10**9,
                            last_stable_offset=10**9,
                            log_start_offset=0,
                            aborted_transactions=None,
                            preferred_read_replica=-1,
                            records=b"r" * records,
                        )
                    ],
                )
            ],
        )
        body = _fetch_bodies[records] = bytes(msg.encode(version=11))
    return body


class SimBroker:
    """Answers one request of the connection at a time, in order, as a Kafka broker does."""

    def __init__(self, clock: VirtualClock, workload: Workload) -> None:
        self._clock = clock
        self._workload = workload
        self._splitter = FrameSplitter()
        self._busy_until_ns = 0
        self.conn: ConnectionCore | None = None
        #: correlation id -> broker thread time, for what the quota should charge
        self.service_ns: dict[int, int] = {}

    def receive(self, data: bytes) -> None:
        for frame in self._splitter.feed(data):
            correlation_id = struct.unpack_from(">i", frame, 8)[0]
            service = self._workload.service_ns(frame)
            start = max(self._clock.now_ns(), self._busy_until_ns)
            self._busy_until_ns = start + service
            self.service_ns[correlation_id] = service
            response = response_frame(
                self._workload.api_key,
                self._workload.version,
                self._workload.response_body(frame),
                correlation_id,
            )
            delay = self._busy_until_ns - self._clock.now_ns()
            self._clock.call_later(delay, _send(self, response))

    def answer(self, response: bytes) -> None:
        assert self.conn is not None
        self.conn.responses_received(response)


def _send(broker: SimBroker, response: bytes) -> Callable[[], None]:
    return lambda: broker.answer(response)


@dataclass
class SimClient:
    """Sends whenever its behaviour allows; records what each answered request used."""

    clock: VirtualClock
    workload: Workload
    behaviour: Behaviour
    broker: SimBroker
    conn: ConnectionCore | None = None
    transport: RecordingTransport | None = None
    #: (answered at ns, quota units used)
    used: list[tuple[int, float]] = field(default_factory=list)
    throttled_until_ns: int = 0
    _unanswered: int = 0
    _next_correlation_id: int = 0
    _wire: deque[bytes] = field(default_factory=deque)
    _wire_bytes: int = 0
    _delivering: bool = False
    _waking: bool = False
    _sent: dict[int, bytes] = field(default_factory=dict)
    _responses: FrameSplitter = field(default_factory=FrameSplitter)
    _body: bytes = b""
    #: the principal's client-id (a user is ANONYMOUS on PLAINTEXT)
    client_id: bytes = b"app"

    def start(self) -> None:
        self._body = self.workload.request_body()
        self.send()

    def send(self) -> None:
        now = self.clock.now_ns()
        behaviour = self.behaviour
        if behaviour.honours_throttle and now < self.throttled_until_ns:
            if not self._waking:
                self._waking = True
                self.clock.call_later(self.throttled_until_ns - now, self._wake)
            return
        while self._unanswered < behaviour.pipeline and self._wire_bytes < SOCKET_BUFFER:
            frame = request_frame(
                self.workload.api_key,
                self.workload.version,
                self._body,
                self._next_correlation_id,
                self.client_id,
            )
            self._sent[self._next_correlation_id] = frame
            self._next_correlation_id += 1
            self._unanswered += 1
            self._wire.append(frame)
            self._wire_bytes += len(frame)
        self.deliver()

    def _wake(self) -> None:
        self._waking = False
        self.send()

    def deliver(self) -> None:
        """Bytes reach the proxy after the latency, and only while it reads."""
        if self._wire and not self._delivering and self.transport and self.transport.reading:
            self._delivering = True
            self.clock.call_later(CLIENT_LATENCY_NS, self._delivered)

    def _delivered(self) -> None:
        self._delivering = False
        assert self.conn is not None and self.transport is not None
        if not self.transport.reading:
            return  # delivered when the proxy resumes reading
        chunk: list[bytes] = []
        size = 0
        while self._wire and (not chunk or size + len(self._wire[0]) <= READ_BYTES):
            frame = self._wire.popleft()
            chunk.append(frame)
            size += len(frame)
        self._wire_bytes -= size
        self.conn.requests_received(b"".join(chunk))
        self.deliver()
        self.send()  # the socket buffer has room again

    def receive(self, data: bytes) -> None:
        self.clock.call_later(CLIENT_LATENCY_NS, lambda: self._on_responses(data))

    def _on_responses(self, data: bytes) -> None:
        now = self.clock.now_ns()
        for frame in self._responses.feed(data):
            correlation_id = response_correlation_id(frame)
            request = self._sent.pop(correlation_id)
            self._unanswered -= 1
            service = self.broker.service_ns.pop(correlation_id, None)
            if service is not None:  # not the proxy's own (empty, throttled) answer
                self.used.append((now, self.workload.used(request, frame, service)))
            throttle = self.workload.throttle_time_ms(frame)
            if throttle and self.behaviour.honours_throttle:
                self.throttled_until_ns = max(self.throttled_until_ns, now + throttle * MS)
        self.send()

    def per_second(self, seconds: int) -> list[float]:
        """Quota units used in each second of the run."""
        used = [0.0] * seconds
        for at, amount in self.used:
            second = at // SECOND
            if second < seconds:
                used[second] += amount
        return used


@dataclass(frozen=True)
class Result:
    workload: Workload
    behaviour: Behaviour
    windows: tuple[int, int]
    #: achieved / quota over SPAN_S seconds (rounded up to whole echo periods) from the end
    #: of the first quota.window.num windows
    first_span: float
    #: achieved / quota over LONG_RUN_S seconds (rounded down to whole echo periods) from there
    long_run: float
    #: achieved / quota over the SPAN_S-second span with the most, in the long run
    highest_span: float

    @property
    def burst_bound(self) -> float:
        """The most a span may carry, as a multiple of the quota: the quota, plus the burst a
        greedy client gets from Kafka's padded first windows ((num - 1) windows' worth), plus
        the one request (record, then check) that crosses the quota."""
        samples, window_s = self.windows
        largest = self.workload.largest_use / self.workload.quota
        return 1 + ((samples - 1) * window_s + largest) / SPAN_S


def greedy_client(
    proxy: Enforcement | ProxyContext,
    clock: VirtualClock,
    workload: Workload,
    behaviour: Behaviour,
    client_id: bytes = b"app",
) -> SimClient:
    """A greedy client on a connection of its own through the proxy, to a broker of its own;
    started by the caller."""
    broker = SimBroker(clock, workload)
    client = SimClient(clock, workload, behaviour, broker, client_id=client_id)
    conn, transport, _ = connect(
        proxy,
        clock,
        RecordingTransport(on_write=client.receive, on_resume=client.deliver),
        RecordingTransport(on_write=broker.receive),
    )
    broker.conn = client.conn = conn
    client.transport = transport
    return client


def simulate(
    workload: Workload,
    behaviour: Behaviour,
    windows: tuple[int, int],
    connections: int = 1,
    hold_principal: bool = True,
) -> Result:
    """One principal's greedy clients, each on a connection of its own to a broker of its
    own, charging one set of sensors: what the principal achieved together."""
    limits = {workload.quota_type: {QuotaEntity(client_id=DEFAULT): workload.quota}}
    used = run_clients(workload, behaviour, windows, limits, [b"app"] * connections, hold_principal)
    return result_of(workload, behaviour, windows, [sum(s) for s in zip(*used, strict=True)])


def run_clients(
    workload: Workload,
    behaviour: Behaviour,
    windows: tuple[int, int],
    limits: QuotaLimits,
    client_ids: list[bytes],
    hold_principal: bool = True,
) -> list[list[float]]:
    """Greedy clients, one connection each, under these limits: what each used, per
    simulated second, until the long run's end."""
    samples, window_s = windows
    settings = QuotaSettings(client=MetricConfig(samples=samples, window_ms=window_s * 1000))
    clock = VirtualClock()
    enforcement = Enforcement(
        QuotaEngine(QuotaConfig(settings, limits)), hold_principal=hold_principal
    )
    clients = [
        greedy_client(enforcement, clock, workload, behaviour, client_id)
        for client_id in client_ids
    ]
    end = samples * window_s + LONG_RUN_S
    for client in clients:
        client.start()
    clock.advance_to(end * SECOND)
    return [client.per_second(end) for client in clients]


def result_of(
    workload: Workload, behaviour: Behaviour, windows: tuple[int, int], used: list[float]
) -> Result:
    """The ratios to the quota of what was used per second, from the end of the first
    quota.window.num windows."""
    samples, window_s = windows
    start = samples * window_s
    end = start + LONG_RUN_S

    def ratio(first: int, seconds: int) -> float:
        achieved = workload.rate(sum(used[first : first + seconds]), seconds)
        return achieved / workload.quota

    return Result(
        workload,
        behaviour,
        windows,
        ratio(start, whole_periods(SPAN_S, windows, at_least=True)),
        ratio(start, whole_periods(LONG_RUN_S, windows, at_least=False)),
        max(ratio(first, SPAN_S) for first in range(start, end - SPAN_S + 1)),
    )


def fidelity_table(connections: int = 1) -> list[Result]:
    return [
        simulate(workload, behaviour, windows, connections)
        for workload in WORKLOADS
        for windows in WINDOWS
        for behaviour in BEHAVIOURS
    ]


def _unit(workload: Workload) -> str:
    return "% of a thread" if workload.quota_type is QuotaType.REQUEST else "B/s"


def print_table(results: list[Result], out: Callable[[str], Any] = print) -> None:
    out(
        "Greedy simulated clients through the proxy's connection and enforcement, on a virtual"
        " clock. Achieved / target, counting what the broker charges, from the end of the"
        f" first quota.window.num windows: over {SPAN_S} s and over {LONG_RUN_S} s, each in"
        " whole echo periods (33 and 297 s with 11 x 1 s windows), and the"
        f" {SPAN_S}-s span with the most (bound: the quota plus Kafka's first-windows burst)."
    )
    out(
        f"| quota | windows | client | target | first {SPAN_S} s | {LONG_RUN_S} s |"
        f" highest {SPAN_S} s (bound) |"
    )
    out("|---|---|---|---|---|---|---|")
    for r in results:
        samples, window_s = r.windows
        out(
            f"| {r.workload.quota_type.key} | {samples} x {window_s} s | {r.behaviour.name} |"
            f" {r.workload.quota:,.0f} {_unit(r.workload)} | {r.first_span:.4f} |"
            f" {r.long_run:.4f} | {r.highest_span:.3f} ({r.burst_bound:.3f}) |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fidelity", description=__doc__)
    parser.add_argument(
        "--connections",
        type=int,
        default=1,
        help="connections of the one principal, each to a broker of its own (issue 13)",
    )
    args = parser.parse_args(argv)
    print(f"{args.connections} connection(s) of one principal")
    print_table(fidelity_table(args.connections))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
