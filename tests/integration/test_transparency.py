"""Issue #2: every real client uses the proxy as its bootstrap server without noticing it."""

from __future__ import annotations

import asyncio
import zlib

import pytest
from kafka import KafkaConsumer, TopicPartition

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import RunningProxy
from tests.integration.support import clients

RECORDS = 3000
MORE = 500


def checksum(values: list[bytes]) -> int:
    return sum(zlib.crc32(v) for v in values)


def assert_exactly_once(produced: list[bytes], consumed: list[bytes]) -> None:
    assert len(consumed) == len(produced), (len(consumed), len(produced))
    assert checksum(consumed) == checksum(produced)
    assert sorted(consumed) == sorted(produced)


def proxy_addresses(proxy: RunningProxy) -> set[str]:
    return {proxy.broker_address(n) for n in (1, 2, 3)}


def test_topic_partitions_are_led_by_every_broker(proxy3: RunningProxy) -> None:
    clients.create_topic(proxy3.bootstrap, "leaders")
    consumer = KafkaConsumer(bootstrap_servers=proxy3.bootstrap)
    try:
        partitions = consumer.partitions_for_topic("leaders") or set()
        cluster = consumer._client.cluster
        leaders = {cluster.leader_for_partition(TopicPartition("leaders", p)) for p in partitions}
    finally:
        consumer.close()
    assert len(partitions) == 6
    assert leaders == {1, 2, 3}


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_sync_clients_produce_consume_commit_resume(proxy3: RunningProxy, client: str) -> None:
    produce, consume = {
        "kafka-python": (clients.kafka_python_produce, clients.kafka_python_consume),
        "confluent-kafka": (clients.confluent_produce, clients.confluent_consume),
    }[client]
    topic, group = f"rt-{client}", f"group-{client}"
    clients.create_topic(proxy3.bootstrap, topic)
    first = [f"{client}-{i}".encode() for i in range(RECORDS)]
    produce(proxy3.bootstrap, topic, first)
    consumed, brokers = consume(proxy3.bootstrap, topic, group, len(first))
    assert_exactly_once(first, consumed)
    assert brokers == proxy_addresses(proxy3)

    more = [f"{client}-more-{i}".encode() for i in range(MORE)]
    produce(proxy3.bootstrap, topic, more)
    resumed, _ = consume(proxy3.bootstrap, topic, group, len(more))
    assert_exactly_once(more, resumed)  # the group resumed from its committed offsets


async def test_aiokafka_produce_consume_commit_resume(proxy3: RunningProxy) -> None:
    topic, group = "rt-aiokafka", "group-aiokafka"
    await asyncio.to_thread(clients.create_topic, proxy3.bootstrap, topic)
    first = [f"aiokafka-{i}".encode() for i in range(RECORDS)]
    await clients.aiokafka_produce(proxy3.bootstrap, topic, first)
    consumed, brokers = await clients.aiokafka_consume(proxy3.bootstrap, topic, group, RECORDS)
    assert_exactly_once(first, consumed)
    assert brokers == proxy_addresses(proxy3)

    more = [f"aiokafka-more-{i}".encode() for i in range(MORE)]
    await clients.aiokafka_produce(proxy3.bootstrap, topic, more)
    resumed, _ = await clients.aiokafka_consume(proxy3.bootstrap, topic, group, MORE)
    assert_exactly_once(more, resumed)


def test_java_tools_produce_consume_commit_resume(
    kafka3: KafkaCluster, proxy3: RunningProxy
) -> None:
    topic, group = "rt-java", "group-java"
    clients.create_topic(proxy3.bootstrap, topic)
    first = [str(i).encode() for i in range(RECORDS)]
    clients.java_produce(kafka3, proxy3.bootstrap, topic, first)
    assert_exactly_once(
        first, clients.java_consume(kafka3, proxy3.bootstrap, topic, group, RECORDS)
    )

    more = [str(i).encode() for i in range(MORE)]
    clients.java_produce(kafka3, proxy3.bootstrap, topic, more)
    assert_exactly_once(more, clients.java_consume(kafka3, proxy3.bootstrap, topic, group, MORE))


def test_cross_client_records_are_identical(proxy3: RunningProxy) -> None:
    """What one client family writes through the proxy, another reads byte for byte."""
    topic = "cross-client"
    clients.create_topic(proxy3.bootstrap, topic)
    values = [bytes([i % 256]) * (1 + i % 2048) for i in range(1000)]
    clients.confluent_produce(proxy3.bootstrap, topic, values)
    consumed, _ = clients.kafka_python_consume(proxy3.bootstrap, topic, "cross", len(values))
    assert_exactly_once(values, consumed)
