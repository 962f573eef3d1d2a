"""KIP-599 through the proxy in front of a real broker: partition mutations per principal.

Kafka's ControllerMutationQuotaTest scenario: controller_mutation_rate = 2 with ten one-second
windows (a burst of 20 partitions). Each test uses its own client-id, so each starts with a
full bucket; "unbounded" has no quota. Clients that speak CreateTopics v6+, CreatePartitions
v3+ or DeleteTopics v5+ (kafka-python 3, the Java Admin client and CLI) get error 89 for the
topics refused; older versions (aiokafka, librdkafka, a pinned kafka-python) are admitted
whole and throttled by muting, as Kafka does.
"""

from __future__ import annotations

import asyncio
import math
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic as ConfluentNewTopic
from kafka.admin import KafkaAdminClient, NewPartitions
from kafka.errors import ThrottlingQuotaExceededError
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.metadata import MetadataResponse

from localkafka.cluster import KafkaCluster
from localkafka.inprocess.wire import decode_response
from localkafka.jars import java_command
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, value
from protocol.apis import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, METADATA
from protocol.headers import encode_request
from protocol.metadata import metadata_request_body
from protocol.mutations import THROTTLING_QUOTA_EXCEEDED
from tests.integration.support.clients import SASL_USERS

CLIENTS = (
    "raw",
    "kafka-python",
    "java",
    "cli",
    "partitions",
    "delete",
    "old",
    "old-mute",
    "aiokafka",
    "exists",
)
CONFIG = (
    "[broker]\ncontroller.quota.window.num = 10\ncontroller.quota.window.size.seconds = 1\n"
    + "".join(f'[clients."{client}"]\ncontroller_mutation_rate = 2\n' for client in CLIENTS)
    + '[clients."confluent"]\ncontroller_mutation_rate = 2\n'
)
JAVA_RETRY = Path(__file__).parent / "java" / "CreateTopicsWithRetry.java"
_INT32 = struct.Struct(">i")


