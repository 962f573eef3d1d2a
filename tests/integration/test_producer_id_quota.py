"""KIP-936 through the proxy in front of a real SASL_PLAINTEXT broker: new producer ids per user.

producer_ids_rate = 100 for every user with KIP-936's one-hour windows: a bucket of 100 ids,
refilled at 100 an hour, so over a test of a minute a user gets 101 new ids (check, then
record) plus what a false positive lets through. The broker's own producer state
(DescribeProducers, asked on its PLAINTEXT listener) is what the quota protects.
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaProducer

from localkafka.cluster import KafkaCluster
from localkafka.jars import java_command
from localkafka.load import read_all
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, value
from tests.integration.support.clients import SASL_USERS

JAVA = Path(__file__).parent / "java" / "ShortLivedProducers.java"
HOURLY = (
    "[broker]\nproducer.id.quota.window.num = 11\nproducer.id.quota.window.size.seconds = 3600\n"
    'producer.id.quota.cache.false.positive.rate = 0.01\n[users."<default>"]\n'
    "producer_ids_rate = 100\n[users.grace]\nproducer_ids_rate = 1\n"
)
#: a bucket of one id refilled in 4 s: a refused producer's throttle is short enough to wait
SHORT = (
    "[broker]\nproducer.id.quota.window.num = 11\nproducer.id.quota.window.size.seconds = 4\n"
    '[users."<default>"]\nproducer_ids_rate = 1\n'
)
CHURN = 200
#: how long a refused producer keeps retrying before it gives up (its throttle is 36 s), and
#: how long an admitted one has for its id and its record while 64 others start beside it:
#: at 1 s, a machine half as fast as CI's got only 32-81 of the 101 admitted ids to the
#: broker in time (ShortLivedProducers.java also connects before the delivery clock starts)
DELIVERY_TIMEOUT_MS = 5000


def sasl_proxy(
    cluster: KafkaCluster, factory: pytest.TempPathFactory, config: str
) -> Iterator[RunningProxy]:
    running = start_proxy(factory.mktemp("proxy"), cluster.brokers[0].sasl_address, 1, config)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def proxy(kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    yield from sasl_proxy(kafka1, tmp_path_factory, HOURLY)


@pytest.fixture(scope="module")
def short_proxy(
    kafka1: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    yield from sasl_proxy(kafka1, tmp_path_factory, SHORT)


def churn(
    bootstrap: str,
    user: str,
    topic: str,
    delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS,
    count: int = CHURN,
    threads: int = 64,
) -> dict[str, int]:
    """`count` short-lived producers of `user`: 'delivered' and 'failed <exception>' counts."""
    password = SASL_USERS.get(user, "-")
    args = [
        "produce",
        *(bootstrap, user, password, topic),
        *(str(count), str(threads), str(delivery_timeout_ms)),
    ]
    out = short_lived_producers(args, heap="768m", timeout=600)
    counts: dict[str, int] = {}
    for line in out.splitlines():
        if line.startswith("delivered "):
            counts["delivered"] = int(line.split()[1])
        elif line.startswith("failed "):
            _failed, kind, failures, *_rest = line.split()
            counts[kind] = int(failures)
    return counts


def producers_held(cluster: KafkaCluster, topic: str) -> int:
    """Distinct producer ids the broker holds state for on the topic (its own view)."""
    args = ["describe", cluster.brokers[0].address, topic, "1"]
    out = short_lived_producers(args, heap="256m", timeout=120)
    return int(out.split("producers ")[1].split()[0])


def short_lived_producers(args: list[str], heap: str, timeout: float) -> str:
    """What ShortLivedProducers.java prints, run on the pinned Kafka jars."""
    run = subprocess.run(
        java_command(str(JAVA), args, heap=heap),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return run.stdout


def confluent_sasl(proxy: RunningProxy, user: str, **config: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": SASL_USERS[user],
            "enable.idempotence": True,
            "linger.ms": 0,
            **config,
        }
    )


def sasl(user: str) -> dict[str, str]:
    """kafka-python's and aiokafka's SASL settings."""
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": SASL_USERS[user],
    }


def stored(cluster: KafkaCluster, topic: str) -> list[bytes]:
    """Every record value in the topic, read straight from the broker."""
    return read_all(cluster.brokers[0].address, topic)


def test_a_user_in_a_restart_loop_gets_its_quota_of_producer_ids_and_nobody_else_is_touched(
    proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    kafka1.create_topic("churn", partitions=1)
    kafka1.create_topic("steady", partitions=1)
    kafka1.create_topic("direct", partitions=1)
    # bob produces with one idempotent producer all the while alice churns
    stop = threading.Event()
    acked: list[int] = []
    failures: list[str] = []

    def bob_produces() -> None:
        bob = confluent_sasl(proxy, "bob")

        def report(err: KafkaError | None, _msg: object) -> None:
            if err is None:
                acked.append(1)
            else:
                failures.append(str(err))

        deadline = time.monotonic() + 300
        for n in range(20_000):
            if stop.is_set() or time.monotonic() > deadline:
                break
            bob.produce("steady", value=b"%d" % n, on_delivery=report)
            bob.flush(30)
        bob.flush(30)

    steady = threading.Thread(target=bob_produces)
    steady.start()
    started = time.monotonic()
    try:
        through_proxy = churn(proxy.bootstrap, "alice", "churn")
    finally:
        stop.set()
        steady.join(60)
    refilled = (time.monotonic() - started) * 100 / 3600
    samples = scrape(proxy.metrics_url)

    # the broker holds state for the producers admitted: a window's worth (101, check then
    # record), what refilled meanwhile, and the few a false positive lets through free
    held = producers_held(kafka1, "churn")
    assert 101 <= held <= 101 + refilled + 0.01 * CHURN
    delivered = through_proxy["delivered"]
    assert delivered <= held
    assert delivered + sum(n for kind, n in through_proxy.items() if kind != "delivered") == CHURN
    assert (value(samples, "kafka_server_producerids_tokens", user="alice") or 0) < 0
    assert (value(samples, "kafka_server_producerids_throttle_time", user="alice") or 0) > 0

    # bob: everything acknowledged, one producer id charged, never throttled
    assert not failures and len(acked) > 0
    assert (value(samples, "kafka_server_producerids_tokens", user="bob") or 0) >= 99
    throttle = value(samples, "kafka_server_producerids_throttle_time", user="bob")
    assert throttle is None or not throttle > 0

    # the same restart loop straight to the broker: it keeps every producer's state
    # (a straight run has lost one producer in 1,000 to the client's own failure; the
    # broker's count is what tells the two runs apart)
    direct = churn(kafka1.brokers[0].sasl_address, "alice", "direct", 60_000)
    assert direct["delivered"] >= 0.9 * CHURN, direct
    assert producers_held(kafka1, "direct") >= direct["delivered"]


def test_the_java_producer_retries_error_89_and_delivers_after_the_throttle(
    short_proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    """Three producers one after another with a bucket of one: the third finds -1 token and
    is refused for 4 s; the Java producer takes 89 as retriable and delivers afterwards."""
    kafka1.create_topic("java-retry", partitions=1)
    outcome = churn(short_proxy.bootstrap, "carol", "java-retry", 30_000, count=3, threads=1)
    assert outcome == {"delivered": 3}
    samples = scrape(short_proxy.metrics_url)
    assert (value(samples, "kafka_server_producerids_throttle_time", user="carol") or 0) > 0
    assert sorted(stored(kafka1, "java-retry")) == [b"record-0", b"record-1", b"record-2"]


async def test_python_clients_lose_no_acknowledged_record_when_refused(
    short_proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    """Four producers one after another per client, with a bucket of one per user: the
    third and fourth are refused. kafka-python 3 retries error 89 after the throttle and
    delivers; aiokafka 0.14 knows no error 89 and fails the send (UnknownError); librdkafka
    fails the delivery with THROTTLING_QUOTA_EXCEEDED. Whatever each reports, the topic holds
    exactly the records acknowledged, once each, and the proxy keeps serving."""
    kafka1.create_topic("reactions", partitions=1)
    acked: dict[str, list[bytes]] = {"kafka-python": [], "aiokafka": [], "confluent": []}
    for n in range(4):
        value_ = b"kp-%d" % n
        producer = KafkaProducer(
            bootstrap_servers=short_proxy.bootstrap, enable_idempotence=True, **sasl("dave")
        )
        try:
            producer.send("reactions", value_).get(30)
            acked["kafka-python"].append(value_)
        finally:
            producer.close(5)
    for n in range(4):
        value_ = b"aio-%d" % n
        aio = AIOKafkaProducer(
            bootstrap_servers=short_proxy.bootstrap, enable_idempotence=True, **sasl("frank")
        )
        await aio.start()
        try:
            await asyncio.wait_for(await aio.send("reactions", value_), 30)
            acked["aiokafka"].append(value_)
        except Exception as exc:  # aiokafka reports 89 as UnknownError
            assert "UnknownError" in type(exc).__name__
        finally:
            await aio.stop()
    refused: list[KafkaError] = []
    for n in range(4):
        value_ = b"ck-%d" % n
        ck = confluent_sasl(short_proxy, "erin", **{"message.timeout.ms": 30_000})

        def report(err: KafkaError | None, _msg: object, value_: bytes = value_) -> None:
            if err is None:
                acked["confluent"].append(value_)
            else:
                refused.append(err)

        ck.produce("reactions", value_, on_delivery=report)
        assert ck.flush(40) == 0
    assert len(acked["kafka-python"]) == 4  # retried after each 4 s throttle
    assert 2 <= len(acked["aiokafka"]) < 4 and 2 <= len(acked["confluent"]) < 4
    assert all(err.code() == 89 for err in refused)
    everything = [v for values in acked.values() for v in values]
    assert sorted(stored(kafka1, "reactions")) == sorted(everything)


def test_a_transactional_producer_reinitialised_keeps_its_producer_id_and_is_not_charged_again(
    proxy: RunningProxy, kafka1: KafkaCluster
) -> None:
    """grace has a bucket of one id an hour. The same transactional.id initialised three
    times gets the same producer id with a new epoch, charged once; two producers with
    new transactional ids take the bucket to -1 and then are refused."""
    kafka1.create_topic("tx", partitions=1)

    def transaction(transactional_id: str, value_: bytes) -> bool:
        producer = confluent_sasl(
            proxy, "grace", **{"transactional.id": transactional_id, "message.timeout.ms": 5000}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("tx", value_)
        try:
            producer.commit_transaction(30)
        except KafkaException:
            producer.abort_transaction(30)
            return False
        return True

    assert [transaction("grace-tx", b"same-%d" % n) for n in range(3)] == [True] * 3
    samples = scrape(proxy.metrics_url)
    assert value(samples, "kafka_server_producerids_tokens", user="grace") == pytest.approx(
        0, abs=0.01
    )
    assert transaction("grace-other-1", b"other-1")  # 0 -> -1: admitted, check then record
    assert not transaction("grace-other-2", b"other-2")
