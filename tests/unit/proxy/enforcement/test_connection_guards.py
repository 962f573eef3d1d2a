"""The connection guards on the connection core, on a virtual clock: a connection judged at
its first request past authentication, counted until it closes, closed at once past its
principal's count, held then closed past its creation rate, and only logged and counted in
shadow mode (proxy/enforcement/connections.py)."""

from __future__ import annotations

from localkafka.inprocess.harness import RecordingTransport, VirtualClock, connect
from localkafka.inprocess.wire import request_frame
from protocol.apis import API_VERSIONS
from proxy.enforcement import Enforcement
from proxy.runtime.context import ProxyContext
from proxy.runtime.core import ConnectionCore
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.entities import QuotaType
from tests.support.guards import EVERY_CLIENT, enforcement

OFFSET_COMMIT, VERSION = 8, 7  # a request of the session, forwarded as bytes
MS = 1_000_000


def opened(
    shared: Enforcement | ProxyContext, clock: VirtualClock, client_id: bytes = b"app"
) -> tuple[ConnectionCore, RecordingTransport, RecordingTransport]:
    """A connection that has sent its first request of the session."""
    conn, client, upstream = connect(shared, clock)
    conn.requests_received(request_frame(OFFSET_COMMIT, VERSION, b"", 1, client_id))
    return conn, client, upstream


def test_a_connection_past_its_principals_count_is_closed_and_sends_nothing() -> None:
    clock = VirtualClock()
    shared = enforcement({QuotaType.CONNECTIONS: {EVERY_CLIENT: 2}})
    first, second = opened(shared, clock), opened(shared, clock)
    _third, client, upstream = opened(shared, clock)
    assert not upstream.written  # its request never reaches the broker
    clock.advance(0)
    assert client.closed and not any(side.closed for side in (first[1], second[1]))
    _other, other_client, _ = opened(shared, clock, b"other-app")  # its own <default> budget
    assert not other_client.closed
    first[0].close()  # a slot frees when a connection closes
    _fourth, fourth_client, fourth_upstream = opened(shared, clock)
    assert fourth_upstream.written and not fourth_client.closed
    assert shared.engine.connections.refused[(QuotaType.CONNECTIONS, ("", "app"))] == 1


def test_a_connection_is_judged_once_its_principal_is_known_not_before() -> None:
    """ApiVersions comes before authentication: nothing is counted or refused for it."""
    clock = VirtualClock()
    shared = enforcement({QuotaType.CONNECTIONS: {EVERY_CLIENT: 1}})
    opened(shared, clock)
    conn, client, upstream = connect(shared, clock)
    conn.requests_received(request_frame(API_VERSIONS, 3, b"", 1))
    clock.advance(0)
    assert upstream.written and not client.closed
    conn.requests_received(request_frame(OFFSET_COMMIT, VERSION, b"", 2))
    clock.advance(0)
    assert len(upstream.written) == 1 and client.closed


def test_over_its_creation_rate_a_connection_is_held_then_closed() -> None:
    clock = VirtualClock()
    shared = enforcement({QuotaType.CONNECTION_CREATION_RATE: {EVERY_CLIENT: 1}})
    # a bucket of two seconds of one per second: two from full, a third takes it below zero
    for _ in range(3):
        _, client, upstream = opened(shared, clock)
        assert upstream.written and not client.closed
    _conn, client, upstream = opened(shared, clock)
    assert not upstream.written
    clock.advance(999 * MS)
    assert not client.closed and not client.reading  # held, unread
    clock.advance(1 * MS)
    assert client.closed
    rate = shared.engine.connection_creation
    sensors = rate.sensors_for("ANONYMOUS", "app", clock.now_ms())
    assert rate.tokens(sensors, clock.now_ms()) == 0.0  # the refused one took no token
    assert shared.engine.connections.refused[(QuotaType.CONNECTION_CREATION_RATE, ("", "app"))]


def test_shadow_mode_counts_what_it_would_refuse_and_lets_it_through() -> None:
    clock = VirtualClock()
    guards = frozenset({QuotaType.CONNECTIONS, QuotaType.CONNECTION_CREATION_RATE})
    shared = enforcement(
        {
            QuotaType.CONNECTIONS: {EVERY_CLIENT: 1},
            QuotaType.CONNECTION_CREATION_RATE: {EVERY_CLIENT: 0.5},
        },
        shadow=guards,
    )
    for _ in range(3):
        _, client, upstream = opened(shared, clock)
        clock.advance(0)
        assert upstream.written and not client.closed
    connections = shared.engine.connections
    assert connections.here[("", "app")] == 3
    assert connections.shadowed[(QuotaType.CONNECTIONS, ("", "app"))] == 2
    assert connections.shadowed[(QuotaType.CONNECTION_CREATION_RATE, ("", "app"))] == 1
    assert not connections.refused


def test_usage_samples_count_the_refused_connections_under_their_first_request() -> None:
    clock = VirtualClock()
    shared = enforcement({QuotaType.CONNECTIONS: {EVERY_CLIENT: 1}})
    usage = UsageRecorder("proxy-1", 0)
    for _ in range(3):
        conn, _, _ = connect(shared, clock, usage=usage)
        conn.requests_received(request_frame(OFFSET_COMMIT, VERSION, b"", 1))
    clock.advance(0)
    (sample,) = usage.drain(clock.now_ms())
    assert (sample.api, sample.requests, sample.connections, sample.connections_refused) == (
        "OffsetCommit",
        1,
        1,
        2,
    )
