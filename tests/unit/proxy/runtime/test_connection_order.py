"""ConnectionCore's ordering and holding rules, fed frames directly.

The transports here only record what the connection writes and whether it reads, time is a
virtual clock, and no broker is imitated: responses are bare frames with the right
correlation ids.
"""

from __future__ import annotations

import struct

from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from localkafka.inprocess.harness import RecordingTransport, VirtualClock, connect
from localkafka.inprocess.wire import request_frame
from protocol.apis import API_VERSIONS, FETCH, MAX_DECODABLE_VERSION, PRODUCE
from protocol.headers import parse_request_header, response_correlation_id
from proxy.enforcement import Enforcement
from proxy.runtime.context import ProxyContext
from proxy.runtime.core import ConnectionCore
from proxy.runtime.read_gate import Pause
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig

WINDOWS = QuotaSettings(client=MetricConfig(samples=2, window_ms=1000))
OTHER_API = 7  # forwarded as bytes, never decoded
SECOND_NS = 1_000_000_000


def request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    return request_frame(api_key, version, body, correlation_id)


def response(correlation_id: int, body: bytes = b"") -> bytes:
    """A response frame as the connection sees it: only the correlation id is read."""
    return struct.pack(">ii", 4 + len(body), correlation_id) + body


def fetch(correlation_id: int) -> bytes:
    body = FetchRequest(
        version=4,
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=10**6,
        isolation_level=0,
        topics=[],
    ).encode(version=4)
    return request(FETCH, 4, correlation_id, bytes(body))


def produce(correlation_id: int, size: int) -> bytes:
    body = ProduceRequest(
        version=3,
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[("t", [(0, b"x" * size)])],
    ).encode(version=3)
    return request(PRODUCE, 3, correlation_id, bytes(body))


def connection(
    limits: dict[QuotaType, dict[QuotaEntity, float]], hold_principal: bool = True
) -> tuple[ConnectionCore, RecordingTransport, RecordingTransport, VirtualClock]:
    clock = VirtualClock()
    enforcement = Enforcement(
        QuotaEngine(QuotaConfig(WINDOWS, limits)), hold_principal=hold_principal
    )
    conn, client, upstream = connect(enforcement, clock)
    return conn, client, upstream, clock


def test_a_local_answer_goes_out_between_the_responses_around_it() -> None:
    # the mute is ended by hand below; held per connection, nothing else holds the requests
    conn, client, _, clock = connection(
        {QuotaType.FETCH: {QuotaEntity(client_id=DEFAULT): 1000.0}}, hold_principal=False
    )
    conn.requests_received(fetch(1))
    conn.responses_received(response(1, b"\0" * 8 + b"x" * 5000))  # over quota now
    assert not client.reading
    clock.advance(10**6)  # a millisecond: still muted, and the principal over quota
    assert not client.reading
    conn.gate.resume(Pause.THROTTLED)  # as if the mute had passed
    conn.requests_received(request(OTHER_API, 0, 10))
    conn.requests_received(fetch(11))  # answered by the proxy: the principal is over quota
    conn.gate.resume(Pause.THROTTLED)
    conn.requests_received(request(OTHER_API, 0, 12))
    conn.responses_received(response(10) + response(12))  # both in one read
    assert not client.closed
    assert [response_correlation_id(frame) for frame in client.written] == [1, 10, 11, 12]


def test_a_throttled_produce_holds_the_requests_read_with_it() -> None:
    conn, client, upstream, clock = connection(
        {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 1000.0}}
    )
    conn.requests_received(produce(1, 3000) + produce(2, 10) + produce(3, 10))
    assert [parse_request_header(frame).correlation_id for frame in upstream.written] == [1]
    assert not client.reading
    body = ProduceResponse(version=3, responses=[], throttle_time_ms=0).encode(version=3)
    conn.responses_received(response(1, bytes(body)))
    throttle = struct.unpack_from(">i", client.written[0], 12)[0]
    assert throttle > 0 and not client.reading and len(upstream.written) == 1
    clock.advance(throttle * 1_000_000 - 1)
    assert not client.reading and len(upstream.written) == 1
    clock.advance(1)
    assert [parse_request_header(frame).correlation_id for frame in upstream.written] == [1, 2, 3]
    assert client.reading


