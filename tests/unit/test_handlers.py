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
from proxy.enforcement import Decision, Enforcer
from proxy.handlers.base import Answer, Forward, Session
from proxy.handlers.registry import DECODED_VERSIONS, HANDLERS
from proxy.topics import TopicCache
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.managers import SENSOR_EXPIRATION_MS
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig
from tests.harness import handler_exchange as exchange
from tests.harness import handler_request as request
from tests.wire import decode_request, decode_response, request_frame, response_frame

WINDOWS = QuotaSettings(client=MetricConfig(samples=2, window_ms=1000))
QUOTA = {QuotaEntity(client_id=DEFAULT): 1000.0}


def session(limits: dict[QuotaType, dict[QuotaEntity, float]] | None = None) -> Session:
    enforcer = Enforcer(QuotaEngine(QuotaConfig(WINDOWS, limits or {})))
    return Session(enforcer, lambda node, host, port: ("proxy.local", 20000 + node), TopicCache())


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
    assert set(DECODED_VERSIONS) == set(HANDLERS)
    assert all(DECODED_VERSIONS[key] == MAX_DECODABLE_VERSION[key] for key in HANDLERS)


def test_produce_is_charged_when_read_and_held_once_over_quota() -> None:
    handler, s = HANDLERS[PRODUCE], session({QuotaType.PRODUCE: QUOTA})
    first = handler.on_request(s, request(produce(500)))
    assert isinstance(first, Forward) and not first.held and first.expects_response
    over = handler.on_request(s, request(produce(5000), 1))
    assert isinstance(over, Forward) and over.held and over.mute_ms == 0
    reply = handler.on_response(s, response_frame(PRODUCE, 7, b"\0" * 8), exchange(produce(1)), 2)
    assert reply.bandwidth is None  # the state handed back: this exchange carried none
    decision = over.state
    assert isinstance(decision, Decision) and decision.throttle_ms > 0
    reply = handler.on_response(
        s, response_frame(PRODUCE, 7, b"\0" * 8), exchange(produce(1), decision), 2
    )
    # judged again when answered, as Kafka judges it: the rate's window grew by 1 ms since
    assert reply.bandwidth == decision._replace(throttle_ms=decision.throttle_ms - 1)


def test_a_connection_resolves_its_principal_once_per_client_and_user() -> None:
    s = session({QuotaType.PRODUCE: QUOTA})
    kept = s.principal("app")
    assert s.principal("app") is kept
    other = s.principal("other-app")
    assert other is not kept and other.client_id == "other-app"
    s.user = "alice"  # a SASL exchange succeeded
    assert s.principal("other-app").user == "alice"


def test_a_reload_reaches_a_connection_that_already_resolved_its_sensors() -> None:
    s = session({QuotaType.PRODUCE: QUOTA})
    handler, enforcer = HANDLERS[PRODUCE], s.enforcer
    under = handler.on_request(s, request(produce(900)))
    assert isinstance(under, Forward) and not under.held
    tighter = {QuotaType.PRODUCE: {QuotaEntity(client_id=DEFAULT): 100.0}}
    assert enforcer.apply(QuotaConfig(WINDOWS, tighter), frozenset(), True)
    over = handler.on_request(s, request(produce(900), 1))
    assert isinstance(over, Forward) and over.held  # judged on the new limit, same history
    assert next(enforcer.engine.produce.sensors()).limit == 100.0
    # new windows: a fresh engine, which the connection charges from its next request
    fresh = QuotaSettings(client=MetricConfig(samples=3, window_ms=1000))
    assert not enforcer.apply(QuotaConfig(fresh, tighter), frozenset(), True)
    handler.on_request(s, request(produce(50), 2))
    assert next(enforcer.engine.produce.sensors()).rate.total() == len(produce(50)) - 4


def test_an_expired_sensor_is_not_charged_by_a_connection_that_kept_it() -> None:
    s = session({QuotaType.PRODUCE: QUOTA})
    handler, enforcer = HANDLERS[PRODUCE], s.enforcer
    handler.on_request(s, request(produce(10)))
    hour_later = SENSOR_EXPIRATION_MS + 1
    assert enforcer.expire(hour_later) == 1
    handler.on_request(s, request(produce(10), hour_later))
    (sensors,) = enforcer.engine.produce.sensors()  # charged where metrics will read it
    assert sensors.last_record_ms == hour_later


