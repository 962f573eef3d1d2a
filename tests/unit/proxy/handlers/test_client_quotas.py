"""DescribeClientQuotas and AlterClientQuotas answered by the proxy from its quota store,
once the broker (asked on the client's connection) has said the client may."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasResponse,
)

from config.quota_store import QuotaStoreSettings
from localkafka.inprocess.harness import (
    RecordingCluster,
    handler_channel,
    handler_request,
    proxy_context,
)
from localkafka.inprocess.wire import decode_response, request_frame, response_frame
from protocol.apis import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS
from protocol.client_quotas import AlterEntry, Pairs, alter_body, describe_body, read_alter
from protocol.client_quotas import DescribeRequest as Filter
from protocol.headers import parse_request_header, request_body_offset
from proxy.control.quota_topic import QuotaTopic
from proxy.enforcement import Enforcement
from proxy.handlers.base import Answer, Channel, Defer
from proxy.handlers.registry import HANDLERS
from proxy.runtime.context import ProxyContext
from quotas.admin import Changes
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity
from quotas.settings import QuotaConfig
from quotas.store import ALTERED, FILE, MATCH_ANY, MATCH_EXACT

ALICE: Pairs = [("user", "alice")]


class InstantTopic(QuotaTopic):
    """A quota store topic that is always there and stores at once."""

    def unavailable(self) -> tuple[int, str] | None:
        return None

    def apply(
        self, changes: Mapping[QuotaEntity, Changes], done: Callable[[str | None], object]
    ) -> None:
        self.store.alter_many(ALTERED, changes)
        done(None)


def channel(stored: bool = True) -> tuple[Channel, RecordingCluster, ProxyContext]:
    context = proxy_context(Enforcement(QuotaEngine(QuotaConfig())))
    if stored:
        context.quota_admin = InstantTopic(
            context.quota_layers,
            QuotaStoreSettings("quotas"),
            context.own_client,
            [],
            context.stats,
        )
    cluster = RecordingCluster()
    return handler_channel(context, cluster), cluster, context


def alter(*entries: AlterEntry, validate_only: bool = False, version: int = 1) -> bytes:
    return request_frame(ALTER_CLIENT_QUOTAS, version, alter_body(version, entries, validate_only))


def broker_alter(version: int, body: bytes, error: int = 0, message: str | None = None) -> bytes:
    """The broker's answer to what the proxy asked: each entity with `error`."""
    asked = AlterClientQuotasRequest.decode(body, version=version)
    entry = AlterClientQuotasResponse.EntryData
    msg = AlterClientQuotasResponse(
        version=version,
        throttle_time_ms=0,
        entries=[
            entry(error_code=error, error_message=message, entity=e.entity) for e in asked.entries
        ],
    )
    return response_frame(ALTER_CLIENT_QUOTAS, version, msg, 77)


def answered(
    frame: bytes, version: int = 1
) -> list[tuple[list[tuple[str, str | None]], int, str | None]]:
    msg = decode_response(AlterClientQuotasResponse, frame, ALTER_CLIENT_QUOTAS, version)
    return [
        ([(x.entity_type, x.entity_name) for x in e.entity], e.error_code, e.error_message)
        for e in msg.entries
    ]


def run_alter(
    s: Channel, cluster: RecordingCluster, frame: bytes, error: int = 0, message: str | None = None
) -> tuple[list[tuple[list[tuple[str, str | None]], int, str | None]], bytes]:
    """The alteration through the handler: deferred, the broker asked, handled again."""
    request = handler_request(s, frame)
    handler = HANDLERS[ALTER_CLIENT_QUOTAS]
    assert isinstance(handler.on_request(s, request), Defer)
    api_key, version, body, on_answer = cluster.asked.pop()
    assert api_key == ALTER_CLIENT_QUOTAS
    on_answer(broker_alter(version, body, error, message))
    assert cluster.pending == 0  # stored at once by the instant topic
    request.refreshed = True
    outcome = handler.on_request(s, request)
    assert isinstance(outcome, Answer)
    return answered(outcome.response), body


def test_an_alteration_is_stored_once_the_broker_says_the_client_may() -> None:
    s, cluster, context = channel()
    frame = alter(
        AlterEntry(ALICE, [("producer_byte_rate", 1048576.0), ("producer_ids_rate", 5.0)]),
        AlterEntry([("client-id", None)], [("request_percentage", 12.5)]),
    )
    results, asked = run_alter(s, cluster, frame)
    assert results == [(ALICE, 0, None), ([("client-id", None)], 0, None)]
    # the broker was asked with validate_only, and without the key it does not know
    sent = AlterClientQuotasRequest.decode(asked, version=1)
    assert sent.validate_only
    assert [op.key for op in sent.entries[0].ops] == ["producer_byte_rate"]
    assert context.quota_layers.effective() == {
        QuotaEntity("alice"): {"producer_byte_rate": 1048576.0, "producer_ids_rate": 5.0},
        QuotaEntity(client_id=DEFAULT): {"request_percentage": 12.5},
    }
    assert context.quota_layers.source(QuotaEntity("alice"), "producer_byte_rate") == ALTERED


def test_the_clusters_authorizer_decides_who_may_and_nothing_changes_without_it() -> None:
    s, cluster, context = channel()
    frame = alter(AlterEntry(ALICE, [("producer_byte_rate", 1.0)]))
    results, _ = run_alter(s, cluster, frame, 31, "Cluster authorization failed.")
    assert results == [(ALICE, 31, "Cluster authorization failed.")]
    assert context.quota_layers.effective() == {}


