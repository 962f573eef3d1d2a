"""Quotas managed with kafka-configs against the proxy, kept in the cluster (issue 28).

Kafka 4.1's own kafka-configs and Java Admin API alter and describe the proxy's quotas through
its bootstrap; the proxy stores them in a compacted topic of the cluster it fronts, enforces
them at once, shares them with every instance that reads the topic, and leaves the broker's
own quota store alone. Validation answers as the KRaft controller does (a differential test
sends the same requests to a broker and to the proxy).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from config.cluster import ClusterSettings
from localkafka.cluster import KafkaCluster
from localkafka.inprocess.wire import request_frame
from localkafka.jars import java_command
from localkafka.proxy_process import (
    SHORT_QUOTA_WINDOWS,
    RunningProxy,
    restart_proxy,
    start_proxy,
)
from localkafka.scrape import scrape, value, wait_for_metric
from protocol.apis import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS
from protocol.client_quotas import (
    AlterEntry,
    DescribeRequest,
    Pairs,
    alter_body,
    alter_errors,
    describe_body,
    read_describe_entries,
)
from proxy.control.cluster import ClusterClient

CONFIGS = "kafka.admin.ConfigCommand"
STORE_TOPIC = "kafka-quota-proxy-quotas"
TOPIC = "admin-quotas"
JAVA = Path(__file__).parent / "java"
#: the file's own quotas, under what kafka-configs alters
FILE = f"""{SHORT_QUOTA_WINDOWS}
[quota_store]
topic = "{STORE_TOPIC}"

[users.bob]
consumer_byte_rate = 777
"""


@pytest.fixture(scope="module")
def kafka(kafka1: KafkaCluster) -> KafkaCluster:
    """The shared broker, with this module's topic."""
    kafka1.create_topic(TOPIC, partitions=1)
    return kafka1


def file_with_topic(tmp_path: Path) -> str:
    """FILE with a store topic of the test's own, so no test sees another's quotas."""
    return FILE.replace(STORE_TOPIC, f"{STORE_TOPIC}-{tmp_path.name}"[:249])


@pytest.fixture
def proxy(kafka: KafkaCluster, tmp_path: Path) -> Iterator[RunningProxy]:
    running = start_proxy(tmp_path, kafka.bootstrap_servers, 1, file_with_topic(tmp_path))
    yield running
    running.stop()


def configs(kafka: KafkaCluster, bootstrap: str, *args: str) -> str:
    """Stock kafka-configs (Kafka 4.1's ConfigCommand) against `bootstrap`."""
    return kafka.tool(CONFIGS, "--bootstrap-server", bootstrap, *args)


