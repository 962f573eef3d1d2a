"""The request-rate guards on the connection core, on a virtual clock: a token per request
of a guarded API, answered with throttle_time_ms and the KIP-219 mute, capped, never
holding the principal's other connections, and never counting a KIP-848 keepalive."""

from __future__ import annotations

import struct

from localkafka.inprocess.harness import RecordingTransport, VirtualClock, connect
from localkafka.inprocess.wire import request_frame
from protocol.apis import CONSUMER_GROUP_HEARTBEAT
from protocol.headers import parse_request_header
from proxy.enforcement import Enforcement
from proxy.runtime.context import ProxyContext
from proxy.runtime.core import ConnectionCore
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.entities import QuotaEntity, QuotaType
from quotas.settings import GuardSettings, QuotaConfig, QuotaSettings
from tests.support.group_heartbeat import heartbeat
from tests.support.guards import EVERY_CLIENT, enforcement

OFFSET_COMMIT, VERSION = 8, 7  # forwarded as bytes; v7's response starts with its throttle
MS = 1_000_000


def commit(correlation_id: int) -> bytes:
    return request_frame(OFFSET_COMMIT, VERSION, b"", correlation_id)


def answer(conn: ConnectionCore, upstream: RecordingTransport) -> None:
    """The broker answers the last request sent, with no throttle of its own."""
    correlation_id = parse_request_header(upstream.written[-1]).correlation_id
    conn.responses_received(struct.pack(">iii", 8 + 4, correlation_id, 0) + b"\0\0\0\0")


def throttle_of(frame: bytes) -> int:
    throttle: int = struct.unpack_from(">i", frame, 8)[0]
    return throttle


def committed(
    shared: Enforcement | ProxyContext, clock: VirtualClock, count: int
) -> tuple[ConnectionCore, RecordingTransport, list[int]]:
    """`count` commits, each sent once the one before it is answered: their throttles."""
    conn, client, upstream = connect(shared, clock)
    for correlation_id in range(1, count + 1):
        conn.requests_received(commit(correlation_id))
        answer(conn, upstream)
    return conn, client, [throttle_of(frame) for frame in client.written]


def test_a_burst_goes_through_and_the_request_past_it_is_throttled_and_muted() -> None:
    clock = VirtualClock()
    guarded = enforcement({QuotaType.OFFSET_COMMIT_RATE: {EVERY_CLIENT: 1.0}})
    _, client, throttles = committed(guarded, clock, 3)
    assert throttles == [0, 0, 1000]  # tokens 2 -> 1 -> 0 -> -1: a second to refill one
    assert not client.reading  # KIP-219: muted for the throttle
    clock.advance(999 * MS)
    assert not client.reading
    clock.advance(MS)
    assert client.reading


def test_a_throttle_is_capped_at_max_throttle_ms() -> None:
    """At 0.1 commits a second, the burst is 0.2 commits: the first commit takes the
    bucket to -0.8, eight seconds from zero."""
    guarded = enforcement({QuotaType.OFFSET_COMMIT_RATE: {EVERY_CLIENT: 0.1}})
    _, _, throttles = committed(guarded, VirtualClock(), 1)
    assert throttles == [1000]


def test_an_unguarded_api_and_an_unguarded_principal_are_untouched() -> None:
    guarded = enforcement({QuotaType.METADATA_RATE: {QuotaEntity(user="other"): 1.0}})
    _, client, throttles = committed(guarded, VirtualClock(), 5)
    assert throttles == [0] * 5 and client.reading
    assert not any(guarded.engine.guards[OFFSET_COMMIT].sensors())


def test_a_guard_holds_the_connection_it_answers_not_its_principal() -> None:
    """Another connection of the same principal is read at once and meets the empty bucket
    with its own request."""
    clock = VirtualClock()
    guarded = enforcement({QuotaType.OFFSET_COMMIT_RATE: {EVERY_CLIENT: 1.0}})
    _, first, _ = committed(guarded, clock, 3)
    assert not first.reading
    _, second, throttles = committed(guarded, clock, 1)
    assert throttles == [1000] and len(second.written) == 1  # forwarded, answered, throttled


def test_shadow_mode_counts_what_it_would_throttle_and_throttles_nothing() -> None:
    guard = QuotaType.OFFSET_COMMIT_RATE
    guarded = enforcement({guard: {EVERY_CLIENT: 1.0}}, shadow=frozenset({guard}))
    _, client, throttles = committed(guarded, VirtualClock(), 4)
    assert throttles == [0, 0, 0, 0] and client.reading
    (sensors,) = guarded.engine.guards[OFFSET_COMMIT].sensors()
    assert sensors.shadow_throttles == 2 and sensors.throttles == 0
    conn, _, upstream = connect(guarded, VirtualClock())
    conn.requests_received(b"".join(commit(correlation_id) for correlation_id in range(1, 6)))
    assert len(upstream.written) == 5  # over the bucket, and read on as if it were not


