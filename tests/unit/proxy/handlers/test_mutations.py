"""Partition mutations (KIP-599) on the handler and the connection core, on a virtual clock.

The quota is Kafka's ControllerMutationQuotaTest's: controller_mutation_rate 2 with ten
one-second windows, a burst of 20 partitions.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from localkafka.inprocess.harness import (
    RecordingCluster,
    RecordingTransport,
    VirtualClock,
    connect,
    handler_channel,
    handler_request,
    proxy_context,
    responded,
)
from localkafka.inprocess.wire import decode_request, decode_response, request_frame, response_frame
from protocol.apis import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    METADATA,
)
from protocol.headers import parse_request_header, response_correlation_id
from protocol.metadata import TopicPartitions
from protocol.mutations import THROTTLING_QUOTA_EXCEEDED
from proxy.enforcement import Enforcement
from proxy.handlers.base import Answer, Channel, Defer, Forward, Outcome, Request
from proxy.handlers.inquiries import ask_topics
from proxy.handlers.registry import HANDLERS
from proxy.runtime.context import ProxyContext
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig, QuotaSettings
from quotas.stats import MetricConfig

SETTINGS = QuotaSettings(controller=MetricConfig(samples=10, window_ms=1000))
RATE_2 = {QuotaType.CONTROLLER_MUTATION: {QuotaEntity(client_id=DEFAULT): 2.0}}
TOPIC_ID = uuid.UUID(int=7)
CT = CreateTopicsRequest.CreatableTopic


def channel(limits: Any = RATE_2, shadow: frozenset[QuotaType] = frozenset()) -> Channel:
    enforcement = Enforcement(QuotaEngine(QuotaConfig(SETTINGS, limits)), shadow)
    return handler_channel(proxy_context(enforcement))


def context(s: Channel) -> ProxyContext:
    assert isinstance(s.runtime, ProxyContext)
    return s.runtime


def tokens(s: Channel, now: int = 0) -> float:
    manager = context(s).quotas.engine.controller_mutation
    return manager.tokens(next(manager.sensors()), now)


def decide(
    s: Channel, frame: bytes, now: int = 0, refreshed: bool = False
) -> tuple[Outcome, Request]:
    """The handler's outcome, and the request as the connection keeps it for the response."""
    request = handler_request(s, frame, now, refreshed)
    return HANDLERS[request.header.api_key].on_request(s, request), request


def respond(s: Channel, frame: bytes, request: Request, now: int = 0) -> bytes:
    """The response as the handler passes it on, answered at `now`."""
    return HANDLERS[request.header.api_key].on_response(s, frame, responded(request, now))


def settled(request: Request, now: int) -> int:
    """The throttle the request's verdict asks of settlement when answered at `now`."""
    return request.verdict.at(now) if request.verdict is not None else 0


def mute(s: Channel, request: Request) -> int:
    """What the connection applies at once for a request the proxy answers itself."""
    return context(s).quotas.settlement.settle_now(request, request.now_ms)


def asked(s: Channel, frame: bytes, now: int = 0) -> tuple[tuple[Any, ...], tuple[Any, ...], bool]:
    """What the handler asked the cluster before counting, deferring the request: the topics
    by name, by id, and whether num.partitions. Metadata questions are answered with the
    brokers alone, as for topics the cache already knows about."""
    outcome, _ = decide(s, frame, now)
    assert isinstance(outcome, Defer)
    connection = s.cluster
    assert isinstance(connection, RecordingCluster)
    names: list[str] = []
    ids: list[uuid.UUID] = []
    default = False
    while connection.asked:
        api_key, version, body, on_answer = connection.asked.pop(0)
        if api_key == METADATA:
            msg = MetadataRequest.decode(body, version=version)
            names += [t.name for t in msg.topics if t.name is not None]
            ids += [t.topic_id for t in msg.topics if t.name is None]
            on_answer(response_frame(METADATA, version, cluster(), 1))
        else:
            assert api_key == DESCRIBE_CONFIGS
            default = True
    return (tuple(names), tuple(ids), default)


def create_topics(
    *partitions: int, version: int = 7, validate_only: bool = False, correlation_id: int = 1
) -> bytes:
    msg = CreateTopicsRequest(
        version=version,
        topics=[
            CT(name=f"t{i}", num_partitions=n, replication_factor=1, assignments=[], configs=[])
            for i, n in enumerate(partitions)
        ],
        timeout_ms=30000,
        validate_only=validate_only,
    )
    return request_frame(CREATE_TOPICS, version, msg, correlation_id)


