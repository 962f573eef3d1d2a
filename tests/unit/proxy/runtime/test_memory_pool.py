"""queued.max.request.bytes through the connection core: a frame waiting for bytes is
charged to the pool, a connection refused memory stops reading until some returns, and a
frame that arrives whole is never charged. Also the core's shutdown drain."""

from __future__ import annotations

import struct

from localkafka.inprocess.harness import RecordingTransport, VirtualClock, connect, proxy_context
from localkafka.inprocess.wire import request_frame
from proxy.enforcement import Enforcement
from proxy.runtime.core import ConnectionCore
from proxy.runtime.memory_pool import MemoryPool
from proxy.runtime.read_budget import PRESSURE_READ_BYTES, READ_BYTES
from proxy.runtime.read_gate import Pause
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig

OTHER_API = 7  # ControlledShutdown: never decoded


CLOCK = VirtualClock()


def core_with(pool: MemoryPool) -> tuple[ConnectionCore, RecordingTransport, RecordingTransport]:
    return connect(Enforcement(QuotaEngine(QuotaConfig())), CLOCK, pool=pool)


def test_the_upstream_connection_opens_at_the_first_bytes() -> None:
    connects: list[int] = []
    client = RecordingTransport()
    context = proxy_context(Enforcement(QuotaEngine(QuotaConfig())), CLOCK)
    core = ConnectionCore(client, context, connect_upstream=lambda: connects.append(1))
    assert connects == [] and client.reading  # accepted, nothing asked of the cluster
    core.requests_received(b"")  # the first read asks for the upstream connection
    assert connects == [1] and not client.reading
    core.requests_received(frame(20))  # kept until the upstream is connected
    assert connects == [1]
    upstream = RecordingTransport()
    core.upstream_connected(upstream)
    assert client.reading and len(upstream.written) == 1


def frame(size: int, correlation_id: int = 1) -> bytes:
    """A request frame of `size` bytes after its prefix: a header of an API the proxy
    forwards as bytes, padded."""
    head = request_frame(OTHER_API, 0, b"", correlation_id)[4:]
    return struct.pack(">i", size) + head + bytes(size - len(head))


def test_only_frames_waiting_for_bytes_are_charged() -> None:
    pool = MemoryPool(1000)
    core, _, upstream = core_with(pool)
    core.requests_received(frame(600))  # whole in one read: handed on, never charged
    assert pool.available == 1000 and len(upstream.written) == 1
    big = frame(600, 2)
    core.requests_received(big[:100])
    assert pool.available == 1000 - 604
    core.requests_received(big[100:])
    assert pool.available == 1000 and len(upstream.written) == 2


def test_an_exhausted_pool_stops_reading_until_memory_returns() -> None:
    pool = MemoryPool(1000)
    first, _, _ = core_with(pool)
    second, second_client, second_upstream = core_with(pool)
    third, third_client, _ = core_with(pool)
    big = frame(1500)  # larger than the pool: granted while any memory is left (strict=false)
    first.requests_received(big[:10])
    assert pool.available == 1000 - 1504
    other = frame(100, 7)
    second.requests_received(other[:10])
    assert not second_client.reading and Pause.MEMORY in second.gate.pauses
    third.requests_received(frame(50, 8)[:20])
    assert pool.waiting == 2
    first.requests_received(big[10:])  # completes: memory returns; waiters in order
    assert not second_client.reading  # resumed from the event loop, not from here
    CLOCK.advance(0)
    assert second_client.reading and third_client.reading
    assert pool.available == 1000 - 104 - 54
    second.requests_received(other[10:])
    assert len(second_upstream.written) == 1


def test_a_closed_connection_returns_its_grant_and_stops_waiting() -> None:
    pool = MemoryPool(100)
    first, _, _ = core_with(pool)
    second, _, _ = core_with(pool)
    first.requests_received(frame(500)[:10])
    second.requests_received(frame(500)[:10])
    assert pool.waiting == 1
    second.close()
    assert pool.waiting == 0
    first.close()
    assert pool.available == 100


def test_drain_closes_once_requests_sent_upstream_are_answered() -> None:
    core, client, upstream = core_with(MemoryPool(10**6))
    core.requests_received(frame(20, 5))
    assert len(upstream.written) == 1
    core.drain()
    assert not client.reading and not client.closed  # one request still in flight
    core.requests_received(frame(20, 6))  # read after the drain began: never sent
    assert len(upstream.written) == 1
    core.responses_received(struct.pack(">ii", 4, 5))
    assert client.written and client.closed and upstream.closed


def test_drain_of_a_quiet_connection_closes_at_once() -> None:
    core, client, _ = core_with(MemoryPool(10**6))
    core.drain()
    assert client.closed and core.closed


def test_under_memory_pressure_a_read_takes_a_small_request_then_no_more_than_its_frame() -> None:
    """A connection waiting for memory holds at most one pressure read, not a socket read
    of a frame it has no memory for; a request that fits in one such read needs no memory."""
    roomy, _, _ = core_with(MemoryPool(10**8))  # could grant a frame of the largest size
    assert roomy.read_limit() == READ_BYTES
    pool = MemoryPool(1000)  # under the largest frame size (10**8): pressure
    core, _, upstream = core_with(pool)
    assert core.read_limit() == PRESSURE_READ_BYTES
    whole = frame(600)
    core.requests_received(whole[:3])
    assert core.read_limit() == PRESSURE_READ_BYTES  # the prefix is not in yet
    core.requests_received(whole[3:104])
    assert pool.available == 1000 - 604  # granted as soon as the size is known
    assert core.read_limit() == 500  # the rest of its frame, no more
    core.requests_received(whole[104:])
    assert len(upstream.written) == 1 and pool.available == 1000
    big = frame(PRESSURE_READ_BYTES * 3)
    other, other_client, _ = core_with(MemoryPool(0))  # nothing to grant
    other.requests_received(big[:PRESSURE_READ_BYTES])
    assert not other_client.reading  # holding one pressure read until memory returns
    assert other.read_limit() == len(big) - PRESSURE_READ_BYTES