@pytest.fixture(scope="module")
def proxy(kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    running = start_proxy(
        tmp_path_factory.mktemp("proxy-mutations"), kafka1.bootstrap_servers, 1, CONFIG
    )
    yield running
    running.stop()


def round_trip(address: str, api_key: int, version: int, body: bytes, client_id: str) -> bytes:
    """One request on a connection of its own, and its response frame."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(encode_request(api_key, version, 1, client_id, body))
        return _read_frame(sock)


def _read_frame(sock: socket.socket) -> bytes:
    size = _INT32.unpack(_read(sock, 4))[0]
    return _INT32.pack(size) + _read(sock, size)


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return bytes(data)


def assert_cluster(cluster: KafkaCluster, expected: dict[str, int | None]) -> None:
    """Topic -> partitions (None if absent), from fresh Metadata calls straight to the broker.

    The controller answers a mutation once it is committed and the broker's metadata follows
    a moment later, so the broker is asked until it shows `expected` or 10 s have passed;
    topics created in one request appear together, so a topic that should be absent is
    checked no earlier than the ones created beside it.
    """
    deadline = time.monotonic() + 10
    while True:
        body = metadata_request_body(list(expected))
        frame = round_trip(cluster.brokers[0].address, METADATA, 12, body, "check")
        msg = decode_response(MetadataResponse, frame, METADATA, 12)
        state = {t.name: (len(t.partitions) if t.error_code == 0 else None) for t in msg.topics}
        if state == expected or time.monotonic() > deadline:
            assert state == expected
            return
        time.sleep(0.2)


def mutation_metrics(proxy: RunningProxy, client_id: str) -> dict[str, float | None]:
    samples = scrape(proxy.metrics_url)
    return {
        name: value(
            samples, f"kafka_server_controllermutation_{name}", user="", client_id=client_id
        )
        for name in ("tokens", "mutation_rate", "throttle_time")
    }


def create_topics_body(
    version: int, *names: str, partitions: int = 30, validate_only: bool = False
) -> bytes:
    topic = CreateTopicsRequest.CreatableTopic
    msg = CreateTopicsRequest(
        version=version,
        topics=[
            topic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                assignments=[],
                configs=[],
            )
            for name in names
        ],
        timeout_ms=30000,
        validate_only=validate_only,
    )
    return bytes(msg.encode(version=version))


def test_a_strict_create_of_two_topics_creates_the_first_and_refuses_the_second(
    proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    frame = round_trip(
        proxy.bootstrap, CREATE_TOPICS, 7, create_topics_body(7, "raw-a", "raw-b"), "raw"
    )
    answer = decode_response(CreateTopicsResponse, frame, CREATE_TOPICS, 7)
    assert [(t.name, t.error_code) for t in answer.topics] == [
        ("raw-a", 0),
        ("raw-b", THROTTLING_QUOTA_EXCEEDED),
    ]
    assert 0 < answer.throttle_time_ms <= 5000
    assert_cluster(kafka1, {"raw-a": 30, "raw-b": None})
    metrics = mutation_metrics(proxy, "raw")
    assert metrics["tokens"] is not None and metrics["tokens"] < 0
    assert metrics["throttle_time"] is not None and metrics["throttle_time"] > 0


def test_validate_only_and_a_principal_without_a_quota_are_never_charged(
    proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    body = create_topics_body(7, "free-a", "free-b", validate_only=True)
    frame = round_trip(proxy.bootstrap, CREATE_TOPICS, 7, body, "old")
    answer = decode_response(CreateTopicsResponse, frame, CREATE_TOPICS, 7)
    assert [t.error_code for t in answer.topics] == [0, 0] and answer.throttle_time_ms == 0
    frame = round_trip(
        proxy.bootstrap, CREATE_TOPICS, 7, create_topics_body(7, "free-a", "free-b"), "unbounded"
    )
    answer = decode_response(CreateTopicsResponse, frame, CREATE_TOPICS, 7)
    assert [t.error_code for t in answer.topics] == [0, 0] and answer.throttle_time_ms == 0
    assert_cluster(kafka1, {"free-a": 30, "free-b": 30})
    assert math.isnan(mutation_metrics(proxy, "unbounded")["throttle_time"] or 0.0)  # never
    assert mutation_metrics(proxy, "old")["tokens"] == 20  # validate_only charged nothing


def test_kafka_python_sees_error_89_for_creates_partitions_and_deletes(
    proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="kafka-python")
    try:
        with pytest.raises(ThrottlingQuotaExceededError):
            admin.create_topics({"kp-a": {"num_partitions": 30}, "kp-b": {"num_partitions": 30}})
        assert_cluster(kafka1, {"kp-a": 30, "kp-b": None})
    finally:
        admin.close()
    kafka1.create_topic("grow-a", partitions=1)
    kafka1.create_topic("grow-b", partitions=1)
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="partitions")
    try:
        with pytest.raises(ThrottlingQuotaExceededError):
            admin.create_partitions({"grow-a": NewPartitions(31), "grow-b": NewPartitions(31)})
        assert_cluster(kafka1, {"grow-a": 31, "grow-b": 1})
    finally:
        admin.close()


def test_delete_topics_by_name_and_by_id(proxy: RunningProxy, kafka1: KafkaCluster) -> None:
    for name in ("del-a", "del-b", "del-c"):
        kafka1.create_topic(name, partitions=12)
    ids = topic_ids(kafka1, "del-c", "del-b")
    state = DeleteTopicsRequest.DeleteTopicState
    body = DeleteTopicsRequest(
        version=6,
        topics=[
            state(name="del-a", topic_id=None),
            state(name=None, topic_id=ids["del-c"]),
            state(name="del-b", topic_id=None),
        ],
        timeout_ms=30000,
    )
    frame = round_trip(proxy.bootstrap, DELETE_TOPICS, 6, bytes(body.encode()), "delete")
    answer = decode_response(DeleteTopicsResponse, frame, DELETE_TOPICS, 6)
    # 20 tokens: del-a (12) leaves 8, del-c by id (12) leaves -4, del-b is refused
    assert [r.error_code for r in answer.responses] == [0, 0, THROTTLING_QUOTA_EXCEEDED]
    assert answer.responses[1].topic_id == ids["del-c"]
    assert (answer.responses[2].name, answer.responses[2].topic_id) == ("del-b", ids["del-b"])
    assert 0 < answer.throttle_time_ms <= 2000
    assert_cluster(
        kafka1,
        {
            "del-a": None,
            "del-b": 12,
            "del-c": None,
        },
    )


def test_a_topic_that_exists_is_not_charged_so_it_refuses_nothing_after_it(
    proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    """Kafka's controller fails an existing topic before charging it: 30 partitions of a
    topic that exists must not use up the bucket of 20 for the new topic beside it."""
    kafka1.create_topic("exists-a", partitions=30)
    body = create_topics_body(7, "exists-a", "exists-b", partitions=15)
    frame = round_trip(proxy.bootstrap, CREATE_TOPICS, 7, body, "exists")
    answer = decode_response(CreateTopicsResponse, frame, CREATE_TOPICS, 7)
    assert [(t.name, t.error_code) for t in answer.topics] == [("exists-a", 36), ("exists-b", 0)]
    assert_cluster(kafka1, {"exists-a": 30, "exists-b": 15})


def topic_ids(cluster: KafkaCluster, *topics: str) -> dict[str, uuid.UUID]:
    frame = round_trip(
        cluster.brokers[0].address, METADATA, 12, metadata_request_body(topics), "check"
    )
    msg = decode_response(MetadataResponse, frame, METADATA, 12)
    return {t.name: t.topic_id for t in msg.topics}


def test_the_java_admin_client_retries_the_refused_topic_after_the_throttle(
    proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    started = time.monotonic()
    result = subprocess.run(
        java_command(str(JAVA_RETRY), [proxy.bootstrap, "java", "java-a", "java-b"], heap="256m"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert_cluster(kafka1, {"java-a": 30, "java-b": 30})
    # java-a took the bucket from 20 to -10; java-b waited for it to refill to 0 at 2/s
    assert elapsed >= 4.5
    assert mutation_metrics(proxy, "java")["throttle_time"] is not None


def test_the_cli_prints_the_quota_error(proxy: RunningProxy, tmp_path: Path) -> None:
    config = tmp_path / "cli.properties"
    config.write_text("client.id=cli\n")

    def create(topic: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            java_command(
                "org.apache.kafka.tools.TopicCommand",
                [
                    "--bootstrap-server",
                    proxy.bootstrap,
                    "--command-config",
                    str(config),
                    "--create",
                    "--topic",
                    topic,
                    "--partitions",
                    "30",
                ],
                heap="256m",
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert create("cli-a").returncode == 0
    refused = create("cli-b")
    assert refused.returncode == 1
    assert "The throttling quota has been exceeded" in refused.stdout + refused.stderr


def test_old_versions_are_admitted_whole_and_the_connection_muted(
    proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    body = create_topics_body(5, "old-a", "old-b")
    frame = round_trip(proxy.bootstrap, CREATE_TOPICS, 5, body, "old")
    answer = decode_response(CreateTopicsResponse, frame, CREATE_TOPICS, 5)
    assert [t.error_code for t in answer.topics] == [0, 0]
    assert 0 < answer.throttle_time_ms <= 20000  # 20 - 60 = -40 at 2 per second
    assert_cluster(kafka1, {"old-a": 30, "old-b": 30})
    # a pinned kafka-python (CreateTopics v5) is admitted too, and sees no error
    admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="old", api_version=(2, 6))
    try:
        admin.create_topics({"old-c": {"num_partitions": 2}})
    finally:
        admin.close()
    assert_cluster(kafka1, {"old-c": 2})
    # CreatePartitions v2 and DeleteTopics v4: admitted, and throttled, bucket far below zero
    grow = CreatePartitionsRequest(
        version=2,
        topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name="old-c", count=4, assignments=None)
        ],
        timeout_ms=30000,
        validate_only=False,
    )
    frame = round_trip(proxy.bootstrap, CREATE_PARTITIONS, 2, bytes(grow.encode(version=2)), "old")
    grown = decode_response(CreatePartitionsResponse, frame, CREATE_PARTITIONS, 2)
    assert [r.error_code for r in grown.results] == [0] and grown.throttle_time_ms > 0
    delete = DeleteTopicsRequest(version=4, topic_names=["old-a", "old-b"], timeout_ms=30000)
    frame = round_trip(proxy.bootstrap, DELETE_TOPICS, 4, bytes(delete.encode()), "old")
    deleted = decode_response(DeleteTopicsResponse, frame, DELETE_TOPICS, 4)
    assert [r.error_code for r in deleted.responses] == [0, 0] and deleted.throttle_time_ms > 0
    assert_cluster(kafka1, {"old-a": None, "old-b": None, "old-c": 4})


def test_an_old_versions_throttle_mutes_its_connection(proxy: RunningProxy) -> None:
    """22 partitions from a bucket of 20 leave -2 tokens: a 1 s throttle, less the time the
    broker took to answer, for which the proxy reads nothing more from the connection, as
    Kafka mutes an old client's channel."""
    host, port = proxy.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        body = create_topics_body(5, "mute-a", partitions=22)
        sent = time.monotonic()
        sock.sendall(encode_request(CREATE_TOPICS, 5, 1, "old-mute", body))
        frame = _read_frame(sock)
        round_trip_ms = (time.monotonic() - sent) * 1000
        throttle_ms = decode_response(
            CreateTopicsResponse, frame, CREATE_TOPICS, 5
        ).throttle_time_ms
        assert 1000 - round_trip_ms - 1 <= throttle_ms <= 1000
        started = time.monotonic()
        sock.sendall(encode_request(METADATA, 12, 2, "old-mute", metadata_request_body([])))
        _read_frame(sock)
        assert time.monotonic() - started >= 0.9 * throttle_ms / 1000


async def test_aiokafka_and_librdkafka_are_throttled_not_refused(
    proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=proxy.bootstrap, client_id="aiokafka")
    await admin.start()
    try:
        response: Any = await admin.create_topics(
            [AioNewTopic(name, 30, 1) for name in ("aio-a", "aio-b")]
        )
    finally:
        await admin.close()
    assert [error for _, error, *_ in response.topic_errors] == [0, 0]
    assert 0 < response.throttle_time_ms <= 20000
    throttles: list[str] = []
    config: dict[str, Any] = {
        "bootstrap.servers": proxy.bootstrap,
        "client.id": "confluent",
        "throttle_cb": lambda event: throttles.append(str(event)),
    }
    confluent = AdminClient(config)
    futures = confluent.create_topics([ConfluentNewTopic(n, 30, 1) for n in ("ck-a", "ck-b")])
    for future in futures.values():
        await asyncio.to_thread(future.result, 60)
    deadline = time.monotonic() + 10
    while not throttles and time.monotonic() < deadline:
        await asyncio.to_thread(confluent.poll, 0.2)
    assert throttles, "librdkafka reported no throttle"
    assert_cluster(
        kafka1,
        {
            "aio-a": 30,
            "aio-b": 30,
            "ck-a": 30,
            "ck-b": 30,
        },
    )


def sasl_admin(proxy: RunningProxy, user: str) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=proxy.bootstrap,
        client_id="sasl-admin",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=user,
        sasl_plain_password=SASL_USERS[user],
    )