def created(version: int, *names: str, error: int = 0) -> bytes:
    result = CreateTopicsResponse.CreatableTopicResult
    msg = CreateTopicsResponse(
        version=version,
        throttle_time_ms=0,
        topics=[
            result(
                name=name,
                topic_id=None,
                error_code=error,
                error_message=None,
                topic_config_error_code=0,
                num_partitions=30,
                replication_factor=1,
                configs=[],
            )
            for name in names
        ],
    )
    return response_frame(CREATE_TOPICS, version, msg, 1)


def test_a_strict_create_admits_the_first_topic_and_refuses_the_second_in_order() -> None:
    s = channel()
    frame = create_topics(30, 30)
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward)
    sent = decode_request(CreateTopicsRequest, outcome.frame)
    assert [t.name for t in sent.topics] == ["t0"]  # the refused topic never goes upstream
    assert tokens(s) == -10  # 20 - 30; the refused topic is charged nothing
    reply = respond(s, created(7, "t0"), req, 0)
    answer = decode_response(CreateTopicsResponse, reply, CREATE_TOPICS, 7)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("t0", 0),
        ("t1", THROTTLING_QUOTA_EXCEEDED),
    ]
    assert answer.topics[1].error_message == "The throttling quota has been exceeded."
    # 10 tokens short at 2 per second; the core writes the settled throttle into the answer
    assert settled(req, 0) == 5000


def test_a_request_whose_every_topic_is_refused_is_answered_here() -> None:
    s = channel()
    assert isinstance(decide(s, create_topics(25), refreshed=True)[0], Forward)
    outcome, req = decide(s, create_topics(1, 1, correlation_id=2), 500, refreshed=True)
    assert isinstance(outcome, Answer) and mute(s, req) == 2000  # -4 at t=0.5s: 2 s
    answer = decode_response(CreateTopicsResponse, outcome.response, CREATE_TOPICS, 7)
    assert [t.error_code for t in answer.topics] == [THROTTLING_QUOTA_EXCEEDED] * 2
    assert answer.throttle_time_ms == 2000
    assert response_correlation_id(outcome.response) == 2


def test_a_refusal_with_a_throttle_that_rounds_to_zero_is_still_a_refusal() -> None:
    """Quota 10, ten 1 s windows: 100.001 partitions leave -0.001 tokens; Kafka then refuses
    the next request with error 89 and a 0 ms throttle."""
    limits = {QuotaType.CONTROLLER_MUTATION: {QuotaEntity(client_id=DEFAULT): 10.0}}
    s = channel(limits)
    manager = context(s).quotas.engine.controller_mutation
    sensors = manager.sensors_for("ANONYMOUS", "app", 0)
    assert manager.record_strict(sensors, 100.001, 0).admitted
    outcome, req = decide(s, create_topics(5), refreshed=True)
    assert isinstance(outcome, Answer) and mute(s, req) == 0
    answer = decode_response(CreateTopicsResponse, outcome.response, CREATE_TOPICS, 7)
    assert answer.topics[0].error_code == THROTTLING_QUOTA_EXCEEDED
    assert answer.throttle_time_ms == 0


def test_an_old_version_is_admitted_whole_and_throttled_by_muting() -> None:
    s = channel()
    frame = create_topics(30, 30, version=5)
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward) and outcome.frame == frame
    assert tokens(s) == -40
    reply = respond(s, created(5, "t0", "t1"), req, 0)
    assert reply == created(5, "t0", "t1")
    assert settled(req, 0) == 20000


def test_validate_only_and_principals_without_a_quota_are_not_charged() -> None:
    s = channel()
    frame = create_topics(30, validate_only=True)
    outcome, req = decide(s, frame)
    assert isinstance(outcome, Forward) and outcome.frame == frame and req.state is None
    assert tokens(s) == 20
    someone_else = {QuotaType.CONTROLLER_MUTATION: {QuotaEntity("alice"): 2.0}}
    free = channel(someone_else)
    outcome, req = decide(free, create_topics(500))
    assert isinstance(outcome, Forward) and req.state is None


def test_topics_the_broker_refuses_are_refunded() -> None:
    s = channel()
    frame = create_topics(8, 8)
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward) and tokens(s) == 4
    response = created(7, "t0")
    already = created(7, "t1", error=36)  # TOPIC_ALREADY_EXISTS: Kafka charges nothing
    merged = decode_response(CreateTopicsResponse, response, CREATE_TOPICS, 7).topics
    merged += decode_response(CreateTopicsResponse, already, CREATE_TOPICS, 7).topics
    both = CreateTopicsResponse(version=7, throttle_time_ms=0, topics=merged)
    respond(s, response_frame(CREATE_TOPICS, 7, both, 1), req, 0)
    assert tokens(s) == 12


