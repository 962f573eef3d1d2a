"""Topic quotas across a fleet, and managed with stock kafka-configs (issue 38, KIP-1010).

A topic's producer_byte_rate (consumer_byte_rate) caps the bytes every client together
writes into (reads from) it, through every instance of a fleet. Three instances in front of
the 3-broker cluster; two principals (client-ids) produce to one topic of six partitions,
each through other instances, while a third principal writes another topic on the same
brokers. Together the two are held within the bound a principal's quota is held to
(tests/integration/support/held.py: 1.10 x over 20 s) and the third is never throttled;
then the same for consumers. The quotas are set as operators would: with kafka-configs'
`--entity-type topics` (beside retention.ms, in one command) and with the Admin API's
client-quota entity of type topic.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from config.cluster import ClusterSettings
from localkafka.cluster import KafkaCluster
from localkafka.fleet import confluent_fleet, fleet_rate, fleet_timelines
from localkafka.load import (
    RECORD_BYTES,
    Timeline,
    aiokafka_flood,
    assert_no_loss_or_duplicates,
    java_fill,
    read_all,
    seq_of,
)
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, restart_proxy, start_proxy
from localkafka.scrape import scrape, total
from protocol.apis import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS, INCREMENTAL_ALTER_CONFIGS
from protocol.client_quotas import (
    AlterEntry,
    DescribeRequest,
    alter_body,
    alter_errors,
    describe_body,
    read_describe_entries,
)
from protocol.resource_configs import (
    TOPIC_RESOURCE,
    AlterableConfig,
    AlterRequest,
    AlterResource,
    alter_results,
)
from protocol.resource_configs import alter_body as configs_body
from proxy.control.cluster import ClusterClient
from tests.integration.support.held import BOUND, FIRST_WINDOW_S, IN_FLIGHT, MEASURED_S

CONFIGS = "kafka.admin.ConfigCommand"
QUOTA = 1_000_000
PRODUCE_KEY = "kafka-quota-proxy.producer_byte_rate"
CONSUME_KEY = "kafka-quota-proxy.consumer_byte_rate"
WRITERS, NEIGHBOUR = ("writer-a", "writer-b"), "writer-c"
READERS = ("reader-a", "reader-b")
PARTITIONS = 6
#: librdkafka processes per writer principal
PROCESSES = 2
#: a reader's fetch is at most this much per partition: the bytes a reader holds at the edges
#: of the measured span stay under 1 % of it
FETCH_PARTITION_BYTES = 32 * 1024


def fleet_config(store: str) -> str:
    return SHORT_QUOTA_WINDOWS + f'[quota_store]\ntopic = "{store}"\n[fleet]\nname = "topics"\n'


@pytest.fixture(scope="module")
def fleet(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RunningProxy]]:
    tmp = tmp_path_factory.mktemp("topic-fleet")
    config = fleet_config("topic-quotas-fleet")
    instances = [
        start_proxy(tmp, kafka3.bootstrap_servers, 3, config, name=f"topics-{index}")
        for index in range(3)
    ]
    yield instances
    for instance in instances:
        instance.stop()


def configs(kafka: KafkaCluster, bootstrap: str, *args: str) -> str:
    """Stock kafka-configs (the pinned Kafka's ConfigCommand) against `bootstrap`."""
    return kafka.tool(CONFIGS, "--bootstrap-server", bootstrap, *args)


def address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


async def topic_quotas(bootstrap: str, topic: str) -> dict[str, float]:
    """The topic's quotas as the instance at `bootstrap` answers DescribeClientQuotas."""
    async with ClusterClient(ClusterSettings(), [address(bootstrap)], 10.0) as client:
        body = describe_body(1, DescribeRequest([("topic", 0, topic)], strict=True))
        frame = await client.ask(DESCRIBE_CLIENT_QUOTAS, 1, body)
    code, message, entries = read_describe_entries(frame, 1)
    assert code == 0, message
    return entries[0][1] if entries else {}


async def until_every_instance_has(
    fleet: list[RunningProxy], topic: str, key: str, expected: float | None
) -> None:
    for _ in range(100):
        found = [(await topic_quotas(i.bootstrap, topic)).get(key) for i in fleet]
        if all(f == expected for f in found):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{topic} {key}: {found}, not {expected}")


def throttles(fleet: list[RunningProxy], topic: str, quota: str) -> float:
    """Responses whose largest throttle was the topic's quota, over the fleet."""
    return sum(
        total(
            scrape(i.metrics_url),
            "kafka_quota_proxy_topic_throttles_total",
            topic=topic,
            quota=quota,
        )
        for i in fleet
    )


def principal_throttles(fleet: list[RunningProxy], client_id: str) -> float:
    """Responses that carried a throttle for this principal, over the fleet."""
    return sum(
        total(scrape(i.metrics_url), "kafka_quota_proxy_throttles_total", client_id=client_id)
        for i in fleet
    )


async def test_two_principals_writing_one_topic_through_three_instances_are_held_as_one(
    kafka3: KafkaCluster, fleet: list[RunningProxy]
) -> None:
    hot, other = "topic-quota-hot", "topic-quota-other"
    kafka3.create_topic(hot, partitions=PARTITIONS)
    kafka3.create_topic(other, partitions=PARTITIONS)
    # set as an operator would: one command, the proxy's key beside one of Kafka's
    out = configs(kafka3, fleet[0].bootstrap, "--alter", "--entity-type", "topics",
                  "--entity-name", hot, "--add-config",
                  f"{PRODUCE_KEY}={QUOTA},retention.ms=7200000")  # fmt: skip
    assert f"Completed updating config for topic {hot}." in out
    await until_every_instance_has(fleet, hot, "producer_byte_rate", QUOTA)
    addresses = [instance.bootstrap for instance in fleet]
    seconds = FIRST_WINDOW_S + MEASURED_S
    neighbour = Timeline()
    # process i of a writer goes through instance i (writer-a) or i + 1 (writer-b)
    with (
        confluent_fleet(addresses[:2], WRITERS[0], hot, seconds, PROCESSES, None, IN_FLIGHT) as a,
        confluent_fleet(
            addresses[1:], WRITERS[1], hot, seconds, PROCESSES, None, IN_FLIGHT, PROCESSES
        ) as b,
    ):
        await aiokafka_flood(addresses[2], NEIGHBOUR, other, seconds, neighbour, QUOTA / 2)
        timelines = await asyncio.to_thread(fleet_timelines, [*a, *b], seconds + 90)
    rate = fleet_rate(timelines, FIRST_WINDOW_S, seconds)
    by_writer = [fleet_rate(timelines[i : i + PROCESSES], FIRST_WINDOW_S, seconds) for i in (0, 2)]
    neighbour_rate = neighbour.rate(FIRST_WINDOW_S, seconds)
    print(
        f"{hot}: {rate:,.0f} B/s over {MEASURED_S:.0f} s ({rate / QUOTA:.3f} x its quota);"
        f" by writer {', '.join(f'{r:,.0f}' for r in by_writer)};"
        f" {NEIGHBOUR} on {other}: {neighbour_rate:,.0f} B/s"
    )
    assert 0 < rate < BOUND * QUOTA
    assert all(r > 0 for r in by_writer)
    assert await asyncio.to_thread(throttles, fleet, hot, "producer_byte_rate") > 0
    assert await asyncio.to_thread(principal_throttles, fleet, NEIGHBOUR) == 0
    assert neighbour_rate > 0.9 * QUOTA / 2  # it got what it offered
    stored = [seq_of(v) for v in read_all(kafka3.bootstrap_servers, hot)]
    assert_no_loss_or_duplicates([seq for t in timelines for seq in t.seqs], stored)
    assert_no_loss_or_duplicates(
        neighbour.seqs, [seq_of(v) for v in read_all(kafka3.bootstrap_servers, other)]
    )
    # the broker's own config of the topic has Kafka's key alone
    broker = configs(kafka3, kafka3.bootstrap_servers, "--describe", "--entity-type", "topics",
                     "--entity-name", hot)  # fmt: skip
    assert "retention.ms=7200000" in broker and "kafka-quota-proxy" not in broker


async def drain(
    bootstrap: str, client_id: str, topic: str, partitions: range, seconds: float, at: Timeline
) -> None:
    """Read the partitions from the start until the deadline, without a group."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        max_partition_fetch_bytes=FETCH_PARTITION_BYTES,
        fetch_max_bytes=len(partitions) * FETCH_PARTITION_BYTES,
    )
    await consumer.start()
    assigned = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(assigned)
    await consumer.seek_to_beginning(*assigned)
    try:
        while at.elapsed() < seconds:
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                for message in messages:
                    at.add(len(message.value or b""))
    finally:
        await consumer.stop()


async def test_two_principals_reading_one_topic_through_three_instances_are_held_as_one(
    kafka3: KafkaCluster, fleet: list[RunningProxy]
) -> None:
    read = "topic-quota-read"
    kafka3.create_topic(read, partitions=PARTITIONS)
    seconds = FIRST_WINDOW_S + MEASURED_S
    await asyncio.to_thread(java_fill, kafka3, read, int(QUOTA / RECORD_BYTES * (seconds + 15)))
    # set through the Admin API: a client-quota entity of type topic
    async with ClusterClient(ClusterSettings(), [address(fleet[1].bootstrap)], 10.0) as client:
        entry = AlterEntry([("topic", read)], [("consumer_byte_rate", float(QUOTA))])
        frame = await client.ask(ALTER_CLIENT_QUOTAS, 1, alter_body(1, [entry], False))
    assert [code for _, code, _ in alter_errors(frame, 1)] == [0]
    await until_every_instance_has(fleet, read, "consumer_byte_rate", QUOTA)
    timelines = [Timeline() for _ in range(3)]
    # reader-a through instances 0 and 1 (three partitions each), reader-b through 2
    await asyncio.gather(
        drain(fleet[0].bootstrap, READERS[0], read, range(0, 3), seconds, timelines[0]),
        drain(fleet[1].bootstrap, READERS[0], read, range(3, 6), seconds, timelines[1]),
        drain(fleet[2].bootstrap, READERS[1], read, range(0, 6), seconds, timelines[2]),
    )
    rate = fleet_rate(timelines, FIRST_WINDOW_S, seconds)
    each = [t.rate(FIRST_WINDOW_S, seconds) for t in timelines]
    print(
        f"{read}: {rate:,.0f} B/s read over {MEASURED_S:.0f} s ({rate / QUOTA:.3f} x its quota);"
        f" by consumer {', '.join(f'{r:,.0f}' for r in each)}"
    )
    assert 0 < rate < BOUND * QUOTA
    assert all(r > 0 for r in each)
    assert await asyncio.to_thread(throttles, fleet, read, "consumer_byte_rate") > 0


async def test_kafka_configs_alters_describes_and_deletes_a_topic_quota_kept_over_a_restart(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    admin_proxy = start_proxy(tmp_path, kafka1.bootstrap_servers, 1, fleet_config("topic-admin"))
    topic = "topic-quota-admin"
    kafka1.create_topic(topic, partitions=1)
    named = ["--entity-type", "topics", "--entity-name", topic]
    out = configs(kafka1, admin_proxy.bootstrap, "--alter", *named, "--add-config",
                  f"{PRODUCE_KEY}=1048576,{CONSUME_KEY}=2097152,retention.ms=3600000")  # fmt: skip
    assert f"Completed updating config for topic {topic}." in out
    shown = configs(kafka1, admin_proxy.bootstrap, "--describe", *named)
    assert f"{PRODUCE_KEY}=1048576 sensitive=false synonyms={{DYNAMIC_TOPIC_CONFIG:" in shown
    assert f"{CONSUME_KEY}=2097152" in shown and "retention.ms=3600000" in shown
    broker = configs(kafka1, kafka1.bootstrap_servers, "--describe", *named)
    assert "retention.ms=3600000" in broker and "kafka-quota-proxy" not in broker
    # a malformed value: the broker's error, in its words, and nothing changes
    with pytest.raises(RuntimeError) as refused:
        configs(kafka1, admin_proxy.bootstrap, "--alter", *named, "--add-config",
                f"{PRODUCE_KEY}=1MB,retention.ms=60000")  # fmt: skip
    assert (
        f"InvalidConfigurationException: Invalid value 1MB for configuration {PRODUCE_KEY}:"
        " Not a number of type LONG" in str(refused.value)
    )
    assert "retention.ms=3600000" in configs(kafka1, kafka1.bootstrap_servers, "--describe", *named)
    # the proxy's own tools see where it comes from
    checked = subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", str(admin_proxy.config_path)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = [line.split() for line in checked.stdout.splitlines()]
    assert ["producer_byte_rate", "1048576", "from", f"topics/{topic}", "(altered)"] in lines
    restarted = restart_proxy(admin_proxy)  # it stops it first
    try:
        assert await topic_quotas(restarted.bootstrap, topic) == {
            "producer_byte_rate": 1048576.0,
            "consumer_byte_rate": 2097152.0,
        }
        configs(kafka1, restarted.bootstrap, "--alter", *named, "--delete-config",
                f"{PRODUCE_KEY},retention.ms")  # fmt: skip
        shown = configs(kafka1, restarted.bootstrap, "--describe", *named)
        assert PRODUCE_KEY not in shown and "retention.ms" not in shown and CONSUME_KEY in shown
        assert await topic_quotas(restarted.bootstrap, topic) == {"consumer_byte_rate": 2097152.0}
        # a topic that does not exist: the broker says so, and the proxy stores nothing
        missing = AlterRequest(
            INCREMENTAL_ALTER_CONFIGS,
            [
                AlterResource(
                    TOPIC_RESOURCE, "no-such-topic", [AlterableConfig(PRODUCE_KEY, 0, "5")]
                )
            ],
            False,
        )
        async with ClusterClient(ClusterSettings(), [address(restarted.bootstrap)], 10) as client:
            frame = await client.ask(INCREMENTAL_ALTER_CONFIGS, 1, configs_body(1, missing))
        ((code, *_),) = alter_results(frame, INCREMENTAL_ALTER_CONFIGS, 1)[1]
        assert code == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert await topic_quotas(restarted.bootstrap, "no-such-topic") == {}
    finally:
        restarted.stop()
