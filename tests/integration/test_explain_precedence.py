"""The entity `explain` names is the one a broker's own quota picks (issue 54).

Overlapping quotas at every level of KIP-55's precedence are set twice: with stock
kafka-configs through the proxy (into its quota store), and on the broker itself. Each quota
type gets levels of its own, since an entity at one level hides those below it for every
client: producer_byte_rate levels 1 to 5, consumer_byte_rate 3 and 6, request_percentage 7
and 8, and a topic's rate beside them. Twenty (user, client-id) pairs then talk to the
broker directly, each a librdkafka producer and consumer; the broker's quota sensors, read
over JMX, carry the (user, client-id) tags Kafka charged each pair at. `explain` must give
every pair the tags the broker used, for each of the three quota types, and its rules must
cover all eight levels. For producer_byte_rate, levels 1 to 5 (four of which charge the same
(user, client-id) tags), each producer sensor then takes one large Produce, and the throttle
the broker answers with says which quota it applied: the value `explain` names.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from config.cluster import ClusterSettings
from localkafka import workloads
from localkafka.cluster import KafkaCluster
from localkafka.jars import java_command
from localkafka.proxy_process import RunningProxy, start_proxy
from protocol.apis import DESCRIBE_CLIENT_QUOTAS
from protocol.client_quotas import AlterEntry, DescribeRequest, describe_body, read_describe_entries
from proxy.control.cluster import ClusterClient

USERS = {user: f"{user}-secret" for user in ("kqp", "alice", "bob", "carol", "dave")}
CLIENT_IDS = ("xp-app1", "xp-app2", "xp-app3", "xp-web", "xp-batch")
#: the users whose clients talk to the broker (kqp is the proxy's own)
CLIENTS = ("alice", "bob", "carol", "dave")
PAIRS = [(user, client_id) for user in CLIENTS for client_id in CLIENT_IDS]
TOPIC = "xp-topic"
#: one Produce's bytes that tell the producer_byte_rate levels apart by the throttle the
#: broker answers it with: at 10,000 to 50,000 B/s, 50 s down to 2 s
BURST = 600_000
#: (entity as kafka-configs names it: type, name or None for the default) -> its quotas
ENTITIES: dict[tuple[tuple[str, str | None], ...], dict[str, int]] = {
    (("users", "alice"), ("clients", "xp-app1")): {"producer_byte_rate": 10_000},
    (("users", "alice"), ("clients", None)): {"producer_byte_rate": 20_000},
    (("users", "bob"),): {"producer_byte_rate": 30_000, "consumer_byte_rate": 2_000_003},
    (("users", None), ("clients", "xp-app2")): {"producer_byte_rate": 40_000},
    (("users", None), ("clients", None)): {"producer_byte_rate": 50_000},
    (("users", None),): {"consumer_byte_rate": 2_000_006},
    (("clients", "xp-app3"),): {"request_percentage": 307},
    (("clients", None),): {"request_percentage": 308},
}
#: each key, and the type of the broker's sensors of it
SENSORS = {"producer_byte_rate": "Produce", "consumer_byte_rate": "Fetch",
           "request_percentage": "Request"}  # fmt: skip
JMX = Path(workloads.__file__).parent / "java" / "RequestQuotaMetrics.java"
PASSWORD_ENV = "KQP_CLUSTER_PASSWORD"
CONFIG = f"""
[quota_store]
topic = "xp-quotas"
[cluster]
security.protocol = "SASL_PLAINTEXT"
sasl.mechanism = "PLAIN"
sasl.username = "kqp"
sasl.password = "${{env:{PASSWORD_ENV}}}"
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(workdir=tmp_path_factory.mktemp("kafka-precedence"), sasl_users=USERS)
    kafka.start()
    kafka.create_topic(TOPIC, 1)
    yield kafka
    kafka.stop()


@pytest.fixture(scope="module")
def proxy(
    cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    running = start_proxy(
        tmp_path_factory.mktemp("precedence"),
        cluster.brokers[0].sasl_address,
        1,
        CONFIG,
        env={PASSWORD_ENV: USERS["kqp"]},
    )
    yield running
    running.stop()


def sasl(user: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def kafka_configs(
    cluster: KafkaCluster,
    proxy: RunningProxy,
    properties: Path,
    entity: tuple[tuple[str, str | None], ...],
    quotas: dict[str, int],
) -> str:
    """Stock kafka-configs through the proxy, as alice, for one entity."""
    names = []
    for kind, name in entity:
        names += ["--entity-type", kind]
        names += ["--entity-default"] if name is None else ["--entity-name", name]
    added = ",".join(f"{key}={value}" for key, value in quotas.items())
    return cluster.tool("kafka.admin.ConfigCommand", "--bootstrap-server", proxy.bootstrap,
                        "--command-config", str(properties), "--alter", *names,
                        "--add-config", added)  # fmt: skip


def talk(address: str, user: str, client_id: str) -> None:
    """A record produced and fetched back, directly against the broker."""
    producer = Producer({"bootstrap.servers": address, "client.id": client_id, **sasl(user)})
    producer.produce(TOPIC, b"x")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": address, "client.id": client_id,
                         "group.id": f"{user}-{client_id}", **sasl(user)})  # fmt: skip
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        message = consumer.poll(30)
        assert message is not None and message.error() is None
    finally:
        consumer.close()


def burst_throttle_ms(address: str, user: str, client_id: str) -> int:
    """The throttle_time_ms the broker answers one Produce of BURST bytes with."""
    throttles = workloads.Throttles()
    producer = Producer({"bootstrap.servers": address, "client.id": client_id,
                         "throttle_cb": throttles, **sasl(user)})  # fmt: skip
    producer.produce(TOPIC, b"x" * BURST)
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 10
    while not throttles.count and time.monotonic() < deadline:
        producer.poll(0.1)
    return throttles.ms


