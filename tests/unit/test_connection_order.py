"""ClientConnection's ordering and holding rules, fed frames directly.

The transports here only record what the connection writes and whether it reads; no broker
is imitated: responses are bare frames with the right correlation ids.
"""

from __future__ import annotations

import asyncio
import struct

from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from protocol.apis import FETCH, PRODUCE
from protocol.headers import parse_request_header, response_correlation_id
from proxy.connection import ClientConnection
from proxy.enforcement import Enforcer
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig

WINDOWS = QuotaSettings(client=MetricConfig(samples=2, window_ms=1000))
OTHER_API = 7  # forwarded as bytes, never decoded


class RecordingTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.reading = True
        self.closed = False

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", 1)

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def writelines(self, data: list[bytes]) -> None:
        self.written.extend(data)

    def close(self) -> None:
        self.closed = True


def request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 3) + b"app"
    return struct.pack(">i", len(header) + len(body)) + header + body


def response(correlation_id: int, body: bytes = b"") -> bytes:
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
    limits: dict[QuotaType, dict[QuotaEntity, float]],
) -> tuple[ClientConnection, RecordingTransport, RecordingTransport]:
    enforcer = Enforcer(QuotaEngine(QuotaConfig(WINDOWS, limits)))
    conn = ClientConnection(
        lambda: [], lambda n, h, p: (h, p), 10**8, 1.0, lambda c: None, enforcer
    )
    client, upstream = RecordingTransport(), RecordingTransport()
    conn.transport, conn.upstream = client, upstream  # type: ignore[assignment]
    return conn, client, upstream


async def test_a_local_answer_goes_out_between_the_responses_around_it() -> None:
    conn, client, _ = connection({QuotaType.FETCH: {QuotaEntity(client_id=DEFAULT): 1000.0}})
    conn.data_received(fetch(1))
    conn.upstream_data_received(response(1, b"\0" * 8 + b"x" * 5000))  # over quota now
    conn.resume_reading("throttled")  # as when the mute has passed
    conn.data_received(request(OTHER_API, 0, 10))
    conn.data_received(fetch(11))  # answered by the proxy: the principal is over quota
    conn.resume_reading("throttled")
    conn.data_received(request(OTHER_API, 0, 12))
    conn.upstream_data_received(response(10) + response(12))  # both in one read
    assert not client.closed
    assert [response_correlation_id(frame) for frame in client.written] == [1, 10, 11, 12]


async def test_a_throttled_produce_holds_the_requests_read_with_it() -> None:
    conn, client, upstream = connection(
        {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 1000.0}}
    )
    conn.data_received(produce(1, 3000) + produce(2, 10) + produce(3, 10))
    assert [parse_request_header(frame).correlation_id for frame in upstream.written] == [1]
    assert not client.reading
    body = ProduceResponse(version=3, responses=[], throttle_time_ms=0).encode(version=3)
    conn.upstream_data_received(response(1, bytes(body)))
    throttle = struct.unpack_from(">i", client.written[0], 12)[0]
    assert throttle > 0 and not client.reading and len(upstream.written) == 1
    await asyncio.sleep(throttle / 1000 + 0.05)
    assert [parse_request_header(frame).correlation_id for frame in upstream.written] == [1, 2, 3]
    assert client.reading


async def test_nothing_is_forwarded_after_close() -> None:
    conn, _, upstream = connection({})
    conn.pause_reading("upstream-busy")
    conn.data_received(request(OTHER_API, 0, 1) + request(OTHER_API, 0, 2))
    conn.close()
    conn.resume_reading("upstream-busy")  # the upstream drains its buffer after the close
    assert upstream.written == []