def address(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


async def alter(
    bootstrap: str, entries: list[AlterEntry], validate_only: bool = False
) -> dict[frozenset[tuple[str, str | None]], tuple[int, str | None]]:
    """One AlterClientQuotas on a raw connection: each entity's (error code, message)."""
    async with ClusterClient(ClusterSettings(), [address(bootstrap)], 10.0) as client:
        body = alter_body(1, entries, validate_only)
        frame = await client.ask(ALTER_CLIENT_QUOTAS, 1, body)
    return {frozenset(pairs): (code, message) for pairs, code, message in alter_errors(frame, 1)}


async def described(bootstrap: str, pairs: Pairs) -> dict[str, float]:
    """The quotas of exactly this entity, as DescribeClientQuotas answers them."""
    components = [(t, 0 if n is not None else 1, n) for t, n in pairs]
    async with ClusterClient(ClusterSettings(), [address(bootstrap)], 10.0) as client:
        body = describe_body(1, DescribeRequest(components, strict=True))
        frame = await client.ask(DESCRIBE_CLIENT_QUOTAS, 1, body)
    code, message, entries = read_describe_entries(frame, 1)
    assert code == 0, message
    return entries[0][1] if entries else {}


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float) -> float:
    """Seconds until `check()` is true; fails after timeout_s."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < timeout_s, f"not within {timeout_s} s"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def test_kafka_configs_round_trips_the_proxys_quotas_and_the_broker_keeps_none(
    kafka: KafkaCluster, proxy: RunningProxy
) -> None:
    p = proxy.bootstrap
    four = (
        "producer_byte_rate=1048576,consumer_byte_rate=2097152,request_percentage=12.5,"
        "controller_mutation_rate=7"
    )
    entities = {
        "user-principal 'alice'": ["--entity-type", "users", "--entity-name", "alice"],
        "client-id 'app'": ["--entity-type", "clients", "--entity-name", "app"],
        "user-principal 'alice', client-id 'app'": [
            *("--entity-type", "users", "--entity-name", "alice"),
            *("--entity-type", "clients", "--entity-name", "app"),
        ],
        "the default user-principal": ["--entity-type", "users", "--entity-default"],
        "the default client-id": ["--entity-type", "clients", "--entity-default"],
    }
    for entity in entities.values():
        assert "Completed updating" in configs(kafka, p, "--alter", *entity, "--add-config", four)
    configs(kafka, p, "--alter", "--entity-type", "ips", "--entity-name", "127.0.0.1",
            "--add-config", "connection_creation_rate=50")  # fmt: skip
    shown = (
        "consumer_byte_rate=2097152.0, controller_mutation_rate=7.0, "
        "producer_byte_rate=1048576.0, request_percentage=12.5"
    )
    for name, entity in entities.items():
        lines = configs(kafka, p, "--describe", *entity).splitlines()
        quota_line = next(line for line in lines if line.startswith("Quota configs for"))
        assert quota_line.startswith(f"Quota configs for {name} are ")
        assert sorted(quota_line.split(" are ")[1].split(", ")) == shown.split(", ")
    every_user = configs(kafka, p, "--describe", "--entity-type", "users")
    assert "Quota configs for user-principal 'bob' are consumer_byte_rate=777.0" in every_user
    ips = configs(kafka, p, "--describe", "--entity-type", "ips")
    assert "Quota configs for ip '127.0.0.1' are connection_creation_rate=50.0" in ips
    # the broker's own quota store stays empty: these are the proxy's
    for entity_type in ("users", "clients", "ips"):
        assert "Quota configs" not in configs(
            kafka, kafka.bootstrap_servers, "--describe", "--entity-type", entity_type
        )


async def produce_until(producer: AIOKafkaProducer, stop: asyncio.Event) -> None:
    while not stop.is_set():
        await asyncio.gather(*[await producer.send(TOPIC, b"x" * 10_000) for _ in range(4)])


async def test_a_changed_quota_holds_a_live_client_within_a_second(
    kafka: KafkaCluster, proxy: RunningProxy
) -> None:
    labels = {"user": "", "client_id": "flood"}
    producer = AIOKafkaProducer(bootstrap_servers=proxy.bootstrap, client_id="flood", linger_ms=0)
    await producer.start()
    stop = asyncio.Event()
    flooding = asyncio.create_task(produce_until(producer, stop))
    try:
        await asyncio.sleep(2)
        assert (
            value(scrape(proxy.metrics_url), "kafka_server_produce_throttle_time", **labels) is None
        )
        await asyncio.to_thread(
            configs, kafka, proxy.bootstrap, "--alter", "--entity-type", "clients",
            "--entity-name", "flood", "--add-config", "producer_byte_rate=50000",
        )  # fmt: skip
        altered = time.monotonic()
        await wait_for_metric(
            proxy.metrics_url,
            lambda m: (value(m, "kafka_server_produce_throttle_time", **labels) or 0) > 0,
            timeout_s=1.0,
        )
        assert time.monotonic() - altered < 1.0
        await asyncio.sleep(6)  # held: the rate the proxy's sensor measures over its windows
        rate = value(scrape(proxy.metrics_url), "kafka_server_produce_byte_rate", **labels)
        assert rate is not None and rate < 1.5 * 50_000, rate
    finally:
        stop.set()
        await asyncio.wait_for(flooding, 60)
        await producer.stop()


def test_the_java_admin_api_sets_producer_ids_rate_and_it_is_enforced(
    kafka: KafkaCluster, proxy: RunningProxy
) -> None:
    altered = subprocess.run(
        java_command(str(JAVA / "AlterClientQuota.java"),
                     [proxy.bootstrap, "user", "ANONYMOUS", "producer_ids_rate", "2"]),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert altered.stdout.strip() == "altered", altered.stdout + altered.stderr
    # stock kafka-configs refuses the key before sending it
    with pytest.raises(RuntimeError, match="producer_ids_rate"):
        configs(kafka, proxy.bootstrap, "--alter", "--entity-type", "users",
                "--entity-name", "ANONYMOUS", "--add-config", "producer_ids_rate=3")  # fmt: skip
    run = subprocess.run(
        java_command(str(JAVA / "ShortLivedProducers.java"),
                     ["produce", proxy.bootstrap, "-", "-", TOPIC, "8", "1", "1000"]),
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    delivered = next(
        int(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("delivered")
    )
    assert delivered <= 3  # a bucket of 2, checked then recorded: the third is the last one
    tokens = value(scrape(proxy.metrics_url), "kafka_server_producerids_tokens", user="ANONYMOUS")
    assert tokens is not None and tokens < 0


#: Kafka's ClientQuotaControlManagerTest and ClientQuotasRequestTest cases that a request can
#: carry, each sent validate_only to the broker and to the proxy
VALIDATION_CASES: list[list[AlterEntry]] = [
    [AlterEntry([("foo", "bar")], [("producer_byte_rate", 10000.0)])],
    [AlterEntry([("user", "user-1"), ("foo", "bar")], [("producer_byte_rate", 10000.0)])],
    [AlterEntry([("foo", "bar"), ("ip", "1.2.3.4")], [("producer_byte_rate", 10000.0)])],
    [AlterEntry([("user", "user-1"), ("ip", "1.2.3.4")], [("producer_byte_rate", 10000.0)])],
    [AlterEntry([("client-id", "user-1"), ("ip", "1.2.3.4")], [("producer_byte_rate", 1.0)])],
    [AlterEntry([], [("producer_byte_rate", 10000.0)])],
    [AlterEntry([("user", "user-1")], [("not.a.quota.key", 0.0), ("request_percentage", 99.9)])],
    [AlterEntry([("ip", None)], [("connection_creation_rate", 5.0)])],
    [AlterEntry([("ip", "example.invalid")], [("connection_creation_rate", 5.0)])],
    [AlterEntry([("ip", "127.0.0.1")], [("connection_creation_rate", 5.0)])],
    [AlterEntry([("client-id", "foo")], [("foobar", 1.0)])],
    [AlterEntry([("client-id", "foo")], [("producer_byte_rate", 0.0)])],
    [AlterEntry([("client-id", "foo")], [("consumer_byte_rate", -2.0)])],
    [AlterEntry([("client-id", "foo")], [("consumer_byte_rate", 1234.0)])],
    [AlterEntry([("client-id", "foo")], [("consumer_byte_rate", 36893488147419103232.4)])],
    [AlterEntry([("client-id", "foo")], [("consumer_byte_rate", 2.245)])],
    [AlterEntry([("client-id", "foo")], [("consumer_byte_rate", 1235.0000001)])],
    [AlterEntry([("client-id", "foo")], [("request_percentage", 56.62367)])],
    [AlterEntry([("user", "")], [("request_percentage", 12.34)])],
    [AlterEntry([("client-id", "")], [("request_percentage", 12.34)])],
    [AlterEntry([("", "name")], [("request_percentage", 12.34)])],
    [AlterEntry([("user", "user")], [("bad", 1.0)])],
    [AlterEntry([("user", "user")], [("producer_byte_rate", 10000.5)])],
    [
        AlterEntry(
            [("ip", "not a valid host because it has spaces")], [("connection_creation_rate", 50.0)]
        )
    ],
    [AlterEntry([("ip", "RFC2606.invalid")], [("connection_creation_rate", 50.0)])],
    [AlterEntry([("user", "u"), ("client-id", None)], [("connection_creation_rate", 5.0)])],
    [AlterEntry([("ip", "1.2.3.4")], [("request_percentage", 5.0)])],
    [AlterEntry([("user", "u")], [("request_percentage", None), ("bad", None)])],
    [
        AlterEntry([("user", "user-1"), ("client-id", "c-1")], [("request_percentage", 50.5)]),
        AlterEntry([("user", None), ("client-id", "c-1")], [("request_percentage", 53.53)]),
        AlterEntry([("user", "user-3"), ("client-id", None)], [("request_percentage", 55.55)]),
        AlterEntry([("user", None)], [("request_percentage", 59.59)]),
        AlterEntry([("client-id", "c-2")], [("request_percentage", 60.6)]),
    ],
]


async def test_every_validation_case_answers_as_the_broker_does(
    kafka: KafkaCluster, proxy: RunningProxy
) -> None:
    for case in VALIDATION_CASES:
        broker = await alter(kafka.bootstrap_servers, case, validate_only=True)
        through = await alter(proxy.bootstrap, case, validate_only=True)
        assert through == broker, case
    # and a refused filter, too
    filters: list[list[tuple[str, int, str | None]]] = [
        [("other", 2, None)],
        [("user", 2, None), ("user", 2, None)],
        [("user", 0, None)],
        [("ip", 2, None), ("user", 2, None)],
    ]
    for components in filters:
        answers = []
        for bootstrap in (kafka.bootstrap_servers, proxy.bootstrap):
            async with ClusterClient(ClusterSettings(), [address(bootstrap)], 10.0) as client:
                body = describe_body(1, DescribeRequest(components, strict=False))
                frame = await client.ask(DESCRIBE_CLIENT_QUOTAS, 1, body)
            answers.append(read_describe_entries(frame, 1)[:2])
        assert answers[0] == answers[1], components


async def test_two_instances_share_an_alteration_and_a_restart_loses_nothing(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    shared = file_with_topic(tmp_path)
    first = start_proxy(tmp_path, kafka.bootstrap_servers, 1, shared, name="a")
    second = start_proxy(tmp_path, kafka.bootstrap_servers, 1, shared, name="b")
    bob: Pairs = [("user", "bob")]
    try:
        results = await alter(first.bootstrap, [AlterEntry(bob, [("consumer_byte_rate", 4242.0)])])
        assert results == {frozenset(bob): (0, None)}

        async def second_has_it() -> bool:
            return (await described(second.bootstrap, bob)).get("consumer_byte_rate") == 4242.0

        assert await until(second_has_it, 1.0) < 1.0
        checked = subprocess.run(
            [sys.executable, "-m", "proxy", "check-config", str(first.config_path)],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        shown = [line.split() for line in checked.stdout.splitlines()]
        assert ["consumer_byte_rate", "4242", "from", "users/bob", "(altered)"] in shown
        first, second = restart_proxy(first), restart_proxy(second)
        # the first request the restarted instance serves already finds it
        assert (await described(second.bootstrap, bob))["consumer_byte_rate"] == 4242.0
        configs(kafka, second.bootstrap, "--alter", "--entity-type", "users", "--entity-name",
                "bob", "--delete-config", "consumer_byte_rate")  # fmt: skip

        async def files_value_again() -> bool:
            return (await described(first.bootstrap, bob)).get("consumer_byte_rate") == 777.0

        await until(files_value_again, 1.0)
    finally:
        first.stop()
        second.stop()


async def test_a_lost_store_topic_keeps_the_last_quotas_and_refuses_alterations_until_back(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    file = file_with_topic(tmp_path)
    topic = file.split('topic = "')[1].split('"')[0]
    running = start_proxy(tmp_path, kafka.bootstrap_servers, 1, file)
    carol: Pairs = [("user", "carol")]
    try:
        assert await alter(
            running.bootstrap, [AlterEntry(carol, [("request_percentage", 3.0)])]
        ) == {frozenset(carol): (0, None)}
        await asyncio.to_thread(
            kafka.tool, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
            kafka.bootstrap_servers, "--delete", "--topic", topic,
        )  # fmt: skip
        await wait_for_metric(
            running.metrics_url,
            lambda m: value(m, "kafka_quota_proxy_quota_store_up") == 0.0,
            timeout_s=5.0,
        )
        refused = await alter(running.bootstrap, [AlterEntry(carol, [("request_percentage", 4.0)])])
        code, message = refused[frozenset(carol)]
        assert code == 7 and message is not None and "cannot be reached" in message
        # enforcing the last quotas it read
        assert (await described(running.bootstrap, carol)) == {"request_percentage": 3.0}
        assert f"quota store topic {topic} cannot be read" in running.log()
        await wait_for_metric(
            running.metrics_url,
            lambda m: value(m, "kafka_quota_proxy_quota_store_up") == 1.0,
            timeout_s=30.0,
        )
        results = await alter(running.bootstrap, [AlterEntry(carol, [("request_percentage", 4.0)])])
        assert results == {frozenset(carol): (0, None)}
        assert "made again with the 1 altered quotas" in running.log()
    finally:
        running.stop()


def test_a_malformed_or_oversized_alteration_closes_only_its_connection(
    proxy: RunningProxy,
) -> None:
    host, port = address(proxy.bootstrap)
    bystander = socket.create_connection((host, port), timeout=10)
    try:
        for frame in (
            request_frame(ALTER_CLIENT_QUOTAS, 1, b"\x02\x7f\x7f\x7f"),  # runs past its end
            struct.pack(">i", 2**30) + b"\x00\x31\x00\x01",  # over max_frame_bytes
        ):
            with socket.create_connection((host, port), timeout=10) as bad:
                bad.sendall(frame)
                assert bad.recv(1) == b""  # closed, nothing answered
        bystander.sendall(request_frame(18, 3, b"\x01\x01\x00", correlation_id=5))
        size = struct.unpack(">i", bystander.recv(4))[0]
        assert size > 0
    finally:
        bystander.close()