def test_on_a_sasl_cluster_counts_are_learned_on_the_clients_own_connection(
    kafka1: KafkaCluster, tmp_path: Path
) -> None:
    """The proxy holds no credentials: the cluster's num.partitions (11 here) and the topics'
    partition counts can only come through the client's authenticated connection, and the
    refusals below happen only if they did (with nothing learned a topic would count 1)."""
    config = (
        "[broker]\ncontroller.quota.window.num = 10\ncontroller.quota.window.size.seconds = 1\n"
        "[users.alice]\ncontroller_mutation_rate = 2\n[users.bob]\ncontroller_mutation_rate = 2\n"
    )
    proxy = start_proxy(tmp_path, kafka1.brokers[0].sasl_address, 1, config)
    try:
        alice = sasl_admin(proxy, "alice")
        try:
            response = alice.create_topics({"s-a": {}, "s-b": {}, "s-c": {}}, raise_errors=False)
        finally:
            alice.close()
        # 20 tokens: 11 leaves 9, 11 more leaves -2, the third is refused
        errors = {topic["name"]: topic["error_code"] for topic in response["topics"]}
        assert errors == {"s-a": 0, "s-b": 0, "s-c": THROTTLING_QUOTA_EXCEEDED}
        assert_cluster(kafka1, {"s-a": 11, "s-b": 11, "s-c": None})
        bob = sasl_admin(proxy, "bob")
        try:
            with pytest.raises(ThrottlingQuotaExceededError):
                bob.create_partitions({"s-a": NewPartitions(32), "s-b": NewPartitions(32)})
        finally:
            bob.close()
        # s-a grows by 21 (20 -> -1), s-b's 21 are refused: both counts came from the cluster
        assert_cluster(kafka1, {"s-a": 32, "s-b": 11})
    finally:
        proxy.stop()