def test_nothing_is_forwarded_after_close() -> None:
    conn, _, upstream, _ = connection({})
    conn.gate.pause(Pause.UPSTREAM_BUSY)
    conn.requests_received(request(OTHER_API, 0, 1) + request(OTHER_API, 0, 2))
    conn.close()
    conn.gate.resume(Pause.UPSTREAM_BUSY)  # the upstream drains its buffer after the close
    assert upstream.written == []


def test_a_malformed_request_closes_only_its_connection() -> None:
    conn, client, upstream, _ = connection({})
    truncated = request(PRODUCE, 3, 1)  # a Produce v3 that ends right after its header
    conn.requests_received(truncated)
    assert client.closed and upstream.written == []


def test_a_client_not_reading_its_answers_is_not_read_either() -> None:
    conn, client, upstream, _ = connection({})
    conn.requests_received(request(OTHER_API, 0, 1))  # a long poll, say: answered late
    too_new = MAX_DECODABLE_VERSION[API_VERSIONS] + 1
    conn.requests_received(b"".join(request(API_VERSIONS, too_new, c) for c in range(2, 12)))
    # answers the proxy makes wait behind the first response and count as in flight
    assert not client.reading
    assert len(upstream.written) == 1 and client.written == []
    conn.responses_received(response(1))
    assert [response_correlation_id(f) for f in client.written] == list(range(1, 12))
    assert client.reading
    conn.client_write_blocked()
    assert client.reading and not upstream.reading  # the broker's responses wait upstream
    conn.requests_received(request(API_VERSIONS, too_new, 12))  # the proxy's own answer
    assert not client.reading
    conn.client_write_unblocked()
    assert client.reading and upstream.reading


def test_a_throttle_holds_every_connection_of_the_principal_and_no_other() -> None:
    """Issue 13: A's Produce crosses producer_byte_rate, so B (same principal) is not read
    until the throttle has passed, while C (another client-id) goes on. Held per connection,
    as a broker holds them, B would go on too."""
    for hold_principal in (True, False):
        clock = VirtualClock()
        limits = {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 1000.0}}
        enforcement = Enforcement(
            QuotaEngine(QuotaConfig(WINDOWS, limits)), hold_principal=hold_principal
        )
        a, _, a_up = connect(enforcement, clock)
        b, _, b_up = connect(enforcement, clock)
        c, _, c_up = connect(enforcement, clock)
        a.requests_received(produce(1, 3000))
        b.requests_received(produce(1, 10))
        other = ProduceRequest(
            version=3,
            transactional_id=None,
            acks=1,
            timeout_ms=1000,
            topic_data=[("t", [(0, b"x" * 10)])],
        ).encode(version=3)
        c.requests_received(request_frame(PRODUCE, 3, bytes(other), 1, client_id=b"other"))
        assert len(a_up.written) == 1 and len(c_up.written) == 1
        assert len(b_up.written) == (0 if hold_principal else 1)
        clock.advance(10 * SECOND_NS)  # the throttle (2 s over 2 x 1 s windows) has passed
        assert len(b_up.written) == 1


def test_a_produce_throttle_is_served_once_from_when_it_was_read() -> None:
    """Issue 13: the proxy judges a Produce when it reads it, Kafka when it answers it. The
    broker took 300 ms here; Kafka's throttle at the answer is 300 ms shorter than the one the
    proxy decided at the read (the rate's window grew by that time), so the response carries
    that, and reading resumes when the throttle decided at the read has passed, not 300 ms
    later."""
    conn, client, upstream, clock = connection(
        {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 1000.0}}
    )
    conn.requests_received(produce(1, 3000) + produce(2, 10))
    context = conn.channel.runtime
    assert isinstance(context, ProxyContext)
    produce_quota = context.quotas.engine.produce
    sensors = produce_quota.sensors_for("ANONYMOUS", "app", 0)
    decided_ms = produce_quota.throttle_time_ms(sensors, 0)
    clock.advance(300 * 1_000_000)
    body = ProduceResponse(version=3, responses=[], throttle_time_ms=0).encode(version=3)
    conn.responses_received(response(1, bytes(body)))
    throttle = struct.unpack_from(">i", client.written[0], 12)[0]
    assert decided_ms > 1000 and throttle == decided_ms - 300
    clock.advance(throttle * 1_000_000 - 1)
    assert not client.reading and len(upstream.written) == 1
    clock.advance(1)
    assert len(upstream.written) == 2 and client.reading
