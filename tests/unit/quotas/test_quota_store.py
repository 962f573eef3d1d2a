"""The quota store: Kafka's validation and messages, layers, describe filters, listeners.

The validation cases are Apache Kafka's ClientQuotaControlManagerTest and
ClientQuotasRequestTest (metadata/, core/ at 4.x), each expecting the controller's error code
and message.
"""

from __future__ import annotations

import pytest

from config.proxy import ProxySettings
from localkafka.inprocess.harness import VirtualClock
from proxy.enforcement import Enforcement
from proxy.runtime.context import ProxyContext
from quotas.engine import QuotaEngine
from quotas.entities import DEFAULT, QuotaEntity, QuotaType
from quotas.settings import QuotaConfig
from quotas.store import (
    ALTERED,
    FILE,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    QuotaStore,
)
from quotas.validation import (
    INVALID_REQUEST,
    UNSUPPORTED_VERSION,
    QuotaError,
    entity_of,
    pairs_of,
    validate_value,
)

INVALID_KEY = "Invalid configuration key "
COMBINATION = (
    "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
)


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        ([("foo", "bar")], "Unhandled client quota entity type: foo"),
        ([("user", "user-1"), ("foo", "bar")], "Unhandled client quota entity type: foo"),
        ([("foo", "bar"), ("ip", "1.2.3.4")], "Unhandled client quota entity type: foo"),
        ([("user", "user-1"), ("ip", "1.2.3.4")], COMBINATION),
        ([("client-id", "user-1"), ("ip", "1.2.3.4")], COMBINATION),
        ([], "Invalid empty client quota entity"),
        ([("user", "")], "Empty user not supported"),
        ([("client-id", "")], "Empty client-id not supported"),
        ([("", "name")], "Unhandled client quota entity type: "),
        ([("ip", "example.invalid")], "example.invalid is not a valid IP or resolvable host."),
    ],
)
def test_invalid_entities_are_refused_with_kafkas_messages(
    pairs: list[tuple[str, str | None]], message: str
) -> None:
    with pytest.raises(QuotaError) as caught:
        entity_of(pairs)
    assert (caught.value.code, caught.value.message) == (INVALID_REQUEST, message)


def test_valid_entities_and_their_default_names() -> None:
    assert entity_of([("user", "u"), ("client-id", None)]) == QuotaEntity("u", DEFAULT)
    assert entity_of([("client-id", "c")]) == QuotaEntity(client_id="c")
    assert entity_of([("ip", None)]) == QuotaEntity(ip=DEFAULT)
    assert entity_of([("ip", "::ffff:127.0.0.1")]) == QuotaEntity(ip="127.0.0.1")
    assert entity_of([("user", "a"), ("user", "b")]) == QuotaEntity("b")  # the last one kept
    assert pairs_of(QuotaEntity(DEFAULT, "c")) == [("user", None), ("client-id", "c")]