def broker_tags(cluster: KafkaCluster, sensor: str) -> set[tuple[str, str]]:
    """The (user, client-id) tags of the broker's quota sensors of one type, this test's."""
    process = cluster.brokers[0].process
    assert process is not None
    out = subprocess.run(
        java_command(str(JMX), [str(process.pid), "0", "1", sensor], heap="128m"),
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    tags = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 5:
            user, client_id = (part if part != "-" else "" for part in parts[1:3])
            if user in CLIENTS or client_id.startswith("xp-"):
                tags.add((user, client_id))
    return tags


async def broker_entities(bootstrap: str) -> int:
    """How many quota entities the broker describes."""
    host, _, port = bootstrap.rpartition(":")
    async with ClusterClient(ClusterSettings(), [(host, int(port))], 10.0) as client:
        body = describe_body(1, DescribeRequest([], strict=False))
        frame = await client.ask(DESCRIBE_CLIENT_QUOTAS, 1, body)
    code, message, entries = read_describe_entries(frame, 1)
    assert code == 0, message
    return len(entries)


def explained(proxy: RunningProxy, user: str, client_id: str) -> dict[str, dict[str, Any]]:
    base = proxy.metrics_url.removesuffix("/metrics")
    query = f"user={user}&client_id={client_id}&topic={TOPIC}"
    with urllib.request.urlopen(f"{base}/explain?{query}", timeout=10) as response:
        answer = json.load(response)
    by_key: dict[str, dict[str, Any]] = {q["key"]: q for q in answer["quotas"]}
    by_key["topic"] = answer["topic"][0]
    return by_key


def test_explain_names_the_entity_a_brokers_own_quota_picks(
    cluster: KafkaCluster, proxy: RunningProxy, tmp_path: Path
) -> None:
    properties = tmp_path / "alice.properties"
    properties.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{USERS["alice"]}";\n'
    )
    topic_quota = {(("topics", TOPIC),): {"kafka-quota-proxy.producer_byte_rate": 5_000_000}}
    with ThreadPoolExecutor(4) as pool:  # a JVM each: started together
        done = list(pool.map(lambda item: kafka_configs(cluster, proxy, properties, *item),
                             [*ENTITIES.items(), *topic_quota.items()]))  # fmt: skip
    assert all("Completed updating" in out for out in done), done
    entries = [
        AlterEntry(
            [("user" if kind == "users" else "client-id", name) for kind, name in entity],
            [(key, float(value)) for key, value in quotas.items()],
        )
        for entity, quotas in ENTITIES.items()
    ]
    workloads.alter_client_quotas(cluster.bootstrap_servers, entries)
    # the controller commits them, then the broker applies them: a client before that is
    # charged to no sensor
    deadline = time.monotonic() + 10
    while asyncio.run(broker_entities(cluster.bootstrap_servers)) < len(ENTITIES):
        assert time.monotonic() < deadline, "the broker does not describe its quotas"
        time.sleep(0.05)
    address = cluster.brokers[0].sasl_address
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda pair: talk(address, *pair), PAIRS))
    answers = {pair: explained(proxy, *pair) for pair in PAIRS}
    # the value: one burst into each producer sensor while it is young (Kafka measures it
    # over 10 to 11 s then: ten whole windows and the current one) owes
    # (BURST / W - quota) / quota x W, so quota = BURST / (W + throttle)
    first: dict[tuple[str, ...], tuple[str, str]] = {}
    for pair in PAIRS:
        first.setdefault(tuple(answers[pair]["producer_byte_rate"]["metric_tags"]), pair)
    with ThreadPoolExecutor(8) as pool:
        owed = dict(zip(first.values(), pool.map(lambda p: burst_throttle_ms(address, *p),
                                                 first.values()), strict=True))  # fmt: skip
    for pair, throttle_ms in owed.items():
        least, most = (BURST * 1000 / (window_ms + throttle_ms) for window_ms in (11_000, 10_000))
        told = answers[pair]["producer_byte_rate"]["value"]
        print(f"{pair}: throttled {throttle_ms} ms: a quota of {least:,.0f} to {most:,.0f}; "
              f"explain: {told:,.0f}")  # fmt: skip
        assert 0.99 * least <= told <= 1.01 * most, (pair, throttle_ms, least, most, told)
    with ThreadPoolExecutor(3) as pool:
        found = dict(zip(SENSORS, pool.map(lambda s: broker_tags(cluster, s), SENSORS.values()),
                         strict=True))  # fmt: skip
    rules = set()
    for key in SENSORS:
        told = {tuple(answers[pair][key]["metric_tags"]) for pair in PAIRS}
        print(f"{key}: the broker's sensors {sorted(found[key])}")
        assert told == found[key], (key, sorted(told), sorted(found[key]))
        rules |= {str(answers[pair][key]["rule"]) for pair in PAIRS}
    levels = sorted(int(rule.split()[1]) for rule in rules if rule.startswith("precedence "))
    assert levels == list(range(1, 9)), rules
    alice = answers[("alice", "xp-app1")]
    assert (alice["producer_byte_rate"]["entity"], alice["producer_byte_rate"]["value"]) == (
        "users/alice/clients/xp-app1",
        10_000,
    )
    assert str(alice["producer_byte_rate"]["source"]).startswith("kafka-configs, ")
    assert alice["topic"]["entity"] == f"topics/{TOPIC}"
