"""Requests of the proxy's own on a client's upstream connection, and the topic cache."""

from __future__ import annotations

import struct
import uuid

import pytest
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

import proxy.runtime.request_reader
from localkafka.inprocess.harness import RecordingTransport, VirtualClock, connect
from localkafka.inprocess.wire import decode_request, request_frame, response_frame
from protocol.apis import API_VERSIONS, METADATA, SASL_HANDSHAKE
from protocol.headers import parse_request_header, response_correlation_id
from protocol.metadata import OWN_METADATA_VERSION, TopicPartitions
from proxy.enforcement import Enforcement
from proxy.handlers.base import Channel, Defer, Forward, Handler, Outcome, Request, Route
from proxy.handlers.inquiries import ask_topics
from proxy.handlers.registry import ROUTES
from proxy.handlers.topic_cache import TopicCache
from proxy.runtime.core import ConnectionCore
from quotas.engine import QuotaEngine
from quotas.settings import QuotaConfig

OTHER_API = 7
TOPIC_ID = uuid.uuid4()


def bare_response(correlation_id: int) -> bytes:
    """A response to an API the proxy forwards undecoded: only the correlation id is read."""
    return struct.pack(">ii", 4, correlation_id)


def metadata_response(version: int, correlation_id: int, partitions: int) -> bytes:
    topic = MetadataResponse.MetadataResponseTopic
    partition = topic.MetadataResponsePartition
    msg = MetadataResponse(
        version=version,
        throttle_time_ms=0,
        brokers=[],
        cluster_id="c",
        controller_id=1,
        topics=[
            topic(
                version=version,
                error_code=0,
                name="orders",
                topic_id=TOPIC_ID,
                is_internal=False,
                partitions=[
                    partition(
                        version=version,
                        error_code=0,
                        partition_index=p,
                        leader_id=1,
                        leader_epoch=0,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                    for p in range(partitions)
                ],
            )
        ],
    )
    return response_frame(METADATA, version, msg, correlation_id)


def core() -> tuple[ConnectionCore, RecordingTransport, RecordingTransport]:
    return connect(Enforcement(QuotaEngine(QuotaConfig())), VirtualClock())


def test_own_request_keeps_its_place_and_its_response_never_reaches_the_client() -> None:
    conn, client, upstream = core()
    assert not ask_topics(conn.channel, ["orders"])  # the client has not shown it is past SASL
    conn.requests_received(request_frame(OTHER_API, 0, b"", 1))
    assert ask_topics(conn.channel, ["orders"])
    conn.requests_received(request_frame(OTHER_API, 0, b"", 2))
    sent = [parse_request_header(frame) for frame in upstream.written]
    assert [(h.api_key, h.client_id) for h in sent] == [
        (OTHER_API, "app"),
        (METADATA, "kafka-quota-proxy"),
        (OTHER_API, "app"),
    ]
    own = decode_request(MetadataRequest, upstream.written[1])
    assert [t.name for t in own.topics] == ["orders"] and not own.allow_auto_topic_creation
    own_id = sent[1].correlation_id
    conn.responses_received(
        bare_response(1) + metadata_response(OWN_METADATA_VERSION, own_id, 6) + bare_response(2)
    )
    assert [response_correlation_id(frame) for frame in client.written] == [1, 2]
    assert not client.closed
    topic = conn.channel.runtime.topics.by_name("orders")
    assert topic is not None and topic.partitions == 6 and topic.topic_id == TOPIC_ID
    assert conn.channel.runtime.topics.by_id(TOPIC_ID) == topic


def test_no_own_request_while_the_client_authenticates() -> None:
    conn, _, upstream = core()
    conn.requests_received(request_frame(API_VERSIONS, 3, b"", 1))
    assert not ask_topics(conn.channel, ["orders"])
    conn.requests_received(request_frame(OTHER_API, 0, b"", 2))
    assert ask_topics(conn.channel, ["orders"])
    conn.requests_received(request_frame(SASL_HANDSHAKE, 1, b"\x00\x05PLAIN", 3))  # re-auth
    assert not ask_topics(conn.channel, ["orders"])
    assert len(upstream.written) == 4  # three of the client's, one of the proxy's


def test_client_metadata_responses_feed_the_topic_cache() -> None:
    conn, client, _ = core()
    conn.requests_received(request_frame(METADATA, 12, b"", 5))
    conn.responses_received(metadata_response(12, 5, 3))
    assert response_correlation_id(client.written[0]) == 5
    topic = conn.channel.runtime.topics.by_name("orders")
    assert topic is not None and topic.partitions == 3
    conn.channel.runtime.topics.forget(["orders"])
    assert conn.channel.runtime.topics.by_id(TOPIC_ID) is None


class NeedsTopic(Handler):
    """Forwards a request once the cache knows `orders`, recording what it knew."""

    def __init__(self) -> None:
        self.seen: list[tuple[bool, int | None]] = []

    def on_request(self, channel: Channel, request: Request) -> Outcome:
        topic = channel.runtime.topics.by_name("orders")
        self.seen.append((request.refreshed, topic and topic.partitions))
        if topic is None and not request.refreshed and ask_topics(channel, ["orders"]):
            return Defer()
        return Forward(request.frame)


def route(monkeypatch: pytest.MonkeyPatch, api_key: int, handler: Handler) -> None:
    """Have the connection hand this api_key's requests to `handler`."""
    routes = list(ROUTES)
    routes[api_key] = Route(handler, True, handler.stage)
    monkeypatch.setattr(proxy.runtime.request_reader, "ROUTES", tuple(routes))


def test_a_deferred_request_and_those_after_it_wait_for_the_topics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handler = NeedsTopic()
    route(monkeypatch, OTHER_API, handler)
    clock = VirtualClock()
    conn, client, upstream = connect(Enforcement(QuotaEngine(QuotaConfig())), clock)
    two = request_frame(OTHER_API, 0, b"", 2) + request_frame(OTHER_API, 0, b"", 3)
    conn.requests_received(two)  # one read
    sent = [parse_request_header(frame) for frame in upstream.written]
    # asked for, and nothing else sent meanwhile
    assert [(h.api_key, h.client_id) for h in sent] == [(METADATA, "kafka-quota-proxy")]
    assert not client.reading
    conn.responses_received(metadata_response(OWN_METADATA_VERSION, sent[0].correlation_id, 6))
    assert len(upstream.written) == 1  # the deferred request waits for the next turn
    clock.advance(0)
    assert [parse_request_header(f).correlation_id for f in upstream.written[1:]] == [2, 3]
    assert handler.seen == [(False, None), (True, 6), (False, 6)]
    assert client.reading and client.written == []


def test_a_deferral_that_cannot_ask_goes_on_with_the_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    handler = NeedsTopic()
    route(monkeypatch, OTHER_API, handler)
    conn, _, upstream = core()
    # as when the upstream connection cannot take a request of the proxy's (closing)
    monkeypatch.setattr(conn, "ask", lambda *args: False)
    conn.requests_received(request_frame(OTHER_API, 0, b"", 2))
    assert handler.seen == [(False, None)]  # decided at once, on what the cache knows
    assert [parse_request_header(f).correlation_id for f in upstream.written] == [2]


def test_the_cache_keeps_ids_and_drops_topics_the_cluster_does_not_know() -> None:
    cache = TopicCache()
    cache.learn([TopicPartitions("orders", TOPIC_ID, 3)])
    cache.learn([TopicPartitions("orders", None, 4)])  # a Metadata version without ids
    assert cache.by_id(TOPIC_ID) == TopicPartitions("orders", TOPIC_ID, 4)
    recreated = uuid.uuid4()
    cache.learn([TopicPartitions("orders", recreated, 1)])
    assert cache.by_id(TOPIC_ID) is None and cache.by_id(recreated) is not None
    conn, _, _ = core()
    conn.channel.runtime.topics.learn([TopicPartitions("orders", TOPIC_ID, 3)])
    gone = MetadataResponse(
        version=12,
        throttle_time_ms=0,
        brokers=[],
        cluster_id="c",
        controller_id=1,
        topics=[
            MetadataResponse.MetadataResponseTopic(
                version=12, error_code=3, name="orders", topic_id=TOPIC_ID, partitions=[]
            )
        ],
    )
    conn.requests_received(request_frame(METADATA, 12, b"", 5))
    conn.responses_received(response_frame(METADATA, 12, gone, 5))
    assert conn.channel.runtime.topics.by_name("orders") is None
