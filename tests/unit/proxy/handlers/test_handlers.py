"""Each API handler called directly: a request and the time in, the outcome out."""

from __future__ import annotations

import struct

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from config.proxy import ProxySettings
from localkafka.inprocess.harness import handler_channel, handler_request, proxy_context, responded
from localkafka.inprocess.wire import decode_request, decode_response, request_frame, response_frame
from protocol.apis import (
    API_VERSIONS,
    FETCH,
    MAX_DECODABLE_VERSION,
    METADATA,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from protocol.headers import response_correlation_id
from proxy.enforcement import Enforcement
from proxy.handlers.base import Answer, Channel, Forward, Request
from proxy.handlers.registry import DECODED_VERSIONS, HANDLERS, ROUTES
from proxy.runtime.context import ProxyContext
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.managers import SENSOR_EXPIRATION_MS
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig
from quotas.verdicts import Verdict

WINDOWS = QuotaSettings(client=MetricConfig(samples=2, window_ms=1000))
QUOTA = {QuotaEntity(client_id=DEFAULT): 1000.0}
#: the proxy serves broker N at proxy.local:20000 + N
SETTINGS = ProxySettings(advertised_host="proxy.local", broker_port_base=20000)


def channel(limits: dict[QuotaType, dict[QuotaEntity, float]] | None = None) -> Channel:
    enforcement = Enforcement(QuotaEngine(QuotaConfig(WINDOWS, limits or {})))
    return handler_channel(proxy_context(enforcement, settings=SETTINGS))


def enforcement(s: Channel) -> Enforcement:
    assert isinstance(s.runtime, ProxyContext)
    return s.runtime.quotas


def settle_now(s: Channel, r: Request) -> int:
    """What the connection applies as a mute for a request no response will carry."""
    return enforcement(s).settlement.settle_now(r, r.now_ms)


def produce(size: int, acks: int = 1) -> bytes:
    body = ProduceRequest(
        version=7,
        transactional_id=None,
        acks=acks,
        timeout_ms=1000,
        topic_data=[("t", [(0, b"x" * size)])],
    )
    return request_frame(PRODUCE, 7, body)


def fetch(max_bytes: int) -> bytes:
    body = FetchRequest(
        version=11,
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[],
        forgotten_topics_data=[],
        rack_id="",
    )
    return request_frame(FETCH, 11, body)


def test_the_registry_is_the_list_of_decoded_apis() -> None:
    assert HANDLERS.get(7) is None  # forwarded untouched, never a KeyError
    assert ROUTES[11].handler is None and ROUTES[11].request_time  # JoinGroup, untouched
    assert not ROUTES[7].request_time  # ControlledShutdown, a cluster action
    assert not ROUTES[SASL_HANDSHAKE].request_time  # Kafka's exempt APIs are not charged
    assert set(DECODED_VERSIONS) == set(HANDLERS)
    assert all(DECODED_VERSIONS[key] == MAX_DECODABLE_VERSION[key] for key in HANDLERS)


def test_produce_is_charged_when_read_and_stops_reading_once_over_quota() -> None:
    handler, s = HANDLERS[PRODUCE], channel({QuotaType.PRODUCE: QUOTA})
    under = handler_request(s, produce(500))
    first = handler.on_request(s, under)
    assert isinstance(first, Forward) and not first.stops_reading and first.expects_response
    over_request = handler_request(s, produce(5000), 1)
    over = handler.on_request(s, over_request)
    assert isinstance(over, Forward) and over.stops_reading
    assert settle_now(s, under) == 0  # nothing to apply at once: the response carries it
    handler.on_response(s, response_frame(PRODUCE, 7, b"\0" * 8), responded(under, 2))
    assert under.verdict is None  # the request under quota carried none to settle
    verdict = over_request.verdict
    assert isinstance(verdict, Verdict) and verdict.throttle_ms > 0
    handler.on_response(s, response_frame(PRODUCE, 7, b"\0" * 8), responded(over_request, 2))
    # judged again when answered, as Kafka judges it: the rate's window grew by 1 ms since
    assert verdict.at(2) == verdict.throttle_ms - 1


def test_a_connection_resolves_its_principal_once_per_client_and_user() -> None:
    sensors = enforcement(channel({QuotaType.PRODUCE: QUOTA})).sensors
    kept = sensors.principal(None, "ANONYMOUS", "app")
    assert sensors.principal(kept, "ANONYMOUS", "app") is kept
    other = sensors.principal(kept, "ANONYMOUS", "other-app")
    assert other is not kept and other.client_id == "other-app"
    # a SASL exchange succeeded
    assert sensors.principal(other, "alice", "other-app").user == "alice"


def test_a_reload_reaches_a_connection_that_already_resolved_its_sensors() -> None:
    s = channel({QuotaType.PRODUCE: QUOTA})
    handler, quotas = HANDLERS[PRODUCE], enforcement(s)
    under = handler.on_request(s, handler_request(s, produce(900)))
    assert isinstance(under, Forward) and not under.stops_reading
    tighter = {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 100.0}}
    assert quotas.apply(QuotaConfig(WINDOWS, tighter), frozenset(), True)
    over = handler.on_request(s, handler_request(s, produce(900), 1))
    assert isinstance(over, Forward) and over.stops_reading  # judged on the new limit, same history
    assert next(quotas.engine.produce.sensors()).limit == 100.0
    # new windows: a fresh engine, which the connection charges from its next request
    fresh = QuotaSettings(client=MetricConfig(samples=3, window_ms=1000))
    assert not quotas.apply(QuotaConfig(fresh, tighter), frozenset(), True)
    handler.on_request(s, handler_request(s, produce(50), 2))
    assert next(quotas.engine.produce.sensors()).rate.total() == len(produce(50)) - 4


