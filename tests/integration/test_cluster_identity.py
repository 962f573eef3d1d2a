"""The proxy's own identity on a SASL cluster ([cluster]).

The proxy reaches the three brokers only through their SASL_PLAINTEXT listener (PLAIN and
SCRAM). With the proxy's own SCRAM credentials, read from the environment, it opens every
broker's listener before its first client, and writes usage samples to a topic of that
cluster, and no password is ever echoed (tests/integration/test_startup_errors.py has bad
credentials stopping it at start-up).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from localkafka.cluster import KafkaCluster
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import value, wait_for_metric
from tests.integration.support.clients import CLUSTER as OWN_CLIENT
from tests.integration.support.clients import IDENTITY_USERS, PASSWORD_ENV

SAMPLES = "identity-usage"
TOPIC = "identity-traffic"
CLUSTER = f"""{OWN_CLIENT}
[usage]
interval_s = 1
directory = ""
kafka_topic = "{SAMPLES}"
"""


@pytest.fixture(scope="module")
def kafka_sasl3(kafka3: KafkaCluster) -> KafkaCluster:
    """The session's three brokers, with this module's topics."""
    kafka3.create_topic(SAMPLES, partitions=1, replication=1)
    kafka3.create_topic(TOPIC, partitions=3, replication=1)
    return kafka3


@pytest.fixture
def identified_proxy(kafka_sasl3: KafkaCluster, tmp_path: Path) -> Iterator[RunningProxy]:
    proxy = start_proxy(
        tmp_path,
        kafka_sasl3.brokers[0].sasl_address,
        3,
        CLUSTER,
        env={PASSWORD_ENV: IDENTITY_USERS["kqp"]},
    )
    yield proxy
    proxy.stop()


def accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, int(port))) == 0


async def test_every_broker_listener_is_open_before_the_first_client_and_samples_reach_a_topic(
    identified_proxy: RunningProxy, kafka_sasl3: KafkaCluster
) -> None:
    # nothing has connected to the proxy yet: the brokers came from its own client
    assert all(
        accepts(identified_proxy.broker_address(broker.node_id)) for broker in kafka_sasl3.brokers
    )
    log = identified_proxy.log()
    assert "authenticated to the cluster: SCRAM-SHA-512 as User:kqp" in log
    assert "no broker listeners opened" not in log
    assert IDENTITY_USERS["kqp"] not in log
    producer = AIOKafkaProducer(
        bootstrap_servers=identified_proxy.bootstrap,
        client_id="identity-app",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password=IDENTITY_USERS["alice"],
    )
    await producer.start()
    try:
        for _ in range(10):
            await producer.send_and_wait(TOPIC, b"x" * 1000)
    finally:
        await producer.stop()
    produced = "kafka_quota_proxy_usage_samples_total"
    await wait_for_metric(
        identified_proxy.metrics_url, lambda m: (value(m, produced, sink="kafka") or 0) >= 1
    )
    consumer = AIOKafkaConsumer(
        SAMPLES, bootstrap_servers=kafka_sasl3.bootstrap_servers, auto_offset_reset="earliest"
    )
    await consumer.start()
    # the first sample written may be of the window before alice authenticated (her
    # connection's ApiVersions and SASL requests): read on until hers, for at most 15 s
    samples: list[dict[str, object]] = []
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline and not any(
            sample["user"] == "alice" for sample in samples
        ):
            batches = await consumer.getmany(timeout_ms=1_000)
            samples += [json.loads(r.value) for batch in batches.values() for r in batch]
    finally:
        await consumer.stop()
    assert any(
        sample["user"] == "alice" and sample["client_id"] == "identity-app" for sample in samples
    )


def test_check_config_never_echoes_a_password(tmp_path: Path) -> None:
    literal = tmp_path / "literal.toml"
    literal.write_text(CLUSTER.replace(f"${{env:{PASSWORD_ENV}}}", "hunter2-literal"))
    refused = subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", str(literal)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert f"{literal}: [cluster] key 'sasl.password': write where the secret is" in refused.stderr
    assert "hunter2-literal" not in refused.stderr + refused.stdout
    referenced = tmp_path / "referenced.toml"
    referenced.write_text(CLUSTER)
    described = subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", str(referenced)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, PASSWORD_ENV: "hunter2-from-env"},
    )
    assert described.returncode == 0, described.stderr
    assert (
        "[cluster] SASL_PLAINTEXT, SCRAM-SHA-512 as User:kqp "
        f"(password ${{env:{PASSWORD_ENV}}})" in described.stdout
    )
    assert "hunter2-from-env" not in described.stderr + described.stdout
    unset = subprocess.run(
        [sys.executable, "-m", "proxy", "check-config", str(referenced)],
        capture_output=True,
        text=True,
        timeout=60,
        env={name: v for name, v in os.environ.items() if name != PASSWORD_ENV},
    )
    assert unset.returncode == 2
    assert f"the environment variable {PASSWORD_ENV} is not set" in unset.stderr
