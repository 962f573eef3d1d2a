"""Capture the fuzzers' seed corpus: the requests real clients send through the proxy.

    python -m tests.fuzz.capture [--out tests/fuzz/corpus]

A one-broker cluster with a SASL listener, the proxy in front of it advertising 127.0.0.5,
and a recording relay on 127.0.0.5 at the proxy's ports: every client connection crosses
the relay, which keeps each request frame it carries. kafka-python, aiokafka,
confluent-kafka and Kafka's Java tools then produce, consume in groups, run transactions,
create, grow and delete topics, and alter and describe quotas and topic configs, each
authenticating with another SASL mechanism. A few frames of each (client, api_key,
api_version) are written as `<client>-<api>-v<n>-<i>.bin`, and a few responses of each
(api_key, api_version) as `responses/<key>-<api>-v<n>-<i>.bin` (the connection harness
answers with them); the files are committed, so fuzzing needs no Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions
from confluent_kafka.cimpl import NewTopic as ConfluentNewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.admin import NewPartitions as KafkaNewPartitions

from localkafka.cluster import KafkaCluster
from localkafka.jars import java_command
from localkafka.load import PRODUCER_PERFORMANCE, producer_perf_args
from localkafka.proxy_process import start_proxy
from protocol.apis import api_name
from protocol.frames import FrameSplitter
from protocol.headers import parse_request_header, response_correlation_id

CORPUS = Path(__file__).with_name("corpus")
RELAY_HOST = "127.0.0.5"
USER, PASSWORD = "seed", "seed-secret"
#: frames kept per (client, api_key, api_version); the larger ones are left out
PER_KIND = 3
MAX_SEED_BYTES = 64 * 1024


class Recorder:
    """The frames clients sent, by the client running at the time, and the responses they
    got, by API and version."""

    def __init__(self) -> None:
        self.client = "none"
        self.frames: dict[tuple[str, int, int], list[bytes]] = defaultdict(list)
        self.responses: dict[tuple[int, int], list[bytes]] = defaultdict(list)

    def keep(self, frame: bytes) -> None:
        header = parse_request_header(frame)
        _keep(self.frames[(self.client, header.api_key, header.api_version)], frame)

    def keep_response(self, frame: bytes, api_key: int, version: int) -> None:
        _keep(self.responses[(api_key, version)], frame)

    def write(self, out: Path) -> int:
        responses = out / "responses"
        responses.mkdir(parents=True, exist_ok=True)
        for old in [*out.glob("*.bin"), *responses.glob("*.bin")]:
            old.unlink()
        written = 0
        for (client, api_key, version), frames in sorted(self.frames.items()):
            for i, frame in enumerate(frames):
                (out / f"{client}-{api_name(api_key)}-v{version}-{i}.bin").write_bytes(frame)
                written += 1
        for (api_key, version), frames in sorted(self.responses.items()):
            for i, frame in enumerate(frames):
                (responses / f"{api_key}-{api_name(api_key)}-v{version}-{i}.bin").write_bytes(frame)
                written += 1
        return written


def _keep(kept: list[bytes], frame: bytes) -> None:
    if len(kept) < PER_KIND and len(frame) <= MAX_SEED_BYTES and frame not in kept:
        kept.append(frame)


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    on_data: Callable[[bytes], None] | None,
) -> None:
    try:
        while data := await reader.read(65536):
            if on_data is not None:
                on_data(data)
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def _relay(ports: list[int], recorder: Recorder) -> list[asyncio.Server]:
    async def serve(
        c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter, port: int
    ) -> None:
        u_reader, u_writer = await asyncio.open_connection("127.0.0.1", port)
        requests, responses = FrameSplitter(), FrameSplitter()
        asked: dict[int, tuple[int, int]] = {}  # correlation id -> (api_key, version)

        def record(data: bytes) -> None:
            for frame in requests.feed(data):
                recorder.keep(frame)
                header = parse_request_header(frame)
                asked[header.correlation_id] = (header.api_key, header.api_version)

        def record_response(data: bytes) -> None:
            for frame in responses.feed(data):
                api = asked.pop(response_correlation_id(frame), None)
                if api is not None:
                    recorder.keep_response(frame, *api)

        await asyncio.gather(
            _pipe(c_reader, u_writer, record),
            _pipe(u_reader, c_writer, record_response),
            return_exceptions=True,
        )

    return [
        await asyncio.start_server(functools.partial(serve, port=port), RELAY_HOST, port)
        for port in ports
    ]


def _sasl(mechanism: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": USER,
        "sasl_plain_password": PASSWORD,
    }


def _kafka_python(bootstrap: str) -> None:
    sasl = _sasl("PLAIN")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="seed-kafka-python", **sasl)
    admin.create_topics([NewTopic("seed-kp", 2, 1), NewTopic("seed-kp-2", 1, 1)])
    admin.create_partitions({"seed-kp-2": KafkaNewPartitions(3)})
    # AlterConfigs (kafka-python's legacy path) with a topic quota beside a Kafka config
    topic_configs = {"retention.ms": "3600000", "kafka-quota-proxy.consumer_byte_rate": "1048576"}
    resource = ConfigResource(ConfigResourceType.TOPIC, "seed-kp", configs=topic_configs)
    admin.alter_configs([resource], incremental=False, raise_on_unknown=False)
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "seed-kp")])
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        client_id="seed-kafka-python",
        compression_type="gzip",
        acks="all",
        **sasl,
    )
    for i in range(20):
        producer.send("seed-kp", f"kafka-python {i}".encode(), key=str(i % 3).encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        "seed-kp",
        bootstrap_servers=bootstrap,
        group_id="seed-kp-group",
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
        **sasl,
    )
    assert sum(1 for _ in consumer) > 0
    consumer.commit()
    consumer.close()
    admin.delete_topics(["seed-kp-2"])
    admin.close()


async def _aiokafka(bootstrap: str) -> None:
    sasl = _sasl("SCRAM-SHA-256")
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, client_id="seed-aiokafka", enable_idempotence=True, **sasl
    )
    await producer.start()
    for i in range(20):
        await producer.send_and_wait("seed-kp", f"aiokafka {i}".encode())
    await producer.stop()
    transactional = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id="seed-tx", **sasl
    )
    await transactional.start()
    async with transactional.transaction():
        for i in range(5):
            await transactional.send("seed-kp", f"in a transaction {i}".encode())
    await transactional.stop()
    consumer = AIOKafkaConsumer(
        "seed-kp",
        bootstrap_servers=bootstrap,
        group_id="seed-aio-group",
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        **sasl,
    )
    await consumer.start()
    await consumer.getmany(timeout_ms=3000)
    await consumer.commit()
    await consumer.stop()


def _confluent(bootstrap: str) -> None:
    config: dict[str, str | int | float | bool] = {
        "bootstrap.servers": bootstrap,
        "client.id": "seed-confluent",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }
    admin = AdminClient(config)
    for future in admin.create_topics([ConfluentNewTopic("seed-rd", 2, 1)]).values():
        future.result(30)
    for future in admin.create_partitions([NewPartitions("seed-rd", 4)]).values():
        future.result(30)
    producer = ConfluentProducer({**config, "enable.idempotence": True, "compression.type": "lz4"})
    for i in range(20):
        producer.produce("seed-rd", f"librdkafka {i}".encode())
    assert producer.flush(30) == 0
    consumer = ConfluentConsumer(
        {**config, "group.id": "seed-rd-group", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["seed-rd"])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and consumer.poll(1.0) is None:
        pass
    consumer.close()
    for future in admin.delete_topics(["seed-rd"]).values():
        future.result(30)


def _java(bootstrap: str, workdir: Path) -> None:
    props = workdir / "java-client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";\n'
    )
    topics = "org.apache.kafka.tools.TopicCommand"
    configs = "kafka.admin.ConfigCommand"
    base = ["--bootstrap-server", bootstrap, "--command-config", str(props)]
    quota = ["--entity-type", "users", "--entity-name", "seed-user"]
    topic = ["--entity-type", "topics", "--entity-name", "seed-java"]
    topic_quota = "kafka-quota-proxy.producer_byte_rate=1048576"
    runs = [
        (configs, [*base, "--alter", *quota, "--add-config", "producer_byte_rate=1048576"]),
        (configs, [*base, "--describe", "--entity-type", "users"]),
        (topics, [*base, "--create", "--topic", "seed-java", "--partitions", "2"]),
        (topics, [*base, "--alter", "--topic", "seed-java", "--partitions", "3"]),
        (
            configs,
            [*base, "--alter", *topic, "--add-config", f"retention.ms=3600000,{topic_quota}"],
        ),
        (configs, [*base, "--describe", *topic]),
        (topics, [*base, "--describe", "--topic", "seed-java"]),
        (
            PRODUCER_PERFORMANCE,
            [
                *producer_perf_args(
                    "seed-java",
                    200,
                    100,
                    -1,
                    f"bootstrap.servers={bootstrap}",
                    "compression.type=zstd",
                    "client.id=seed-java",
                ),
                "--producer.config",
                str(props),
            ],
        ),
        (topics, [*base, "--delete", "--topic", "seed-java"]),
    ]
    for main_class, args in runs:
        subprocess.run(java_command(main_class, args, heap="256m"), check=True, capture_output=True)


async def capture(out: Path) -> int:
    recorder = Recorder()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        cluster = KafkaCluster(workdir=workdir / "kafka", sasl_users={USER: PASSWORD})
        cluster.start()
        own = (  # the proxy's own client keeps kafka-configs' quotas in a topic
            '[cluster]\nsecurity.protocol = "SASL_PLAINTEXT"\nsasl.mechanism = "PLAIN"\n'
            f'sasl.username = "{USER}"\nsasl.password = "${{env:KQP_SEED_PASSWORD}}"\n'
            '[quota_store]\ntopic = "seed-quotas"\n'
        )
        proxy = start_proxy(
            workdir,
            cluster.brokers[0].sasl_address,
            1,
            f'advertised_host = "{RELAY_HOST}"\n{own}',
            env={"KQP_SEED_PASSWORD": PASSWORD},
        )
        servers: list[asyncio.Server] = []
        try:
            port = int(proxy.bootstrap.rpartition(":")[2])
            servers = await _relay([port, proxy.broker_port_base + 1], recorder)
            bootstrap = f"{RELAY_HOST}:{port}"
            clients: list[tuple[str, Awaitable[None]]] = [
                ("kafka-python", asyncio.to_thread(_kafka_python, bootstrap)),
                ("aiokafka", _aiokafka(bootstrap)),
                ("confluent", asyncio.to_thread(_confluent, bootstrap)),
                ("java", asyncio.to_thread(_java, bootstrap, workdir)),
            ]
            for client, run in clients:
                recorder.client = client
                await run
                kept = sum(len(v) for k, v in recorder.frames.items() if k[0] == client)
                print(f"{client}: {kept} frames kept")
        finally:
            for server in servers:
                server.close()
            proxy.stop()
            cluster.stop()
    return recorder.write(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CORPUS)
    args = parser.parse_args(argv)
    written = asyncio.run(capture(args.out))
    print(f"{written} seed frames written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