def test_an_expired_sensor_is_not_charged_by_a_connection_that_kept_it() -> None:
    s = channel({QuotaType.PRODUCE: QUOTA})
    handler, quotas = HANDLERS[PRODUCE], enforcement(s)
    handler.on_request(s, handler_request(s, produce(10)))
    hour_later = SENSOR_EXPIRATION_MS + 1
    assert quotas.expire(hour_later) == 1
    handler.on_request(s, handler_request(s, produce(10), hour_later))
    (sensors,) = quotas.engine.produce.sensors()  # charged where metrics will read it
    assert sensors.last_record_ms == hour_later


def test_produce_with_acks_0_expects_no_response_and_mutes_at_once() -> None:
    handler, s = HANDLERS[PRODUCE], channel({QuotaType.PRODUCE: QUOTA})
    request = handler_request(s, produce(5000, acks=0))
    outcome = handler.on_request(s, request)
    assert isinstance(outcome, Forward) and not outcome.expects_response
    assert settle_now(s, request) > 0
    free = channel()
    unquoted = handler_request(free, produce(5000, acks=0))
    outcome = HANDLERS[PRODUCE].on_request(free, unquoted)
    assert isinstance(outcome, Forward) and settle_now(free, unquoted) == 0


def test_fetch_is_capped_stops_reading_and_is_answered_empty_once_over_quota() -> None:
    handler, s = HANDLERS[FETCH], channel({QuotaType.FETCH: QUOTA})
    first = handler_request(s, fetch(10**6))
    outcome = handler.on_request(s, first)
    assert isinstance(outcome, Forward) and outcome.stops_reading
    assert decode_request(FetchRequest, outcome.frame).max_bytes == 1000  # one window's worth
    assert outcome.waits  # a long poll may wait for data: its wait is not request time
    records = FetchResponse(
        version=11,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[("t", [(0, 0, 10, 10, 0, None, -1, b"x" * 5000)])],
    )
    handler.on_response(s, response_frame(FETCH, 11, records), responded(first, 10))
    assert first.verdict is not None and first.verdict.throttle_ms > 0
    again = handler_request(s, fetch(10**6), 20)
    refused = handler.on_request(s, again)
    mute = settle_now(s, again)
    assert isinstance(refused, Answer) and mute > 0
    empty = decode_response(FetchResponse, refused.response, FETCH, 11)
    assert empty.throttle_time_ms == mute and list(empty.responses) == []
    # a principal without a consumer quota is neither capped nor stops reading
    free = channel()
    outcome = HANDLERS[FETCH].on_request(free, handler_request(free, fetch(10**6)))
    assert isinstance(outcome, Forward) and not outcome.stops_reading
    assert outcome.frame == fetch(10**6)


def test_sasl_names_the_principal_only_on_success() -> None:
    s = channel()
    handshake = handler_request(
        s, request_frame(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    )
    HANDLERS[SASL_HANDSHAKE].on_request(s, handshake)
    body = SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"])
    reply = response_frame(SASL_HANDSHAKE, 1, body)
    HANDLERS[SASL_HANDSHAKE].on_response(s, reply, handshake)
    token = SaslAuthenticateRequest(auth_bytes=b"\0alice\0secret")
    authenticate = handler_request(s, request_frame(SASL_AUTHENTICATE, 2, token))
    HANDLERS[SASL_AUTHENTICATE].on_request(s, authenticate)
    assert s.user == "ANONYMOUS"
    ok = SaslAuthenticateResponse(
        error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=0
    )
    answer = response_frame(SASL_AUTHENTICATE, 2, ok)
    HANDLERS[SASL_AUTHENTICATE].on_response(s, answer, authenticate)
    assert s.user == "alice"


def test_api_versions_newer_than_decoded_is_answered_here_and_responses_capped() -> None:
    handler, s = HANDLERS[API_VERSIONS], channel()
    newest = DECODED_VERSIONS[API_VERSIONS]
    too_new = request_frame(API_VERSIONS, newest + 1, b"", correlation_id=42)
    answered = handler.on_request(s, handler_request(s, too_new))
    assert isinstance(answered, Answer) and response_correlation_id(answered.response) == 42
    assert struct.unpack_from(">h", answered.response, 8)[0] == 35  # UNSUPPORTED_VERSION
    supported = handler_request(s, request_frame(API_VERSIONS, 3, b""))
    assert handler.on_request(s, supported) == Forward(supported.frame)
    entry = ApiVersionsResponse.ApiVersion
    broker = ApiVersionsResponse(
        version=3,
        error_code=0,
        throttle_time_ms=0,
        api_keys=[entry(version=3, api_key=METADATA, min_version=0, max_version=99)],
    )
    reply = handler.on_response(s, response_frame(API_VERSIONS, 3, broker), supported)
    capped = decode_response(ApiVersionsResponse, reply, API_VERSIONS, 3)
    assert [e.max_version for e in capped.api_keys] == [DECODED_VERSIONS[METADATA]]


def test_metadata_names_only_proxy_addresses() -> None:
    broker = MetadataResponse.MetadataResponseBroker
    msg = MetadataResponse(
        version=9,
        throttle_time_ms=0,
        brokers=[broker(version=9, node_id=2, host="kafka-2", port=9092, rack=None)],
        cluster_id="c",
        controller_id=2,
        topics=[],
    )
    s = channel()
    metadata = handler_request(s, request_frame(METADATA, 9, b""))
    reply = HANDLERS[METADATA].on_response(s, response_frame(METADATA, 9, msg), metadata)
    brokers = decode_response(MetadataResponse, reply, METADATA, 9).brokers
    assert [(b.node_id, b.host, b.port) for b in brokers] == [(2, "proxy.local", 20002)]