@pytest.mark.parametrize(
    ("entity", "key", "value", "message"),
    [
        (QuotaEntity(client_id="foo"), "foobar", 1.0, INVALID_KEY + "foobar"),
        (
            QuotaEntity(client_id="foo"),
            "producer_byte_rate",
            0.0,
            "Quota producer_byte_rate must be greater than 0",
        ),
        (
            QuotaEntity(client_id="foo"),
            "consumer_byte_rate",
            -2.0,
            "Quota consumer_byte_rate must be greater than 0",
        ),
        (QuotaEntity(client_id="foo"), "consumer_byte_rate", 1234.0, None),
        (
            QuotaEntity(client_id="foo"),
            "consumer_byte_rate",
            36893488147419103232.4,
            "Proposed value for consumer_byte_rate is too large for a LONG.",
        ),
        (
            QuotaEntity(client_id="foo"),
            "consumer_byte_rate",
            2.245,
            "consumer_byte_rate cannot be a fractional value.",
        ),
        (QuotaEntity(client_id="foo"), "consumer_byte_rate", 1235.0000001, None),
        (QuotaEntity(client_id="foo"), "request_percentage", 56.62367, None),
        (
            QuotaEntity("user-1"),
            "not.a.quota.key",
            0.0,
            INVALID_KEY + "not.a.quota.key",
        ),
        (
            QuotaEntity("user"),
            "producer_byte_rate",
            10000.5,
            "producer_byte_rate cannot be a fractional value.",
        ),
        (QuotaEntity(ip="1.2.3.4"), "connection_creation_rate", 50.0, None),
        (
            QuotaEntity(ip="1.2.3.4"),
            "connection_creation_rate",
            2.0**31,
            "Proposed value for connection_creation_rate is too large for an INT.",
        ),
        (
            QuotaEntity(ip=DEFAULT),
            "producer_byte_rate",
            5.0,
            INVALID_KEY + "producer_byte_rate",
        ),
        (
            QuotaEntity("u"),
            "connection_creation_rate",
            5.0,
            INVALID_KEY + "connection_creation_rate",
        ),
        # KIP-936's key: users/<user> and users/<default> only
        (QuotaEntity("u"), "producer_ids_rate", 2.5, None),
        (QuotaEntity(DEFAULT), "producer_ids_rate", 2.5, None),
        (
            QuotaEntity("u", "c"),
            "producer_ids_rate",
            2.5,
            INVALID_KEY + "producer_ids_rate",
        ),
        (
            QuotaEntity(client_id="c"),
            "producer_ids_rate",
            2.5,
            INVALID_KEY + "producer_ids_rate",
        ),
    ],
)
def test_values_are_validated_as_the_controller_validates_them(
    entity: QuotaEntity, key: str, value: float, message: str | None
) -> None:
    if message is None:
        validate_value(entity, key, value)
        return
    with pytest.raises(QuotaError) as caught:
        validate_value(entity, key, value)
    assert (caught.value.code, caught.value.message) == (INVALID_REQUEST, message)


def test_an_alteration_overrides_the_file_per_key_and_survives_a_reload() -> None:
    store, heard = QuotaStore(), []
    store.subscribe(lambda changed: heard.append(changed.limits()))
    alice = QuotaEntity("alice")
    store.replace(FILE, {alice: {"producer_byte_rate": 100.0, "consumer_byte_rate": 200.0}})
    store.alter(ALTERED, alice, {"producer_byte_rate": 500.0})
    assert store.effective() == {alice: {"producer_byte_rate": 500.0, "consumer_byte_rate": 200.0}}
    assert store.source(alice, "producer_byte_rate") == ALTERED
    assert store.source(alice, "consumer_byte_rate") == FILE
    store.replace(FILE, {alice: {"producer_byte_rate": 150.0}})  # a reload of the file
    assert store.effective() == {alice: {"producer_byte_rate": 500.0}}
    store.alter(ALTERED, alice, {"producer_byte_rate": None})  # --delete-config
    assert store.effective() == {alice: {"producer_byte_rate": 150.0}}  # the file's applies
    assert [limits[QuotaType.PRODUCE][alice] for limits in heard] == [100.0, 500.0, 500.0, 150.0]


def test_an_alteration_is_all_or_nothing_and_validate_only_changes_nothing() -> None:
    store = QuotaStore()
    user = QuotaEntity("user-1")
    with pytest.raises(QuotaError, match=r"Invalid configuration key not\.a\.quota\.key"):
        store.alter(ALTERED, user, {"request_percentage": 99.9, "not.a.quota.key": 1.0})
    assert store.effective() == {}
    store.alter(ALTERED, user, {"producer_byte_rate": 10000.0}, validate_only=True)
    assert store.effective() == {}
    # Kafka's testAlterAndRemove: removing a key that is not set succeeds and changes nothing
    store.alter(ALTERED, user, {"producer_byte_rate": 10000.0})
    store.alter(ALTERED, user, {"producer_byte_rate": 10001.0, "consumer_byte_rate": 20000.0})
    store.alter(ALTERED, user, {"producer_byte_rate": None, "request_percentage": None})
    assert store.effective() == {user: {"consumer_byte_rate": 20000.0}}
    store.alter(ALTERED, user, {"consumer_byte_rate": None})
    assert store.effective() == {}
    store.alter(ALTERED, user, {"consumer_byte_rate": None})
    assert store.effective() == {}


