"""The same produce / consume-and-commit / metadata operations, per real client family.

Each function talks only to the address it is given (the proxy in tests), waits for events
rather than sleeping, and is bounded in time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Message
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer, KafkaProducer

from localkafka import broker_queries
from localkafka.cluster import KafkaCluster

TIMEOUT_S = 60.0
#: every user the shared single broker (conftest.py kafka1) takes, by PLAIN and SCRAM
SASL_USERS = {
    user: f"{user}-secret" for user in ("alice", "bob", "carol", "dave", "erin", "frank", "grace")
}
#: the session's three brokers' users (conftest.py kafka3): the proxy's own identity on the
#: cluster ([cluster]), and a client beside it
IDENTITY_USERS = {"kqp": "kqp-secret", "alice": "alice-secret"}
#: where the proxy's own password is read from in CLUSTER
PASSWORD_ENV = "KQP_CLUSTER_PASSWORD"
#: the proxy's own identity on kafka3's SASL listener, as User:kqp
CLUSTER = f"""
[cluster]
security.protocol = "SASL_PLAINTEXT"
sasl.mechanism = "SCRAM-SHA-512"
sasl.username = "kqp"
sasl.password = "${{env:{PASSWORD_ENV}}}"
"""


def create_topic(bootstrap: str, name: str, partitions: int = 6, replication: int = 3) -> None:
    """A topic made through `bootstrap` (a proxy's, in the transparency tests)."""
    broker_queries.create_topic(bootstrap, name, partitions, replication)


# aiokafka -------------------------------------------------------------------------------------


async def aiokafka_produce(
    bootstrap: str, topic: str, values: list[bytes], **settings: Any
) -> None:
    """`settings` are the client's own (security_protocol, ssl_context, sasl_*)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **settings)
    await producer.start()
    try:
        futures = [await producer.send(topic, v, key=v) for v in values]
        await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT_S)
    finally:
        await producer.stop()


async def aiokafka_consume(
    bootstrap: str, topic: str, group: str, count: int, **settings: Any
) -> tuple[list[bytes], set[str]]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    await consumer.start()
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            got += [r.value for records in batches.values() for r in records]
        extra = await consumer.getmany(timeout_ms=1000)  # nothing beyond what was produced
        got += [r.value for records in extra.values() for r in records]
        await consumer.commit()
        brokers = {f"{b.host}:{b.port}" for b in consumer._client.cluster.brokers()}
    finally:
        await consumer.stop()
    return got, brokers


# kafka-python ---------------------------------------------------------------------------------


def kafka_python_produce(bootstrap: str, topic: str, values: list[bytes], **settings: Any) -> None:
    """`settings` are the client's own (security_protocol, ssl_cafile, sasl_*)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, **settings)
    try:
        futures = [producer.send(topic, v, key=v) for v in values]
        for future in futures:
            future.get(timeout=TIMEOUT_S)
    finally:
        producer.close()


def kafka_python_consume(
    bootstrap: str, topic: str, group: str, count: int, **settings: Any
) -> tuple[list[bytes], set[str]]:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **settings,
    )
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            batches = consumer.poll(timeout_ms=1000)
            got += [r.value for records in batches.values() for r in records]
        extra = consumer.poll(timeout_ms=1000)
        got += [r.value for records in extra.values() for r in records]
        consumer.commit()
        brokers = {f"{b.host}:{b.port}" for b in consumer._client.cluster.brokers()}
    finally:
        consumer.close()
    return got, brokers


# confluent-kafka (librdkafka) -----------------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, values: list[bytes], **settings: Any) -> None:
    """`settings` are librdkafka's own (security.protocol, ssl.ca.location, sasl.*), passed
    as **{"security.protocol": ...}."""
    producer = ConfluentProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **settings}
    )
    errors: list[object] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(error)

    for v in values:
        producer.produce(topic, v, key=v, on_delivery=delivered)
        producer.poll(0)
    remaining = producer.flush(TIMEOUT_S)
    assert remaining == 0 and not errors, (remaining, errors[:3])


def confluent_values(messages: Iterable[Message]) -> list[bytes]:
    """The values of the messages that carry no error (every record in these tests has one)."""
    values = []
    for message in messages:
        if message.error() is None:
            value = message.value()
            assert value is not None
            values.append(value)
    return values


def confluent_consume(
    bootstrap: str, topic: str, group: str, count: int, **settings: Any
) -> tuple[list[bytes], set[str]]:
    consumer = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **settings,
        }
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            got += confluent_values(consumer.consume(500, 1.0))
        got += confluent_values(consumer.consume(500, 1.0))
        consumer.commit(asynchronous=False)
        metadata = consumer.list_topics(timeout=10)
        brokers = {f"{b.host}:{b.port}" for b in metadata.brokers.values()}
    finally:
        consumer.close()
    return got, brokers


# Kafka's Java tools ---------------------------------------------------------------------------


def java_produce(
    cluster: KafkaCluster,
    bootstrap: str,
    topic: str,
    values: list[bytes],
    properties: Path | None = None,
    wrapper: Sequence[str] = (),
) -> None:
    """VerifiableProducer writes its own values; `values` must be str(i) for i in range(n).
    `properties`: a client properties file (security.protocol, ssl.*, sasl.*); `wrapper`:
    see KafkaCluster.tool."""
    assert values == [str(i).encode() for i in range(len(values))]
    config = ["--producer.config", str(properties)] if properties is not None else []
    out = cluster.tool(
        "org.apache.kafka.tools.VerifiableProducer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--max-messages",
        str(len(values)),
        "--acks",
        "-1",
        *config,
        wrapper=wrapper,
    )
    acked = out.count('"name":"producer_send_success"')
    assert acked == len(values), out[-2000:]


def java_consume(
    cluster: KafkaCluster,
    bootstrap: str,
    topic: str,
    group: str,
    count: int,
    properties: Path | None = None,
    wrapper: Sequence[str] = (),
) -> list[bytes]:
    config = ["--consumer.config", str(properties)] if properties is not None else []
    out = cluster.tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        str(count),
        "--timeout-ms",
        "60000",
        *config,
        wrapper=wrapper,
    )
    return [line.encode() for line in out.splitlines() if line]