def test_a_keepalive_heartbeat_is_never_counted_and_a_join_is() -> None:
    clock = VirtualClock()
    guarded = enforcement({QuotaType.CONSUMER_GROUP_HEARTBEAT_RATE: {EVERY_CLIENT: 1.0}})
    conn, _, upstream = connect(guarded, clock)
    manager = guarded.engine.guards[CONSUMER_GROUP_HEARTBEAT]
    for correlation_id in range(1, 5):
        conn.requests_received(heartbeat(epoch=7, correlation_id=correlation_id))
    assert len(upstream.written) == 4 and not any(manager.sensors())
    conn.requests_received(heartbeat(epoch=0, topics=["orders"], correlation_id=5))
    (sensors,) = manager.sensors()
    assert manager.tokens(sensors, 0) == 1.0


def test_a_reload_changes_the_cap_and_the_burst_and_keeps_the_tokens() -> None:
    clock = VirtualClock()
    limits = {QuotaType.OFFSET_COMMIT_RATE: {EVERY_CLIENT: 1.0}}
    guarded = enforcement(limits)
    _, _, throttles = committed(guarded, clock, 3)
    assert throttles == [0, 0, 1000]
    settings = QuotaSettings(guards=GuardSettings(burst_s=1, max_throttle_ms=300))
    assert guarded.apply(QuotaConfig(settings, limits), frozenset(), True)  # kept in place
    manager = guarded.engine.guards[OFFSET_COMMIT]
    (sensors,) = manager.sensors()
    assert manager.tokens(sensors, 0) == -1.0
    clock.advance(5000 * MS)  # to -1 + 5, but the burst is one commit now
    _, _, throttles = committed(guarded, clock, 2)
    assert throttles == [0, 300]  # 1 -> 0 -> -1, a second capped


def test_a_heartbeat_waits_for_one_throttled_request_ahead_and_one_mute() -> None:
    """A member's JoinGroup over its guard: the heartbeat it sends meanwhile is read once the
    JoinGroup is answered and the mute has passed, as a broker reads one request at a time."""
    clock = VirtualClock()
    guarded = enforcement({QuotaType.JOIN_GROUP_RATE: {EVERY_CLIENT: 0.1}})
    conn, client, upstream = connect(guarded, clock)
    join, heartbeat_api = 11, 12
    conn.requests_received(request_frame(join, 4, b"", 1))
    conn.requests_received(request_frame(heartbeat_api, 3, b"", 2))
    assert len(upstream.written) == 1  # over the bucket: nothing more read until answered
    clock.advance(40 * MS)  # the broker's time
    conn.responses_received(struct.pack(">iii", 12, 1, 0) + b"\0\0\0\0")
    assert throttle_of(client.written[0]) == 1000 and len(upstream.written) == 1
    clock.advance(1000 * MS - 1)
    assert len(upstream.written) == 1
    clock.advance(1)
    assert [parse_request_header(frame).api_key for frame in upstream.written] == [
        join,
        heartbeat_api,
    ]


def test_pipelined_requests_over_the_bucket_go_one_at_a_time() -> None:
    clock = VirtualClock()
    guarded = enforcement({QuotaType.OFFSET_COMMIT_RATE: {EVERY_CLIENT: 1.0}})
    conn, _, upstream = connect(guarded, clock)
    conn.requests_received(b"".join(commit(correlation_id) for correlation_id in range(1, 6)))
    assert len(upstream.written) == 3  # two in the burst, the third over it
    for correlation_id in (1, 2, 3, 4):
        conn.responses_received(struct.pack(">iii", 12, correlation_id, 0) + b"\0\0\0\0")
        if correlation_id >= 3:  # each over the bucket, muted for a second once answered
            assert len(upstream.written) == correlation_id
            clock.advance(1000 * MS)
            assert len(upstream.written) == correlation_id + 1


def test_usage_samples_count_a_guards_hold_under_its_api() -> None:
    """What `top` and the report show as held: the guard's mute, for its API alone."""
    clock = VirtualClock()
    guarded = enforcement({QuotaType.OFFSET_COMMIT_RATE: {EVERY_CLIENT: 1.0}})
    conn, _, upstream = connect(guarded, clock, usage=UsageRecorder("proxy-1", 0))
    for correlation_id in (1, 2, 3):
        conn.requests_received(commit(correlation_id))
        answer(conn, upstream)
    clock.advance(2000 * MS)
    held = guarded.settlement.take_throttled(clock.now_ms())
    assert held is not None
    assert held("ANONYMOUS", "app", OFFSET_COMMIT) == 1000
    assert held("ANONYMOUS", "app", 3) == 0  # Metadata: not this guard's
