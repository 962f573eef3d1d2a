"""One harness per decoder the proxy runs on client bytes.

A harness takes one fuzzer input and may raise only ProtocolError, the documented answer to
bytes that are not Kafka protocol (the connection closes); any other exception is a finding.
The per-API harnesses force their API's key into the input's header and call its handler as
the connection does, three times, with every quota set low, so the request-side quota paths
(bytes produced, mutations, producer ids) run too. `connection` drives a whole
ConnectionCore and answers what it forwards with responses real brokers gave, so the
response side runs on state built from client bytes (bytes and request time charged,
throttle times written into responses, mutations refunded); it must never raise at all.
Every input starts from fresh quota state, so a saved finding replays alone.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import struct
from collections.abc import Callable
from typing import NamedTuple

from kafka.protocol.producer import ProduceRequest

from config.proxy import ProxySettings
from localkafka.inprocess.harness import (
    RecordingTransport,
    VirtualClock,
    connect,
    handler_channel,
    handler_request,
    proxy_context,
)
from localkafka.inprocess.wire import request_frame
from protocol.apis import (
    ALTER_CLIENT_QUOTAS,
    CONSUMER_GROUP_HEARTBEAT,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DECODED,
    DELETE_TOPICS,
    DESCRIBE_CLIENT_QUOTAS,
    FETCH,
    MAX_DECODABLE_VERSION,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    response_class,
)
from protocol.errors import ProtocolError
from protocol.frames import FrameSplitter
from protocol.headers import (
    RequestHeader,
    encode_response,
    parse_request_header,
    request_body_offset,
    response_body_offset,
    response_correlation_id,
)
from protocol.produce import read_produce
from proxy.enforcement import Enforcement
from proxy.handlers.base import Channel, Defer
from proxy.handlers.registry import HANDLERS
from proxy.runtime.context import ProxyContext
from proxy.runtime.core import ConnectionCore
from proxy.runtime.memory_pool import MemoryPool
from proxy.runtime.usage_recorder import UsageRecorder
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, GUARDS, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig
from tests.fuzz.seeds import RESPONSES

Harness = Callable[[bytes], None]

_EVERYONE = QuotaEntity(client_id=DEFAULT)
#: every quota type low enough that fuzzed requests cross it
_LIMITS = {
    QuotaType.PRODUCE: 100.0,
    QuotaType.FETCH: 10.0,
    QuotaType.REQUEST: 1.0,
    QuotaType.CONTROLLER_MUTATION: 0.5,
    QuotaType.PRODUCER_IDS: 1.0,
    **{guard: 1.0 for guard in GUARDS.values()},
}
_QUOTAS = QuotaConfig(
    QuotaSettings(client=MetricConfig(samples=2, window_ms=1000)),
    {quota: {_EVERYONE: limit} for quota, limit in _LIMITS.items()},
)
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", None)
_API_KEY = struct.Struct(">h")
_INT32 = struct.Struct(">i")
#: a per-API harness hands its request to the handler this often, this far apart, so one
#: input crosses the quotas (each input starts from nothing: a finding replays alone)
_REPEATS, _STEP_MS = 3, 400
#: the connection harness's pool, small enough that fuzzed frame sizes exhaust it
_POOL_BYTES = 64 * 1024
#: after the input: time passes in these steps until the connection has nothing left to do
_SETTLE_NS, _SETTLE_ROUNDS = 30 * 1_000_000_000, 200


def _channel() -> Channel:
    enforcement = Enforcement(QuotaEngine(_QUOTAS))
    settings = ProxySettings(advertised_host="proxy.local", broker_port_base=20000)
    return handler_channel(proxy_context(enforcement, settings=settings))


def _with_api_key(data: bytes, api_key: int) -> bytes:
    """The input as a frame of this API: its bytes 4-5 (after the size) hold the key."""
    if len(data) < 6:
        return data
    return data[:4] + _API_KEY.pack(api_key) + data[6:]


def handle(frame: bytes, channel: Channel | None = None) -> None:
    """What the connection does with one request frame, handler and all, a few times."""
    channel = channel or _channel()
    header = parse_request_header(frame)
    handler = HANDLERS[header.api_key]
    for repeat in range(_REPEATS):
        request = handler_request(channel, frame, repeat * _STEP_MS)
        if isinstance(handler.on_request(channel, request), Defer):
            request.refreshed = True
            handler.on_request(channel, request)


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
        assert _INT32.unpack_from(frame)[0] == len(frame) - 4, "a frame is not whole"


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
    """Over the consumer quota from the start, so the throttled answer (an empty Fetch at the
    client's version) is written too."""
    frame, channel = _with_api_key(data, FETCH), _channel()
    context = channel.runtime
    assert isinstance(context, ProxyContext)
    context.quotas.fetch.charge(handler_request(channel, frame), 10_000)
    handle(frame, channel)


def group_heartbeat(data: bytes) -> None:
    """The input as a ConsumerGroupHeartbeat, charged to its guard a few times: the guard
    reads whether it only keeps its member alive."""
    frame, channel = _with_api_key(data, CONSUMER_GROUP_HEARTBEAT), _channel()
    context = channel.runtime
    assert isinstance(context, ProxyContext)
    for repeat in range(_REPEATS):
        context.quotas.guards.charge(handler_request(channel, frame, repeat * _STEP_MS), None)


def sasl(data: bytes) -> None:
    """A handshake, or an authenticate in the middle of an exchange of the mechanism the
    input's last byte picks."""
    if not data:
        return
    channel = _channel()
    if data[-1] & 1:
        handle(_with_api_key(data, SASL_HANDSHAKE), channel)
        return
    channel.sasl.mechanism = _SASL_MECHANISMS[(data[-1] >> 1) % len(_SASL_MECHANISMS)]
    handle(_with_api_key(data, SASL_AUTHENTICATE), channel)


_ADMIN = (
    CREATE_TOPICS,
    CREATE_PARTITIONS,
    DELETE_TOPICS,
    DESCRIBE_CLIENT_QUOTAS,
    ALTER_CLIENT_QUOTAS,
)


def admin(data: bytes) -> None:
    """CreateTopics, CreatePartitions, DeleteTopics, DescribeClientQuotas or
    AlterClientQuotas, the input's last byte picks which."""
    if data:
        handle(_with_api_key(data, _ADMIN[data[-1] % len(_ADMIN)]))


class _Malformed(logging.Handler):
    """The core turns a decoder's struct.error, IndexError or ValueError into a closed
    connection and a log line; for the fuzzer that is a missed bounds check."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "malformed request" in message:
            self.seen.append(message)


def _acks(frame: bytes, header: RequestHeader) -> int:
    return read_produce(frame, header, request_body_offset(frame, header)).acks


def _answer(core: ConnectionCore, upstream: RecordingTransport, answered: int) -> int:
    """Answer the requests sent upstream since `answered`, in order, with responses real
    brokers gave to the same API and version; stop at one that has none."""
    written = upstream.written
    while answered < len(written) and not core.closed:
        frame = written[answered]
        header = parse_request_header(frame)
        if header.api_key == PRODUCE and _acks(frame, header) == 0:
            answered += 1  # expects no response
            continue
        kept = _responses(header.api_key, header.api_version)
        if not kept:
            break
        response = kept[header.correlation_id % len(kept)]
        core.responses_received(response[:4] + _INT32.pack(header.correlation_id) + response[8:])
        answered += 1
    return answered


@functools.cache
def _responses(api_key: int, version: int) -> list[bytes]:
    """Captured responses of this version; else (the proxy's own requests use versions no
    client chose) captured ones of another version, re-encoded at this one."""
    exact = RESPONSES.get((api_key, version))
    if exact or api_key not in DECODED or version > MAX_DECODABLE_VERSION[api_key]:
        return exact or []  # a version the broker does not know: it would close
    others = sorted((v, frames) for (key, v), frames in RESPONSES.items() if key == api_key)
    if not others:
        return []
    other, frames = others[-1]
    cls = response_class(api_key)
    converted = []
    for frame in frames:
        msg = cls.decode(frame[response_body_offset(frame, api_key, other) :], version=other)
        fields = {name: getattr(msg, name) for name in cls.fields}  # as keep_topics: afresh
        body = bytes(cls(version=version, **fields).encode(version=version))
        converted.append(encode_response(response_correlation_id(frame), api_key, version, body))
    return converted


class Driven(NamedTuple):
    core: ConnectionCore
    client: RecordingTransport
    upstream: RecordingTransport
    #: how many of the frames sent upstream got their response
    answered: int
    #: "malformed request" lines the core logged
    malformed: list[str]


def drive_connection(data: bytes) -> Driven:
    """Bytes into a whole ConnectionCore (memory pool and usage recorder included), cut into
    reads, on a virtual clock, each request answered as a broker answered it."""
    clock = VirtualClock()
    core, client, upstream = connect(
        Enforcement(QuotaEngine(_QUOTAS)),
        clock,
        usage=UsageRecorder("fuzz", 0),
        pool=MemoryPool(_POOL_BYTES),
    )
    malformed = _Malformed()
    log = logging.getLogger("proxy")
    log.addHandler(malformed)
    propagate, log.propagate = log.propagate, False  # thousands of inputs, no log lines
    answered = 0
    try:
        # the last two bytes pick the size of each read and the broker's time for each
        step, step_ns = data[-1] % 251 + 1, data[-2 % len(data)] % 50 * 1_000_000
        for start in range(0, len(data), step):
            if client.closed:
                break
            core.requests_received(data[start : start + step])
            clock.advance(step_ns)  # charged as request time
            answered = _answer(core, upstream, answered)
        for _ in range(_SETTLE_ROUNDS):  # throttles end, held requests go on, till all rest
            sent = len(upstream.written)
            clock.advance(_SETTLE_NS)
            answered = _answer(core, upstream, answered)
            if len(upstream.written) == sent and answered == sent and not clock.pending():
                break
    finally:
        log.removeHandler(malformed)
        log.propagate = propagate
    return Driven(core, client, upstream, answered, malformed.seen)


def connection(data: bytes) -> None:
    """The core closes the client on bad input and never raises, never meets a missed bounds
    check, and sends upstream only whole frames."""
    if not data:
        return
    driven = drive_connection(data)
    assert not driven.malformed, driven.malformed[0]
    for frame in driven.upstream.written:
        assert _INT32.unpack_from(frame)[0] == len(frame) - 4, "a partial frame upstream"


HARNESSES: dict[str, Harness] = {
    "framing": framing,
    "header": header,
    "produce": produce,
    "record_batches": record_batches,
    "fetch": fetch,
    "sasl": sasl,
    "admin": admin,
    "group_heartbeat": group_heartbeat,
    "connection": connection,
}


def run(harness: Harness, data: bytes) -> None:
    """One input: ProtocolError is the expected refusal; anything else propagates."""
    with contextlib.suppress(ProtocolError):
        harness(data)