def test_the_cluster_default_is_asked_for_before_counting_minus_one() -> None:
    s = channel()
    frame = create_topics(-1)
    assert asked(s, frame) == (("t0",), (), True)
    assert tokens(s) == 20  # nothing recorded before deferring
    context(s).topics.default_partitions = 12
    outcome, _req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward) and tokens(s) == 8


def test_create_partitions_counts_the_partitions_added_to_a_refreshed_count() -> None:
    s = channel()
    topic = CreatePartitionsRequest.CreatePartitionsTopic
    msg = CreatePartitionsRequest(
        version=3,
        topics=[
            topic(name="a", count=31, assignments=None),
            topic(name="b", count=31, assignments=None),
        ],
        timeout_ms=30000,
        validate_only=False,
    )
    frame = request_frame(CREATE_PARTITIONS, 3, msg)
    assert asked(s, frame) == (("a", "b"), (), False)
    context(s).topics.learn([TopicPartitions("a", None, 1), TopicPartitions("b", None, 1)])
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward)
    assert [t.name for t in decode_request(CreatePartitionsRequest, outcome.frame).topics] == ["a"]
    result = CreatePartitionsResponse.CreatePartitionsTopicResult
    upstream = CreatePartitionsResponse(
        version=3, throttle_time_ms=0, results=[result(name="a", error_code=0, error_message=None)]
    )
    reply = respond(s, response_frame(CREATE_PARTITIONS, 3, upstream, 1), req, 0)
    answer = decode_response(CreatePartitionsResponse, reply, CREATE_PARTITIONS, 3)
    assert [(r.name, r.error_code) for r in answer.results] == [
        ("a", 0),
        ("b", THROTTLING_QUOTA_EXCEEDED),
    ]


def test_delete_topics_by_id_counts_the_topics_partitions() -> None:
    s = channel()
    state = DeleteTopicsRequest.DeleteTopicState
    msg = DeleteTopicsRequest(
        version=6,
        topics=[state(name=None, topic_id=TOPIC_ID), state(name="gone", topic_id=None)],
        timeout_ms=30000,
    )
    frame = request_frame(DELETE_TOPICS, 6, msg)
    assert asked(s, frame) == (("gone",), (TOPIC_ID,), False)
    context(s).topics.learn([TopicPartitions("big", TOPIC_ID, 30)])
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward) and outcome.frame == frame  # "gone" counts nothing
    assert tokens(s) == -10
    result = DeleteTopicsResponse.DeletableTopicResult
    upstream = DeleteTopicsResponse(
        version=6,
        throttle_time_ms=0,
        responses=[
            result(name="gone", topic_id=None, error_code=3, error_message=None),
            result(name="big", topic_id=TOPIC_ID, error_code=0, error_message=None),
        ],
    )
    reply = respond(s, response_frame(DELETE_TOPICS, 6, upstream, 1), req, 0)
    assert reply == response_frame(DELETE_TOPICS, 6, upstream, 1)  # nothing refused
    assert tokens(s) == -10  # "gone" was charged nothing, so nothing is refunded


def described(*num_partitions: tuple[int, str | None]) -> DescribeConfigsResponse:
    """Brokers' answers about num.partitions: (broker id, value), None for an error."""
    result = DescribeConfigsResponse.DescribeConfigsResult
    config = result.DescribeConfigsResourceResult
    return DescribeConfigsResponse(
        version=4,
        throttle_time_ms=0,
        results=[
            result(
                error_code=0 if value is not None else 42,
                error_message=None if value is not None else "not me",
                resource_type=4,
                resource_name=str(broker),
                configs=[]
                if value is None
                else [
                    config(
                        name="num.partitions",
                        value=value,
                        read_only=False,
                        config_source=4,
                        is_sensitive=False,
                        synonyms=[],
                        config_type=3,
                        documentation=None,
                    )
                ],
            )
            for broker, value in num_partitions
        ],
    )


def cluster(*unknown: str) -> MetadataResponse:
    """Brokers 1 and 2, and these topics unknown to them."""
    broker = MetadataResponse.MetadataResponseBroker
    topic = MetadataResponse.MetadataResponseTopic
    return MetadataResponse(
        version=12,
        throttle_time_ms=0,
        brokers=[
            broker(version=12, node_id=n, host="kafka", port=9092 + n, rack=None) for n in (1, 2)
        ],
        cluster_id="c",
        controller_id=1,
        topics=[
            topic(version=12, error_code=3, name=name, topic_id=None, partitions=[])
            for name in unknown
        ],
    )


