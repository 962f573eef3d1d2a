"""One harness per decoder the proxy runs on client bytes.

A harness takes one fuzzer input and may raise only ProtocolError, the documented answer to
bytes that are not Kafka protocol (the connection closes); any other exception is a finding.
The per-API harnesses force their API's key into the input's header and call its handler as
the connection does, with every quota set low, so the quota paths behind the decoders run
too. `connection` drives a whole ConnectionCore, which must never raise at all.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable

from kafka.protocol.producer import ProduceRequest

from protocol.apis import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    FETCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from protocol.errors import ProtocolError
from protocol.frames import FrameSplitter
from protocol.headers import parse_request_header, request_body_offset
from protocol.sasl import PLAIN
from proxy.enforcement import Enforcer
from proxy.handlers.base import Defer, Session
from proxy.handlers.registry import HANDLERS
from proxy.topics import TopicCache
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig
from tests.harness import VirtualClock, connect, handler_request
from tests.wire import request_frame

Harness = Callable[[bytes], None]

_EVERYONE = QuotaEntity(client_id=DEFAULT)
#: every quota type low enough that fuzzed requests cross it
_LIMITS = {
    QuotaType.PRODUCE: 1000.0,
    QuotaType.FETCH: 1000.0,
    QuotaType.REQUEST: 1.0,
    QuotaType.CONTROLLER_MUTATION: 2.0,
    QuotaType.PRODUCER_IDS: 2.0,
}
_QUOTAS = QuotaConfig(
    QuotaSettings(client=MetricConfig(samples=2, window_ms=1000)),
    {quota: {_EVERYONE: limit} for quota, limit in _LIMITS.items()},
)
_ENFORCER = Enforcer(QuotaEngine(_QUOTAS))
_SESSION = Session(_ENFORCER, lambda node, host, port: ("proxy.local", 20000 + node), TopicCache())
_SASL_MECHANISMS = (PLAIN, "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", None)
_API_KEY = struct.Struct(">h")
#: ms of virtual time per fuzzer input: quota windows pass, sensors expire
_STEP_MS = 97
_now_ms = 0


def _with_api_key(data: bytes, api_key: int) -> bytes:
    """The input as a frame of this API: its bytes 4-5 (after the size) hold the key."""
    if len(data) < 6:
        return data
    return data[:4] + _API_KEY.pack(api_key) + data[6:]


def handle(frame: bytes, session: Session = _SESSION) -> None:
    """What the connection does with one request frame, handler and all."""
    global _now_ms
    _now_ms += _STEP_MS
    header = parse_request_header(frame)
    request = handler_request(frame, _now_ms)
    handler = HANDLERS[header.api_key]
    outcome = handler.on_request(session, request)
    if isinstance(outcome, Defer):
        handler.on_request(session, request._replace(refreshed=True))


def framing(data: bytes) -> None:
    """The stream cut into reads of sizes the input's last byte picks."""
    if not data:
        return
    splitter = FrameSplitter(max_frame_bytes=1 << 16)
    step, stream = data[-1] % 17 + 1, data
    frames: list[bytes] = []
    for start in range(0, len(stream), step):
        frames += splitter.feed(stream[start : start + step])
    taken = sum(map(len, frames))
    assert b"".join(frames) == stream[:taken], "frames are not the stream's bytes in order"
    assert taken + splitter.buffered == len(stream), "bytes lost or invented"
    for frame in frames:
        assert struct.unpack_from(">i", frame)[0] == len(frame) - 4, "a frame is not whole"


def header(data: bytes) -> None:
    parsed = parse_request_header(data)
    if parsed.api_key in HANDLERS:
        assert request_body_offset(data, parsed) <= len(data)


def produce(data: bytes) -> None:
    handle(_with_api_key(data, PRODUCE))


def record_batches(data: bytes) -> None:
    """The input as one partition's records, in a Produce of each record-batch-bearing layout
    (v3 classic, v9 flexible): the record batch headers are what the producer-id quota reads."""
    for version in (3, 9):
        body = ProduceRequest(
            version=version,
            transactional_id=None,
            acks=-1,
            timeout_ms=1000,
            topic_data=[("orders", [(0, data)])],
        )
        handle(request_frame(PRODUCE, version, body))


def fetch(data: bytes) -> None:
    handle(_with_api_key(data, FETCH))


def sasl(data: bytes) -> None:
    """A handshake, or an authenticate in the middle of an exchange of the mechanism the
    input's last byte picks."""
    if not data:
        return
    session = Session(_ENFORCER, _SESSION.advertise, TopicCache())
    if data[-1] & 1:
        handle(_with_api_key(data, SASL_HANDSHAKE), session)
        return
    session.sasl.mechanism = _SASL_MECHANISMS[data[-1] % len(_SASL_MECHANISMS)]
    handle(_with_api_key(data, SASL_AUTHENTICATE), session)


def admin(data: bytes) -> None:
    """CreateTopics, CreatePartitions or DeleteTopics, the input's last byte picks which."""
    if data:
        api_key = (CREATE_TOPICS, CREATE_PARTITIONS, DELETE_TOPICS)[data[-1] % 3]
        handle(_with_api_key(data, api_key))


def connection(data: bytes) -> None:
    """Bytes into a whole ConnectionCore, cut into reads, on a virtual clock: the core closes
    the client on bad input and never raises; it sends upstream only whole frames."""
    if not data:
        return
    clock = VirtualClock()
    core, client, upstream = connect(_ENFORCER, clock)
    step, stream = data[-1] % 251 + 1, data
    for start in range(0, len(stream), step):
        if client.closed:
            break
        core.requests_received(stream[start : start + step])
        clock.advance(_STEP_MS * 1_000_000)
    clock.advance(60 * 1_000_000_000)
    for frame in upstream.written:
        assert struct.unpack_from(">i", frame)[0] == len(frame) - 4, "a partial frame upstream"


HARNESSES: dict[str, Harness] = {
    "framing": framing,
    "header": header,
    "produce": produce,
    "record_batches": record_batches,
    "fetch": fetch,
    "sasl": sasl,
    "admin": admin,
    "connection": connection,
}


def run(harness: Harness, data: bytes) -> None:
    """One input: ProtocolError is the expected refusal; anything else propagates."""
    with contextlib.suppress(ProtocolError):
        harness(data)
