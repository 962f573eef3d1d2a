"""Quotas follow the SASL-authenticated user, learned from the exchange the proxy passes on.

The broker has a SASL_PLAINTEXT listener taking PLAIN and SCRAM-SHA-256/512 for alice and
bob, and the proxy fronts that listener. Every client uses the same client-id, so only the
principal can tell them apart.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from localkafka import KafkaCluster
from localkafka.load import Timeline, aiokafka_flood, confluent_flood, kafka_python_flood
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from tests.integration.scrape import scrape, total, value, wait_for_metric

pytestmark = pytest.mark.integration

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
CLIENT_ID = "shared-app"
TOPIC = "principals"
ALICE_QUOTA = 200_000
CONFIG = f"""
{SHORT_QUOTA_WINDOWS}
[users.alice]
producer_byte_rate = {ALICE_QUOTA}

[users.bob]
producer_byte_rate = 100000000
"""


@pytest.fixture(scope="module")
def kafka_sasl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(workdir=tmp_path_factory.mktemp("kafka-sasl"), sasl_users=USERS)
    cluster.start()
    cluster.create_topic(TOPIC, partitions=1)
    yield cluster
    cluster.stop()


@pytest.fixture
def sasl_proxy(kafka_sasl: KafkaCluster, tmp_path: Path) -> Iterator[RunningProxy]:
    proxy = start_proxy(tmp_path, kafka_sasl.brokers[0].sasl_address, 1, CONFIG)
    yield proxy
    proxy.stop()


def aiokafka_sasl(mechanism: str, user: str, password: str) -> dict[str, Any]:
    """aiokafka and kafka-python name their SASL settings alike."""
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
    }


async def test_quotas_follow_the_authenticated_user(sasl_proxy: RunningProxy) -> None:
    bootstrap, seconds = sasl_proxy.bootstrap, 10.0
    timelines = {name: Timeline() for name in ("alice-plain", "alice-scram512", "bob-scram256")}
    alice_confluent = {
        "bootstrap.servers": bootstrap,
        "client.id": CLIENT_ID,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": USERS["alice"],
        "batch.size": "16384",  # as the other clients' default, not librdkafka's 1 MB
    }
    await asyncio.gather(
        aiokafka_flood(
            bootstrap,
            CLIENT_ID,
            TOPIC,
            seconds,
            timelines["alice-plain"],
            **aiokafka_sasl("PLAIN", "alice", USERS["alice"]),
        ),
        asyncio.to_thread(
            confluent_flood, alice_confluent, TOPIC, seconds, timelines["alice-scram512"]
        ),
        asyncio.to_thread(
            kafka_python_flood,
            bootstrap,
            CLIENT_ID,
            TOPIC,
            seconds,
            timelines["bob-scram256"],
            **aiokafka_sasl("SCRAM-SHA-256", "bob", USERS["bob"]),
        ),
    )
    rates = {name: timeline.rate(3.0, seconds) for name, timeline in timelines.items()}
    print({name: f"{rate:,.0f} B/s" for name, rate in rates.items()})
    for name, timeline in timelines.items():
        print(name, [round(timeline.rate(t, t + 1)) for t in range(int(seconds))])
    # alice's two connections share alice's quota; bob's is far above it
    # (each connection is muted on its own, so two connections may together pass the quota by
    # a little: the README's "Enforcement"); bob, the same client-id, is never held
    alice_rate = rates["alice-plain"] + rates["alice-scram512"]
    assert alice_rate < 1.5 * ALICE_QUOTA
    assert rates["alice-plain"] > 0 and rates["alice-scram512"] > 0
    assert rates["bob-scram256"] > 0
    samples = scrape(sasl_proxy.metrics_url)
    alice = value(samples, "kafka_server_produce_throttle_time", user="alice", client_id="")
    bob = value(samples, "kafka_server_produce_throttle_time", user="bob", client_id="")
    assert alice is not None and alice > 0
    assert bob is not None and math.isnan(bob)
    assert value(samples, "kafka_server_produce_byte_rate", user="ANONYMOUS", client_id="") is None
    log = sasl_proxy.log()
    assert "authenticated as User:alice" in log and "authenticated as User:bob" in log


async def test_a_failed_authentication_never_yields_a_principal(
    sasl_proxy: RunningProxy,
) -> None:
    """alice's name with a wrong password, and a user the broker does not know, both over
    the mechanisms that name the user in their first message."""
    attempts = [
        ("PLAIN", "alice", "wrong"),
        ("SCRAM-SHA-256", "alice", "wrong"),
        ("PLAIN", "mallory", "anything"),
        ("SCRAM-SHA-512", "mallory", "anything"),
    ]
    for mechanism, user, password in attempts:
        producer = AIOKafkaProducer(
            bootstrap_servers=sasl_proxy.bootstrap,
            client_id=CLIENT_ID,
            **aiokafka_sasl(mechanism, user, password),
        )
        with pytest.raises(KafkaError):
            await producer.start()
        await producer.stop()
    samples = scrape(sasl_proxy.metrics_url)
    users = {dict(labels).get("user") for (_, labels) in samples}
    assert not users & {"alice", "mallory"}, users
    # every refused connection ends, whichever side closes it first: the broker after its
    # error (the proxy logs "closing client") or the client (the proxy just closes)
    final = await wait_for_metric(
        sasl_proxy.metrics_url,
        lambda s: value(s, "kafka_quota_proxy_connections_active") == 0,
    )
    accepted = total(final, "kafka_quota_proxy_connections_accepted_total")
    assert accepted is not None and accepted >= len(attempts)
    assert "authenticated as" not in sasl_proxy.log()
