"""Topic quotas and broker ceilings as configs of their resources: the proxy's keys are taken
out of an alteration the broker is sent, stored once the broker took the resource, and put
back into DescribeConfigs."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from localkafka.inprocess.harness import RecordingCluster, handler_request
from localkafka.inprocess.wire import decode_response, request_frame, response_frame
from protocol.apis import ALTER_CONFIGS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from protocol.errors import ProtocolError
from proxy.handlers.base import Answer, Channel, Defer, Forward
from proxy.handlers.registry import HANDLERS
from proxy.runtime.context import FileQuotas, ProxyContext
from quotas.entities import DEFAULT, QuotaEntity
from quotas.store import ALTERED, FILE
from tests.unit.proxy.handlers.test_client_quotas import channel

PRODUCE_KEY = "kafka-quota-proxy.producer_byte_rate"
CONSUME_KEY = "kafka-quota-proxy.consumer_byte_rate"
SET, DELETE, APPEND = 0, 1, 2
TOPIC, BROKER = 2, 4
NOT_A_LONG = "Not a number of type LONG"
PRODUCE_CEILING = "kafka-quota-proxy.produce_ceiling"
REQUEST_CEILING = "kafka-quota-proxy.request_ceiling"

Configs = list[tuple[str, int, str | None]]
#: api_key -> (request class, response class)
CLASSES = {
    INCREMENTAL_ALTER_CONFIGS: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    ALTER_CONFIGS: (AlterConfigsRequest, AlterConfigsResponse),
}


def incremental(*resources: tuple[int, str, Configs], validate_only: bool = False) -> bytes:
    cls = IncrementalAlterConfigsRequest
    resource, config = cls.AlterConfigsResource, cls.AlterConfigsResource.AlterableConfig
    msg = cls(
        version=1,
        resources=[
            resource(
                resource_type=kind,
                resource_name=name,
                configs=[config(name=k, config_operation=op, value=v) for k, op, v in configs],
            )
            for kind, name, configs in resources
        ],
        validate_only=validate_only,
    )
    return request_frame(INCREMENTAL_ALTER_CONFIGS, 1, bytes(msg.encode(version=1)))


def legacy(name: str, configs: dict[str, str]) -> bytes:
    cls = AlterConfigsRequest
    resource, config = cls.AlterConfigsResource, cls.AlterConfigsResource.AlterableConfig
    msg = cls(
        version=2,
        resources=[
            resource(
                resource_type=TOPIC,
                resource_name=name,
                configs=[config(name=k, value=v) for k, v in configs.items()],
            )
        ],
        validate_only=False,
    )
    return request_frame(ALTER_CONFIGS, 2, bytes(msg.encode(version=2)))


def broker_answer(api_key: int, version: int, body: bytes, errors: dict[str, int]) -> bytes:
    """The broker's answer to what the proxy asked: each resource with its error, if any."""
    asked = CLASSES[api_key][0].decode(body, version=version)
    cls = CLASSES[api_key][1]
    msg = cls(
        version=version,
        throttle_time_ms=3,
        responses=[
            cls.AlterConfigsResourceResponse(
                error_code=errors.get(r.resource_name, 0),
                error_message="refused" if r.resource_name in errors else None,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r in reversed(asked.resources)  # Kafka answers in no particular order
        ],
    )
    return response_frame(api_key, version, msg, 77)


def run(
    s: Channel, cluster: RecordingCluster, frame: bytes, errors: dict[str, int] | None = None
) -> tuple[list[tuple[str, int, str | None]], Any]:
    """The alteration through the handler: deferred, the broker asked, handled again; each
    resource's (name, error, message) and what the broker was asked."""
    request = handler_request(s, frame)
    handler = HANDLERS[request.header.api_key]
    assert isinstance(handler.on_request(s, request), Defer)
    api_key, version, body, on_answer = cluster.asked.pop()
    assert api_key == request.header.api_key
    on_answer(broker_answer(api_key, version, body, errors or {}))
    assert cluster.pending == 0
    request.refreshed = True
    outcome = handler.on_request(s, request)
    assert isinstance(outcome, Answer)
    return results(outcome.response, api_key, version), CLASSES[api_key][0].decode(
        body, version=version
    )


def results(frame: bytes, api_key: int, version: int) -> list[tuple[str, int, str | None]]:
    msg = decode_response(CLASSES[api_key][1], frame, api_key, version)
    return [(r.resource_name, r.error_code, r.error_message) for r in msg.responses]


def quotas(context: ProxyContext, topic: str) -> dict[str, float]:
    return context.quota_layers.effective().get(QuotaEntity(topic=topic), {})


def test_the_proxys_keys_are_stored_and_the_others_reach_the_broker_in_the_same_request() -> None:
    s, cluster, context = channel()
    frame = incremental(
        (TOPIC, "hot", [(PRODUCE_KEY, SET, "1048576"), ("retention.ms", SET, "3600000")]),
        (BROKER, "1", [("log.cleaner.threads", SET, "2")]),
    )
    answered, asked = run(s, cluster, frame)
    assert answered == [("hot", 0, None), ("1", 0, None)]
    sent = {r.resource_name: [(c.name, c.value) for c in r.configs] for r in asked.resources}
    assert sent == {"hot": [("retention.ms", "3600000")], "1": [("log.cleaner.threads", "2")]}
    assert not asked.validate_only
    assert quotas(context, "hot") == {"producer_byte_rate": 1048576.0}
    assert context.quota_layers.source(QuotaEntity(topic="hot"), "producer_byte_rate") == ALTERED
    _, _ = run(s, cluster, incremental((TOPIC, "hot", [(PRODUCE_KEY, DELETE, None)])))
    assert quotas(context, "hot") == {}


def test_a_resource_the_broker_refuses_stores_nothing() -> None:
    s, cluster, context = channel()
    frame = incremental(
        (TOPIC, "denied", [(PRODUCE_KEY, SET, "100")]),
        (TOPIC, "allowed", [(CONSUME_KEY, SET, "200")]),
    )
    answered, asked = run(s, cluster, frame, {"denied": 29})
    assert answered == [("denied", 29, "refused"), ("allowed", 0, None)]
    # a resource left with no configs is still sent: the broker checks who may, and that it exists
    assert [(r.resource_name, list(r.configs)) for r in asked.resources] == [
        ("denied", []),
        ("allowed", []),
    ]
    assert quotas(context, "denied") == {} and quotas(context, "allowed") == {
        "consumer_byte_rate": 200.0
    }


def test_a_value_refused_here_keeps_its_resource_from_the_broker_in_kafkas_words() -> None:
    s, cluster, context = channel()
    frame = incremental(
        (TOPIC, "bad", [(PRODUCE_KEY, SET, "abc"), ("retention.ms", SET, "1000")]),
        (TOPIC, "good", [(PRODUCE_KEY, SET, "100")]),
    )
    answered, asked = run(s, cluster, frame)
    assert answered == [
        (
            "bad",
            40,
            f"Invalid value abc for configuration {PRODUCE_KEY}: Not a number of type LONG",
        ),
        ("good", 0, None),
    ]
    assert [r.resource_name for r in asked.resources] == ["good"]
    assert quotas(context, "bad") == {}


def test_every_resource_refused_here_is_answered_without_asking() -> None:
    s, cluster, _ = channel()
    cases = {
        (PRODUCE_KEY, SET, "0"): (40, f"Invalid value 0 for configuration {PRODUCE_KEY}: "),
        ("kafka-quota-proxy.producer_byte_rat", SET, "5"): (40, "Unknown topic config name: "),
        (PRODUCE_KEY, APPEND, "5"): (40, f"Can't APPEND to key {PRODUCE_KEY} because"),
        (PRODUCE_KEY, SET, None): (42, f"Null value not supported for : {PRODUCE_KEY}"),
    }
    for config, (code, start) in cases.items():
        request = handler_request(s, incremental((TOPIC, "t", [config])))
        outcome = HANDLERS[INCREMENTAL_ALTER_CONFIGS].on_request(s, request)
        assert isinstance(outcome, Answer) and not cluster.asked
        ((name, error, message),) = results(outcome.response, INCREMENTAL_ALTER_CONFIGS, 1)
        assert (name, error) == ("t", code) and message and message.startswith(start), message


def test_an_alteration_without_the_proxys_keys_is_forwarded_as_it_came() -> None:
    s, cluster, _ = channel()
    frame = incremental((TOPIC, "t", [("retention.ms", SET, "1")]), (BROKER, "1", []))
    outcome = HANDLERS[INCREMENTAL_ALTER_CONFIGS].on_request(s, handler_request(s, frame))
    assert isinstance(outcome, Forward) and outcome.frame == frame and not cluster.asked


def test_validate_only_asks_the_broker_so_and_stores_nothing() -> None:
    s, cluster, context = channel()
    answered, asked = run(
        s, cluster, incremental((TOPIC, "t", [(PRODUCE_KEY, SET, "5")]), validate_only=True)
    )
    assert answered == [("t", 0, None)] and asked.validate_only and quotas(context, "t") == {}


def test_alter_configs_replaces_the_topics_quotas_as_it_replaces_its_configs() -> None:
    s, cluster, context = channel()
    context.quota_layers.alter_many(
        ALTERED, {QuotaEntity(topic="t"): {"producer_byte_rate": 5.0, "consumer_byte_rate": 6.0}}
    )
    answered, asked = run(s, cluster, legacy("t", {CONSUME_KEY: "7", "retention.ms": "1"}))
    assert answered == [("t", 0, None)]
    assert [(c.name, c.value) for c in asked.resources[0].configs] == [("retention.ms", "1")]
    assert quotas(context, "t") == {"consumer_byte_rate": 7.0}
    # naming none of them removes them all, as it would a topic's retention.ms
    run(s, cluster, legacy("t", {"retention.ms": "1"}))
    assert quotas(context, "t") == {}


def test_without_a_quota_store_the_proxys_keys_are_refused_and_the_others_still_go() -> None:
    s, cluster, context = channel(stored=False)
    assert isinstance(context.quota_admin, FileQuotas)
    frame = incremental(
        (TOPIC, "t", [(PRODUCE_KEY, SET, "5")]), (TOPIC, "u", [("retention.ms", SET, "1")])
    )
    answered, asked = run(s, cluster, frame)
    assert answered[0][:2] == ("t", 42) and "[quota_store]" in (answered[0][2] or "")
    assert answered[1] == ("u", 0, None)
    assert [r.resource_name for r in asked.resources] == ["u"]


def test_a_quota_not_stored_after_the_broker_took_the_resource_says_so() -> None:
    s, cluster, context = channel()

    def fail(changes: object, done: object) -> None:
        done("the topic is gone")  # type: ignore[operator]

    context.quota_admin.apply = fail  # type: ignore[method-assign]
    answered, _ = run(s, cluster, incremental((TOPIC, "t", [(PRODUCE_KEY, SET, "5")])))
    ((name, code, message),) = answered
    assert (name, code) == ("t", 7)
    assert message and "Kafka configs were altered" in message and "the topic is gone" in message


def test_the_broker_out_of_reach_answers_each_resource_retriably() -> None:
    s, _, _ = channel()
    s.cluster = RecordingCluster(reachable=False)
    request = handler_request(s, incremental((TOPIC, "t", [(PRODUCE_KEY, SET, "5")])))
    outcome = HANDLERS[INCREMENTAL_ALTER_CONFIGS].on_request(s, request)
    assert isinstance(outcome, Answer)
    assert results(outcome.response, INCREMENTAL_ALTER_CONFIGS, 1)[0][1] == 7


def describe(resources: list[tuple[int, str, list[str] | None]], version: int = 4) -> bytes:
    cls = DescribeConfigsRequest
    msg = cls(
        version=version,
        resources=[
            cls.DescribeConfigsResource(resource_type=t, resource_name=n, configuration_keys=k)
            for t, n, k in resources
        ],
        include_synonyms=True,
        include_documentation=False,
    )
    return request_frame(DESCRIBE_CONFIGS, version, bytes(msg.encode(version=version)))


def broker_describe(names: list[tuple[int, str, int]], version: int = 4) -> bytes:
    cls = DescribeConfigsResponse
    result = cls.DescribeConfigsResult
    entry = result.DescribeConfigsResourceResult
    msg = cls(
        version=version,
        throttle_time_ms=0,
        results=[
            result(
                error_code=error,
                error_message=None,
                resource_type=t,
                resource_name=n,
                configs=[
                    entry(
                        name="retention.ms",
                        value="1",
                        read_only=False,
                        config_source=1,
                        is_default=False,
                        is_sensitive=False,
                        synonyms=[],
                        config_type=5,
                        documentation=None,
                    )
                ],
            )
            for t, n, error in names
        ],
    )
    return response_frame(DESCRIBE_CONFIGS, version, msg, 9)


def described(
    frame: bytes, version: int = 4
) -> dict[str, list[tuple[str, str, int, list[tuple[str, int]]]]]:
    msg = decode_response(DescribeConfigsResponse, frame, DESCRIBE_CONFIGS, version)
    return {
        r.resource_name: [
            (c.name, c.value, c.config_source, [(x.value, x.source) for x in c.synonyms])
            for c in r.configs
        ]
        for r in msg.results
    }


def test_describe_lists_a_topics_quotas_as_its_own_configs_with_where_each_is_set() -> None:
    s, _, context = channel()
    store = context.quota_layers
    store.replace(
        FILE,
        {
            QuotaEntity(topic="t"): {"producer_byte_rate": 100.0},
            QuotaEntity(topic=DEFAULT): {"consumer_byte_rate": 50.0},
        },
    )
    store.alter_many(ALTERED, {QuotaEntity(topic="t"): {"producer_byte_rate": 200.0}})
    request = handler_request(s, describe([(TOPIC, "t", None), (TOPIC, "gone", None)]))
    handler = HANDLERS[DESCRIBE_CONFIGS]
    assert isinstance(handler.on_request(s, request), Forward)
    answer = broker_describe([(TOPIC, "t", 0), (TOPIC, "gone", 3)])
    got = described(handler.on_response(s, answer, request))
    assert got["t"] == [
        ("retention.ms", "1", 1, []),
        (PRODUCE_KEY, "200", 1, [("200", 1), ("100", 4)]),
        (CONSUME_KEY, "50", 4, [("50", 4)]),
    ]
    assert got["gone"] == [("retention.ms", "1", 1, [])]  # a resource in error gets nothing
    # only the keys asked for
    request = handler_request(s, describe([(TOPIC, "t", ["retention.ms", CONSUME_KEY])]))
    got = described(handler.on_response(s, broker_describe([(TOPIC, "t", 0)]), request))
    assert [name for name, *_ in got["t"]] == ["retention.ms", CONSUME_KEY]


def test_describe_passes_the_brokers_answer_as_it_is_without_topic_quotas() -> None:
    s, _, context = channel()
    context.quota_layers.alter_many(ALTERED, {QuotaEntity("alice"): {"producer_byte_rate": 1.0}})
    for version in (0, 1, 4):
        request = handler_request(s, describe([(TOPIC, "t", None)], version))
        answer = broker_describe([(TOPIC, "t", 0)], version)
        assert HANDLERS[DESCRIBE_CONFIGS].on_response(s, answer, request) is answer


def test_a_resource_named_twice_is_refused_every_copy_and_none_is_sent() -> None:
    s, cluster, context = channel()
    frame = incremental(
        (TOPIC, "t", [(PRODUCE_KEY, SET, "abc")]),
        (TOPIC, "t", [(PRODUCE_KEY, SET, "100"), ("retention.ms", SET, "1")]),
        (TOPIC, "u", [(PRODUCE_KEY, SET, "100")]),
    )
    answered, asked = run(s, cluster, frame)
    twice = (42, "Each resource must appear at most once.")
    assert answered == [("t", *twice), ("t", *twice), ("u", 0, None)]
    assert [r.resource_name for r in asked.resources] == ["u"]
    assert quotas(context, "t") == {} and quotas(context, "u") == {"producer_byte_rate": 100.0}


def test_a_brokers_ceilings_are_stored_and_its_own_configs_still_reach_it() -> None:
    """`--entity-type brokers`: broker 1's ceiling and the default broker's (an empty name,
    kafka-configs' --entity-default) are the proxy's; the broker is sent its own key alone."""
    s, cluster, context = channel()
    frame = incremental(
        (BROKER, "1", [(PRODUCE_CEILING, SET, "5000000"), ("log.cleaner.threads", SET, "2")]),
        (BROKER, "", [(REQUEST_CEILING, SET, "2.5")]),
    )
    answered, asked = run(s, cluster, frame)
    assert answered == [("1", 0, None), ("", 0, None)]
    sent = {r.resource_name: [c.name for c in r.configs] for r in asked.resources}
    assert sent == {"1": ["log.cleaner.threads"], "": []}
    effective = context.quota_layers.effective()
    assert effective[QuotaEntity(broker="1")] == {PRODUCE_CEILING: 5000000.0}
    assert effective[QuotaEntity(broker=DEFAULT)] == {REQUEST_CEILING: 2.5}
    request = handler_request(s, describe([(BROKER, "1", None), (BROKER, "", None)]))
    handler = HANDLERS[DESCRIBE_CONFIGS]
    got = described(
        handler.on_response(s, broker_describe([(BROKER, "1", 0), (BROKER, "", 0)]), request)
    )
    dynamic_broker, dynamic_default = 2, 3
    assert got["1"][1:] == [
        (PRODUCE_CEILING, "5000000", dynamic_broker, [("5000000", dynamic_broker)]),
        (REQUEST_CEILING, "2.5", dynamic_default, [("2.5", dynamic_default)]),
    ]
    assert got[""][1:] == [(REQUEST_CEILING, "2.5", dynamic_default, [("2.5", dynamic_default)])]


def test_a_misspelt_or_bad_ceiling_is_refused_in_kafkas_words_and_not_sent() -> None:
    s, cluster, _ = channel()
    frame = incremental(
        (BROKER, "1", [("kafka-quota-proxy.anything", SET, "1")]),
        (BROKER, "2", [(REQUEST_CEILING, SET, "fast")]),
        (BROKER, "3", [(REQUEST_CEILING, SET, "0")]),
    )
    outcome = HANDLERS[INCREMENTAL_ALTER_CONFIGS].on_request(s, handler_request(s, frame))
    assert isinstance(outcome, Answer) and not cluster.asked
    assert results(outcome.response, INCREMENTAL_ALTER_CONFIGS, 1) == [
        ("1", 40, "Unknown broker config name: kafka-quota-proxy.anything"),
        (
            "2",
            40,
            f"Invalid value fast for configuration {REQUEST_CEILING}: Not a number of type DOUBLE",
        ),
        ("3", 42, f"Quota {REQUEST_CEILING} must be greater than 0"),
    ]


def test_a_number_too_long_for_a_long_is_refused_in_kafkas_words() -> None:
    s, cluster, _ = channel()
    request = handler_request(s, incremental((TOPIC, "t", [(PRODUCE_KEY, SET, "1" * 5000)])))
    outcome = HANDLERS[INCREMENTAL_ALTER_CONFIGS].on_request(s, request)
    assert isinstance(outcome, Answer) and not cluster.asked
    ((_, code, message),) = results(outcome.response, INCREMENTAL_ALTER_CONFIGS, 1)
    assert code == 40 and message and message.endswith(NOT_A_LONG)


def test_a_null_name_is_a_malformed_request() -> None:
    s, _, _ = channel()
    cls = IncrementalAlterConfigsRequest
    resource = cls.AlterConfigsResource(resource_type=TOPIC, resource_name=None, configs=[])
    body = bytes(cls(version=0, resources=[resource], validate_only=False).encode(version=0))
    request = handler_request(s, request_frame(INCREMENTAL_ALTER_CONFIGS, 0, body))
    with pytest.raises(ProtocolError):
        HANDLERS[INCREMENTAL_ALTER_CONFIGS].on_request(s, request)


def test_an_empty_key_list_asks_for_every_key_and_a_topic_asked_twice_gets_each_once() -> None:
    s, _, context = channel()
    context.quota_layers.alter_many(ALTERED, {QuotaEntity(topic="t"): {"producer_byte_rate": 2.0}})
    handler = HANDLERS[DESCRIBE_CONFIGS]
    request = handler_request(s, describe([(TOPIC, "t", []), (TOPIC, "t", ["retention.ms"])]))
    answer = broker_describe([(TOPIC, "t", 0), (TOPIC, "t", 0)])
    frame = handler.on_response(s, answer, request)
    msg = decode_response(DescribeConfigsResponse, frame, DESCRIBE_CONFIGS, 4)
    assert [[c.name for c in r.configs] for r in msg.results] == [
        ["retention.ms", PRODUCE_KEY],
        ["retention.ms", PRODUCE_KEY],
    ]