def test_produce_with_acks_0_expects_no_response_and_mutes_at_once() -> None:
    handler, s = HANDLERS[PRODUCE], session({QuotaType.PRODUCE: QUOTA})
    outcome = handler.on_request(s, request(produce(5000, acks=0)))
    assert isinstance(outcome, Forward) and not outcome.expects_response
    assert outcome.mute_ms > 0
    unquoted = HANDLERS[PRODUCE].on_request(session(), request(produce(5000, acks=0)))
    assert isinstance(unquoted, Forward) and unquoted.mute_ms == 0


def test_fetch_is_capped_held_and_answered_empty_once_over_quota() -> None:
    handler, s = HANDLERS[FETCH], session({QuotaType.FETCH: QUOTA})
    outcome = handler.on_request(s, request(fetch(10**6)))
    assert isinstance(outcome, Forward) and outcome.held
    assert decode_request(FetchRequest, outcome.frame).max_bytes == 1000  # one window's worth
    assert outcome.wait_ns == 500 * 1_000_000  # a long poll's wait is not request time
    records = FetchResponse(
        version=11,
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[("t", [(0, 0, 10, 10, 0, None, -1, b"x" * 5000)])],
    )
    reply = handler.on_response(s, response_frame(FETCH, 11, records), exchange(fetch(1)), 10)
    assert reply.bandwidth is not None and reply.bandwidth.throttle_ms > 0
    refused = handler.on_request(s, request(fetch(10**6), 20))
    assert isinstance(refused, Answer) and refused.mute_ms > 0
    empty = decode_response(FetchResponse, refused.response, FETCH, 11)
    assert empty.throttle_time_ms == refused.mute_ms and list(empty.responses) == []
    # a principal without a consumer quota is neither capped nor held
    free = HANDLERS[FETCH].on_request(session(), request(fetch(10**6)))
    assert isinstance(free, Forward) and not free.held
    assert free.frame == fetch(10**6)


def test_sasl_names_the_principal_only_on_success() -> None:
    s = session()
    handshake = request_frame(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    HANDLERS[SASL_HANDSHAKE].on_request(s, request(handshake))
    body = SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"])
    reply = response_frame(SASL_HANDSHAKE, 1, body)
    HANDLERS[SASL_HANDSHAKE].on_response(s, reply, exchange(handshake), 0)
    token = SaslAuthenticateRequest(auth_bytes=b"\0alice\0secret")
    authenticate = request_frame(SASL_AUTHENTICATE, 2, token)
    HANDLERS[SASL_AUTHENTICATE].on_request(s, request(authenticate))
    assert s.user == "ANONYMOUS"
    ok = SaslAuthenticateResponse(
        error_code=0, error_message=None, auth_bytes=b"", session_lifetime_ms=0
    )
    answer = response_frame(SASL_AUTHENTICATE, 2, ok)
    HANDLERS[SASL_AUTHENTICATE].on_response(s, answer, exchange(authenticate), 0)
    assert s.user == "alice"


def test_api_versions_newer_than_decoded_is_answered_here_and_responses_capped() -> None:
    handler, s = HANDLERS[API_VERSIONS], session()
    newest = DECODED_VERSIONS[API_VERSIONS]
    too_new = request_frame(API_VERSIONS, newest + 1, b"", correlation_id=42)
    answered = handler.on_request(s, request(too_new))
    assert isinstance(answered, Answer) and response_correlation_id(answered.response) == 42
    assert struct.unpack_from(">h", answered.response, 8)[0] == 35  # UNSUPPORTED_VERSION
    supported = request_frame(API_VERSIONS, 3, b"")
    assert handler.on_request(s, request(supported)) == Forward(supported)
    entry = ApiVersionsResponse.ApiVersion
    broker = ApiVersionsResponse(
        version=3,
        error_code=0,
        throttle_time_ms=0,
        api_keys=[entry(version=3, api_key=METADATA, min_version=0, max_version=99)],
    )
    reply = handler.on_response(s, response_frame(API_VERSIONS, 3, broker), exchange(supported), 0)
    capped = decode_response(ApiVersionsResponse, reply.frame, API_VERSIONS, 3)
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
    metadata = request_frame(METADATA, 9, b"")
    reply = HANDLERS[METADATA].on_response(
        session(), response_frame(METADATA, 9, msg), exchange(metadata), 0
    )
    brokers = decode_response(MetadataResponse, reply.frame, METADATA, 9).brokers
    assert [(b.node_id, b.host, b.port) for b in brokers] == [(2, "proxy.local", 20002)]