def filled() -> QuotaStore:
    """Kafka's testEntityTypes entities, and two ips."""
    store = QuotaStore()
    entities = [
        QuotaEntity("user-1", "client-id-1"),
        QuotaEntity("user-2", "client-id-1"),
        QuotaEntity(DEFAULT, "client-id-1"),
        QuotaEntity("user-1", DEFAULT),
        QuotaEntity("user-1"),
        QuotaEntity(DEFAULT),
        QuotaEntity(client_id="client-id-2"),
    ]
    for index, entity in enumerate(entities):
        store.alter(ALTERED, entity, {"request_percentage": 50.5 + index})
    store.alter(ALTERED, QuotaEntity(ip="1.2.3.4"), {"connection_creation_rate": 5.0})
    store.alter(ALTERED, QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 9.0})
    return store


def test_describe_matches_as_a_broker_does() -> None:
    store = filled()
    exact = store.describe([("user", MATCH_EXACT, "user-1")])
    assert set(exact) == {
        QuotaEntity("user-1", "client-id-1"),
        QuotaEntity("user-1", DEFAULT),
        QuotaEntity("user-1"),
    }
    strict = store.describe([("user", MATCH_EXACT, "user-1")], strict=True)
    assert set(strict) == {QuotaEntity("user-1")}
    defaults = store.describe([("user", MATCH_DEFAULT, None)])
    assert set(defaults) == {QuotaEntity(DEFAULT, "client-id-1"), QuotaEntity(DEFAULT)}
    # MATCH_TYPE_SPECIFIED matches any name, the default included
    users_and_clients = store.describe(
        [("user", MATCH_ANY, None), ("client-id", MATCH_ANY, None)], strict=True
    )
    assert len(users_and_clients) == 4
    assert set(store.describe([("ip", MATCH_ANY, None)])) == {
        QuotaEntity(ip="1.2.3.4"),
        QuotaEntity(ip=DEFAULT),
    }
    assert len(store.describe()) == 9 and store.describe(strict=True) == {}
    assert store.ip_rates() == {"1.2.3.4": 5.0, DEFAULT: 9.0}


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        ([("other", MATCH_ANY, None)], UNSUPPORTED_VERSION, "Unsupported entity type other"),
        ([("", MATCH_ANY, None)], INVALID_REQUEST, "Invalid empty entity type."),
        (
            [("user", MATCH_ANY, None), ("user", MATCH_ANY, None)],
            INVALID_REQUEST,
            "Entity type user cannot appear more than once in the filter.",
        ),
        (
            [("user", MATCH_EXACT, None)],
            INVALID_REQUEST,
            "Request specified MATCH_TYPE_EXACT, but set match string to null.",
        ),
        (
            [("user", MATCH_DEFAULT, "u")],
            INVALID_REQUEST,
            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
        ),
        (
            [("user", MATCH_ANY, "u")],
            INVALID_REQUEST,
            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
        ),
        ([("user", 7, None)], INVALID_REQUEST, "Unknown match type 7"),
        (
            [("ip", MATCH_ANY, None), ("user", MATCH_ANY, None)],
            INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component.",
        ),
    ],
)
def test_invalid_describe_filters_are_refused_as_a_broker_refuses_them(
    components: list[tuple[str, int, str | None]], code: int, message: str
) -> None:
    with pytest.raises(QuotaError) as caught:
        filled().describe(components)
    assert (caught.value.code, caught.value.message) == (code, message)


def test_enforcement_and_the_connection_quotas_follow_every_change_of_the_store() -> None:
    context = ProxyContext(ProxySettings(), VirtualClock(), Enforcement(QuotaEngine(QuotaConfig())))
    store, engine = context.quota_layers, context.quotas
    store.alter(ALTERED, QuotaEntity("alice"), {"producer_byte_rate": 1000.0})
    sensors = engine.engine.produce.sensors_for("alice", "app", 0)
    assert engine.engine.produce.enabled and sensors.limit == 1000.0
    store.alter(ALTERED, QuotaEntity("alice"), {"producer_byte_rate": 2000.0})
    assert sensors.limit == 2000.0  # the live sensor, history kept
    store.alter(ALTERED, QuotaEntity(ip=DEFAULT), {"connection_creation_rate": 3.0})
    assert context.connection_quotas.limits.rate_for("10.0.0.1") == 3.0