def test_validate_only_and_kafkas_errors_change_nothing() -> None:
    s, cluster, context = channel()
    results, _ = run_alter(
        s, cluster, alter(AlterEntry(ALICE, [("producer_byte_rate", 5.0)]), validate_only=True)
    )
    assert results == [(ALICE, 0, None)] and context.quota_layers.effective() == {}
    results, _ = run_alter(
        s,
        cluster,
        alter(
            AlterEntry(ALICE, [("producer_byte_rate", 2.245)]),
            AlterEntry([("ip", "127.0.0.1")], [("connection_creation_rate", 5.0)]),
            AlterEntry([("user", "u"), ("ip", "1.2.3.4")], [("request_percentage", 1.0)]),
        ),
    )
    assert results == [
        (ALICE, 42, "producer_byte_rate cannot be a fractional value."),
        ([("ip", "127.0.0.1")], 0, None),
        (
            [("user", "u"), ("ip", "1.2.3.4")],
            42,
            "Invalid quota entity combination, IP entity shouldnot be combined with User or "
            "ClientId",
        ),
    ]
    assert context.quota_layers.effective() == {
        QuotaEntity(ip="127.0.0.1"): {"connection_creation_rate": 5.0}
    }


def test_duplicates_are_answered_as_the_controller_answers_them() -> None:
    s, cluster, context = channel()
    pair: Pairs = [("user", "alice"), ("client-id", "c1")]
    results, _ = run_alter(
        s,
        cluster,
        alter(
            AlterEntry(pair, [("producer_byte_rate", 100.0)]),
            AlterEntry(pair, [("producer_byte_rate", 200.0)]),
            AlterEntry(
                [("user", "bob")], [("request_percentage", 1.0), ("request_percentage", 2.0)]
            ),
        ),
    )
    assert results == [
        (
            pair,
            42,
            "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c1, user=alice})",
        ),
        ([("user", "bob")], 42, "Ignoring duplicate entity ClientQuotaEntity(entries={user=bob})"),
    ]
    # as in Kafka, the first copy of an entity given twice is made all the same
    assert context.quota_layers.effective() == {
        QuotaEntity("alice", "c1"): {"producer_byte_rate": 100.0}
    }


def test_without_a_quota_store_alterations_are_refused_saying_where_to_name_one() -> None:
    s, cluster, context = channel(stored=False)
    results, _ = run_alter(s, cluster, alter(AlterEntry(ALICE, [("producer_byte_rate", 5.0)])))
    assert results == [
        (ALICE, 42, "this proxy keeps no altered quotas: name a topic in its [quota_store]")
    ]
    assert context.quota_layers.effective() == {}


def describe(
    s: Channel, cluster: RecordingCluster, describe_filter: Filter, error: int = 0
) -> DescribeClientQuotasResponse:
    version = 1
    request = handler_request(
        s, request_frame(DESCRIBE_CLIENT_QUOTAS, version, describe_body(version, describe_filter))
    )
    handler = HANDLERS[DESCRIBE_CLIENT_QUOTAS]
    assert isinstance(handler.on_request(s, request), Defer)
    _, _, _, on_answer = cluster.asked.pop()
    broker = DescribeClientQuotasResponse(
        version=version,
        throttle_time_ms=0,
        error_code=error,
        error_message=None,
        entries=None if error else [],
    )
    on_answer(response_frame(DESCRIBE_CLIENT_QUOTAS, version, broker, 5))
    request.refreshed = True
    outcome = handler.on_request(s, request)
    assert isinstance(outcome, Answer)
    return decode_response(
        DescribeClientQuotasResponse, outcome.response, DESCRIBE_CLIENT_QUOTAS, version
    )


def test_describe_answers_the_proxys_quotas_with_the_brokers_authorization() -> None:
    s, cluster, context = channel()
    context.quota_layers.replace(FILE, {QuotaEntity("alice"): {"consumer_byte_rate": 2000.0}})
    context.quota_layers.alter(ALTERED, QuotaEntity("alice"), {"producer_byte_rate": 1000.0})
    context.quota_layers.alter(ALTERED, QuotaEntity("alice", "app"), {"request_percentage": 5.0})
    found = describe(s, cluster, Filter([("user", MATCH_EXACT, "alice")], strict=True))
    assert found.error_code == 0
    assert [
        ([(x.entity_type, x.entity_name) for x in e.entity], {v.key: v.value for v in e.values})
        for e in found.entries
    ] == [(ALICE, {"consumer_byte_rate": 2000.0, "producer_byte_rate": 1000.0})]
    refused = describe(s, cluster, Filter([("user", MATCH_ANY, None)], strict=False), error=31)
    assert (refused.error_code, refused.error_message, refused.entries) == (31, None, None)
    bad = describe(s, cluster, Filter([("other", MATCH_ANY, None)], strict=False))
    assert (bad.error_code, bad.error_message) == (35, "Unsupported entity type other")


def test_the_request_reader_keeps_what_kafka_configs_sends() -> None:
    frame = alter(
        AlterEntry([("user", None)], [("producer_byte_rate", 5.0), ("consumer_byte_rate", 0.0)]),
        version=0,
    )
    header = parse_request_header(frame)
    read = read_alter(frame, header, request_body_offset(frame, header))
    assert read.entries == [
        AlterEntry([("user", None)], [("producer_byte_rate", 5.0), ("consumer_byte_rate", 0.0)])
    ]