def test_the_core_asks_the_brokers_for_num_partitions_on_the_clients_connection() -> None:
    clock = VirtualClock()
    enforcement = Enforcement(QuotaEngine(QuotaConfig(SETTINGS, RATE_2)))
    conn, client, upstream = connect(enforcement, clock, RecordingTransport(), RecordingTransport())
    conn.requests_received(create_topics(-1, -1, -1, correlation_id=2))
    own = parse_request_header(upstream.written[0])
    asked = decode_request(MetadataRequest, upstream.written[0])
    assert own.api_key == METADATA and [t.name for t in asked.topics] == ["t0", "t1", "t2"]
    conn.responses_received(
        response_frame(METADATA, 12, cluster("t0", "t1", "t2"), own.correlation_id)
    )
    clock.advance(0)  # the brokers are known now: each is asked about itself
    own = parse_request_header(upstream.written[1])
    assert own.api_key == DESCRIBE_CONFIGS
    asked = decode_request(DescribeConfigsRequest, upstream.written[1])
    assert [r.resource_name for r in asked.resources] == ["1", "2"]
    answer = described((1, None), (2, "12"))
    conn.responses_received(response_frame(DESCRIBE_CONFIGS, 4, answer, own.correlation_id))
    clock.advance(0)
    assert context(conn.channel).topics.default_partitions == 12
    sent = decode_request(CreateTopicsRequest, upstream.written[-1])
    assert [t.name for t in sent.topics] == ["t0", "t1"]  # 20 -> 8 -> -4, then refused
    assert client.written == []  # nothing answered before the broker has


def test_topics_named_and_topics_by_id_are_asked_in_two_metadata_requests() -> None:
    """A broker given any topic id answers for the ids alone and drops the names."""
    conn, _, upstream = connect(Enforcement(QuotaEngine(QuotaConfig())), VirtualClock())
    conn.requests_received(create_topics(1, correlation_id=1))
    assert ask_topics(conn.channel, ["a"], [TOPIC_ID])
    asked = [decode_request(MetadataRequest, frame) for frame in upstream.written[1:]]
    assert [[(t.name, t.topic_id) for t in msg.topics] for msg in asked] == [
        [("a", None)],
        [(None, TOPIC_ID)],
    ]


def test_explicit_assignments_count_their_entries_and_need_no_default() -> None:
    s = channel()
    assignment = CT.CreatableReplicaAssignment
    msg = CreateTopicsRequest(
        version=7,
        topics=[
            CT(
                name="placed",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[assignment(partition_index=p, broker_ids=[1]) for p in range(3)],
                configs=[],
            )
        ],
        timeout_ms=30000,
        validate_only=False,
    )
    frame = request_frame(CREATE_TOPICS, 7, msg)
    assert asked(s, frame) == (("placed",), (), False)  # no num.partitions
    outcome, _req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward)
    assert tokens(s) == 17


def deletes(*topics: tuple[str | None, uuid.UUID | None], version: int = 6) -> bytes:
    state = DeleteTopicsRequest.DeleteTopicState
    msg = DeleteTopicsRequest(
        version=version,
        topics=[state(name=name, topic_id=topic_id) for name, topic_id in topics],
        timeout_ms=30000,
    )
    return request_frame(DELETE_TOPICS, version, msg)


def deleted(*results: tuple[str, uuid.UUID, int]) -> bytes:
    result = DeleteTopicsResponse.DeletableTopicResult
    msg = DeleteTopicsResponse(
        version=6,
        throttle_time_ms=0,
        responses=[
            result(name=name, topic_id=topic_id, error_code=error, error_message=None)
            for name, topic_id, error in results
        ],
    )
    return response_frame(DELETE_TOPICS, 6, msg, 1)


def test_a_create_counts_nothing_for_a_topic_that_exists_so_later_topics_are_not_refused() -> None:
    """Kafka fails an existing topic with TOPIC_ALREADY_EXISTS before charging it."""
    s = channel()
    frame = create_topics(30, 15)
    assert asked(s, frame) == (("t0", "t1"), (), False)
    context(s).topics.learn([TopicPartitions("t0", None, 30)])
    outcome, _req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward) and outcome.frame == frame  # both go upstream
    assert tokens(s) == 5  # only t1's 15


