"""docker-compose.yml brought up as a user brings it up, and used as the README says.

Kafka, the two proxies of one fleet (built from the Dockerfile) and Prometheus run in podman,
driven by Debian's docker-compose through podman's Docker-compatible socket
(localkafka/engine.py), with the images made from Debian's packages that KAFKA_IMAGE,
PROMETHEUS_IMAGE and PYTHON_IMAGE name. Then: records through one proxy read back exactly
once through the other, a quota altered with Kafka's own kafka-configs through a proxy and
enforced, `top --once` and `report` answered from the usage samples' topic, Prometheus
scraping both proxies; and everything brought down.

The ports are the compose file's own (9094, 9192, 9201, 9292, 9301, 9464, 9465, 9090), as a
user's machine has them.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from localkafka.engine import docker_socket, ensure_images, environment, podman
from localkafka.jars import ensure_spark_kafka_jars, java_command
from tests.deploy.tools import ROOT, tool

PROJECT = "kqptest"
SERVICES = ("kafka", "proxy", "proxy-b", "prometheus")
KAFKA = "localhost:9094"
PROXY, PROXY_B = "localhost:9192", "localhost:9292"
USAGE_TOPIC = "kafka-quota-proxy-usage"
#: how often the engine's health checks run (podman's timers need systemd, absent here)
HEALTH_EVERY_S = 1.0
#: a cold cache builds every image first (about 3 minutes here); then the stack comes up
pytestmark = pytest.mark.timeout(900)


def compose(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    result = subprocess.run(
        [tool("docker-compose"), "--project-name", PROJECT, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0, f"docker-compose {' '.join(args)}:\n{result.stderr[-3000:]}"
    return result.stdout


def run_health_checks(stop: threading.Event) -> None:
    """What the engine's timers would do: the HEALTHCHECK of each container not yet healthy
    (Kafka's starts a JVM: once healthy, a container is left alone)."""
    while not stop.wait(HEALTH_EVERY_S):
        try:
            waiting = podman(
                *("ps", "--format", "{{.Names}}", "--filter", "health=starting"),
                *("--filter", "health=unhealthy"),
                check=False,
            ).split()
            for name in waiting:
                if name.startswith(PROJECT):
                    podman("healthcheck", "run", name, check=False, timeout=30)
        except subprocess.TimeoutExpired:  # a check that hangs fails as the engine's would
            continue


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    started = time.monotonic()
    ensure_images()
    with docker_socket(tmp_path_factory.mktemp("podman")) as docker_host:
        env = environment(docker_host)
        stop = threading.Event()
        checks = threading.Thread(target=run_health_checks, args=(stop,), daemon=True)
        checks.start()
        try:
            compose(env, "down", "--volumes", "--remove-orphans")  # a stack an aborted run left
            compose(env, "build")
            built = time.monotonic()
            compose(env, "up", "--detach", *SERVICES)
            print(
                f"compose: images built in {built - started:.1f} s, "
                f"services healthy {time.monotonic() - built:.1f} s later"
            )
            yield env
        finally:
            stop.set()
            checks.join(timeout=60)
            compose(env, "down", "--volumes", "--remove-orphans", timeout=300)
            left = podman("ps", "--all", "--format", "{{.Names}}", check=False).split()
            assert not [name for name in left if name.startswith(PROJECT)]


async def test_records_through_one_proxy_are_read_back_exactly_once_through_the_other(
    stack: dict[str, str],
) -> None:
    topic = f"compose-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=PROXY, client_id="compose-writer", acks="all")
    await producer.start()
    try:
        for batch in range(10):
            await asyncio.gather(
                *[await producer.send(topic, f"{batch}-{i}".encode()) for i in range(100)]
            )
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=PROXY_B,
        client_id="compose-reader",
        group_id=f"compose-{topic}",
        auto_offset_reset="earliest",
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(values) < 1000 and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                values.extend(record.value for record in records if record.value is not None)
    finally:
        await consumer.stop()
    assert sorted(values) == sorted(f"{b}-{i}".encode() for b in range(10) for i in range(100))


def configs(bootstrap: str, *args: str) -> str:
    """Kafka's own kafka-configs (ConfigCommand of the pinned release) against a proxy."""
    result = subprocess.run(
        java_command("kafka.admin.ConfigCommand", ["--bootstrap-server", bootstrap, *args]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


async def test_a_quota_altered_with_kafka_configs_through_a_proxy_is_enforced(
    stack: dict[str, str],
) -> None:
    client_id = "compose-slow"
    configs(
        PROXY,
        *("--alter", "--entity-type", "clients", "--entity-name", client_id),
        *("--add-config", "producer_byte_rate=4096"),
    )
    # the other proxy has read it from the quota store once it describes it
    deadline = time.monotonic() + 30
    described = ""
    while "producer_byte_rate=4096.0" not in described and time.monotonic() < deadline:
        described = configs(
            PROXY_B, "--describe", "--entity-type", "clients", "--entity-name", client_id
        )
    assert "producer_byte_rate=4096.0" in described
    producer = AIOKafkaProducer(bootstrap_servers=PROXY_B, client_id=client_id, linger_ms=0)
    await producer.start()
    started = time.monotonic()
    try:  # through the other proxy: the fleet holds one budget
        for _ in range(6):
            await asyncio.gather(
                *[await producer.send("compose-slow", b"x" * 1000) for _ in range(10)]
            )
    finally:
        await producer.stop()
    took = time.monotonic() - started
    # Kafka's rate over 11 one-second windows lets about 10 windows' worth (40 KB) through at
    # once; the 20 KB beyond it wait about 5 s
    assert took >= 2.0, f"60 KB at 4 KB/s took {took:.1f} s"
    with urllib.request.urlopen("http://localhost:9465/metrics", timeout=5) as answer:
        metrics = answer.read().decode()
    throttles = [
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("kafka_quota_proxy_throttles_total")
        and f'client_id="{client_id}"' in line
    ]
    assert sum(throttles) > 0, metrics


def top(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", "top", "--once", "--bootstrap-server", KAFKA, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_top_and_report_read_the_usage_samples_topic(
    stack: dict[str, str], tmp_path: Path
) -> None:
    client_id = "compose-seen"
    producer = AIOKafkaProducer(bootstrap_servers=PROXY, client_id=client_id)
    await producer.start()
    try:  # about 15 s of use: the samples are written every 10 s
        seen = False
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            for _ in range(10):
                await producer.send_and_wait("compose-seen", b"y" * 1000)
                await asyncio.sleep(0.1)
            shown = await asyncio.to_thread(top, "--usage-topic", USAGE_TOPIC, "--json")
            assert shown.returncode == 0, shown.stderr
            seen = client_id in shown.stdout
    finally:
        await producer.stop()
    assert seen, shown.stdout
    out = tmp_path / "report"
    jars = ",".join(str(jar) for jar in ensure_spark_kafka_jars())
    report = subprocess.run(
        [
            *(sys.executable, "-m", "proxy", "report", "--out", str(out)),
            *("--kafka-topic", USAGE_TOPIC, "--kafka-bootstrap-servers", KAFKA),
            *("--jars", jars, "--master", "local[1]"),
            *("--conf", "spark.driver.host=127.0.0.1"),
            *("--conf", "spark.sql.shuffle.partitions=2"),
            *("--conf", "spark.ui.showConsoleProgress=false"),
            *("--conf", "spark.ui.enabled=false"),  # no web UI to start: a few seconds
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert client_id in (out / "quotas.toml").read_text()
    assert (out / "report.html").is_file()


def test_every_service_is_healthy_and_prometheus_scrapes_both_proxies(
    stack: dict[str, str],
) -> None:
    """Last: by now Prometheus has scraped every proxy (its first scrape waits an interval)."""
    states = compose(stack, "ps")
    for service in ("kafka", "proxy", "proxy-b"):
        line = next(line for line in states.splitlines() if f"_{service}_1" in line)
        assert "(healthy)" in line, states
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen("http://localhost:9090/api/v1/targets", timeout=5) as answer:
            targets = json.load(answer)["data"]["activeTargets"]
        health = {target["labels"]["instance"]: target["health"] for target in targets}
        if set(health.values()) == {"up"} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert health == {"proxy:9464": "up", "proxy-b:9465": "up"}