def test_shadow_mode_charges_what_it_lets_through_and_refunds_only_what_it_charged() -> None:
    s = channel(shadow=frozenset({QuotaType.CONTROLLER_MUTATION}))
    frame = create_topics(30, 8)
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward) and outcome.frame == frame  # nothing refused
    assert tokens(s) == -18  # t1 goes to the cluster, so it is charged
    both_fail = CreateTopicsResponse(
        version=7,
        throttle_time_ms=0,
        topics=[
            *decode_response(
                CreateTopicsResponse, created(7, "t0", error=37), CREATE_TOPICS, 7
            ).topics,
            *decode_response(
                CreateTopicsResponse, created(7, "t1", error=37), CREATE_TOPICS, 7
            ).topics,
        ],
    )
    respond(s, response_frame(CREATE_TOPICS, 7, both_fail, 1), req, 0)
    assert tokens(s) == 20  # INVALID_PARTITIONS for both: exactly what was charged comes back


def test_topics_named_twice_count_nothing_and_go_upstream_together() -> None:
    """The controller fails repeated names with INVALID_REQUEST and charges nothing for them:
    a refusal of another topic must not leave one copy, which the broker would accept."""
    s = channel()
    msg = CreateTopicsRequest(
        version=7,
        topics=[
            CT(name=name, num_partitions=n, replication_factor=1, assignments=[], configs=[])
            for name, n in (("big", 30), ("twice", 4), ("late", 1), ("twice", 4))
        ],
        timeout_ms=30000,
        validate_only=False,
    )
    frame = request_frame(CREATE_TOPICS, 7, msg)
    outcome, _req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward)
    sent = decode_request(CreateTopicsRequest, outcome.frame)
    assert [t.name for t in sent.topics] == ["big", "twice", "twice"]  # "late" refused
    assert tokens(s) == -10


def test_a_deletion_naming_both_a_topic_and_an_id_counts_nothing() -> None:
    s = channel()
    context(s).topics.learn([TopicPartitions("big", TOPIC_ID, 30)])
    outcome, _req = decide(s, deletes(("big", TOPIC_ID)), refreshed=True)
    assert isinstance(outcome, Forward) and tokens(s) == 20


def test_a_permissive_throttle_is_taken_back_with_a_full_refund() -> None:
    s = channel()
    frame = create_topics(30, version=5)
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward) and tokens(s) == -10
    # INVALID_REPLICATION_FACTOR: nothing was created, nothing is owed
    respond(s, created(5, "t0", error=38), req, 100)
    assert tokens(s, 100) == 20 and settled(req, 100) == 0


def test_a_permissive_throttle_counts_the_time_the_answer_took() -> None:
    s = channel()
    frame = create_topics(30, version=5)
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward)
    respond(s, created(5, "t0"), req, 1000)
    assert settled(req, 1000) == 4000  # -8 at 1 s


def test_a_strict_throttle_counts_the_time_the_answer_took() -> None:
    s = channel()
    frame = create_topics(30, 30)
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward)
    respond(s, created(7, "t0"), req, 1200)
    assert settled(req, 1200) == 3800
    respond(s, created(7, "t0"), req, 9000)
    assert settled(req, 9000) == 0


def test_a_timed_out_mutation_stays_charged() -> None:
    """REQUEST_TIMED_OUT: the controller may still create the topic, as Kafka then has
    charged it."""
    s = channel()
    frame = create_topics(8)
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward)
    respond(s, created(7, "t0", error=7), req, 0)
    assert tokens(s) == 12


def test_a_refused_deletion_by_id_is_answered_with_its_name_from_the_cache() -> None:
    s = channel()
    small = uuid.UUID(int=8)
    frame = deletes(("big", None), (None, small))
    context(s).topics.learn(
        [TopicPartitions("big", TOPIC_ID, 30), TopicPartitions("small", small, 2)]
    )
    outcome, req = decide(s, frame, refreshed=True)
    assert isinstance(outcome, Forward)
    sent = decode_request(DeleteTopicsRequest, outcome.frame).topics
    assert [(t.name, t.topic_id) for t in sent] == [("big", None)]
    reply = respond(s, deleted(("big", TOPIC_ID, 0)), req, 0)
    answer = decode_response(DeleteTopicsResponse, reply, DELETE_TOPICS, 6)
    assert [(r.name, r.topic_id, r.error_code) for r in answer.responses] == [
        ("big", TOPIC_ID, 0),
        ("small", small, THROTTLING_QUOTA_EXCEEDED),
    ]


def test_num_partitions_the_cluster_would_not_describe_is_asked_again_after_a_minute() -> None:
    s = channel()
    frame = create_topics(-1)
    context(s).topics.learn_default_partitions(None, 0)  # e.g. no DESCRIBE_CONFIGS permission
    assert asked(s, frame, 59_999) == (("t0",), (), False)
    assert asked(s, frame, 60_000) == (("t0",), (), True)
