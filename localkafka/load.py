"""Load for tests and benchmarks: clients producing or consuming as fast as they can, timing
every byte they get through.

Every loop is bounded by a deadline; records carry a sequence number so that what arrived
can be compared with what was acknowledged, end to end.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition

from localkafka.cluster import KafkaCluster
from localkafka.jars import java_command

RECORD_BYTES = 1000


def record(seq: int) -> bytes:
    """A RECORD_BYTES value that names its sequence number."""
    return f"{seq:012d}".encode().ljust(RECORD_BYTES, b".")


def seq_of(value: bytes) -> int:
    return int(value[:12])


@dataclass
class Timeline:
    """When each amount of bytes got through, to compute a rate over any interval."""

    started: float = field(default_factory=time.monotonic)
    events: list[tuple[float, int]] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, size: int, seq: int | None = None) -> None:
        with self.lock:
            self.events.append((time.monotonic(), size))
            if seq is not None:
                self.seqs.append(seq)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def rate(self, start: float, end: float) -> float:
        """Bytes per second between start and end seconds after `started`."""
        lo, hi = self.started + start, self.started + end
        with self.lock:
            total = sum(size for at, size in self.events if lo <= at < hi)
        return total / (end - start)


def scram_producer(bootstrap: str, user: str, password: str) -> AIOKafkaProducer:
    """An aiokafka producer that logs in as `user` with SCRAM-SHA-512 over SASL_PLAINTEXT
    (not started)."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=user,
        sasl_plain_password=password,
        request_timeout_ms=30_000,
    )


async def aiokafka_flood(
    bootstrap: str,
    client_id: str,
    topic: str,
    seconds: float,
    timeline: Timeline,
    offered_rate: float | None = None,
    **config: Any,
) -> int:
    """Produce until the deadline with at most 100 records unacknowledged; returns sent.

    With offered_rate (bytes/s), records are offered no faster than that.
    """
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5, **config
    )
    await producer.start()
    pending: set[asyncio.Future[object]] = set()
    sent = 0
    errors: list[BaseException] = []

    def acked(seq: int) -> Callable[[asyncio.Future[object]], None]:
        def record_ack(future: asyncio.Future[object]) -> None:
            error = future.exception()
            if error is not None:
                errors.append(error)
            else:
                timeline.add(RECORD_BYTES, seq)

        return record_ack

    timeline.started = time.monotonic()
    try:
        while time.monotonic() - timeline.started < seconds:
            future = await producer.send(topic, record(sent))
            future.add_done_callback(acked(sent))
            pending.add(future)
            sent += 1
            if offered_rate is not None and sent % 20 == 0:
                due = timeline.started + sent * RECORD_BYTES / offered_rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            if len(pending) >= 100:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 60)
    finally:
        await producer.stop()
    assert not errors, errors[:3]
    return sent


def kafka_python_flood(
    bootstrap: str, client_id: str, topic: str, seconds: float, timeline: Timeline, **config: object
) -> int:
    """The same with kafka-python, at most 1000 records unacknowledged."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5, **config
    )
    window = threading.BoundedSemaphore(1000)
    sent = 0
    errors: list[BaseException] = []

    def acked(seq: int) -> Callable[[object], None]:
        def record_ack(_metadata: object) -> None:
            timeline.add(RECORD_BYTES, seq)
            window.release()

        return record_ack

    def failed(error: BaseException) -> None:
        errors.append(error)
        window.release()

    timeline.started = time.monotonic()
    try:
        while time.monotonic() - timeline.started < seconds:
            if not window.acquire(timeout=1):
                continue
            producer.send(topic, record(sent)).add_callback(acked(sent)).add_errback(failed)
            sent += 1
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=10)
    assert not errors, errors[:3]
    return sent


async def aiokafka_drain(
    bootstrap: str, client_id: str, topic: str, seconds: float, timeline: Timeline
) -> None:
    """Consume partition 0 from the start until the deadline, without a group."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id)
    await consumer.start()
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    await consumer.seek_to_beginning(partition)
    timeline.started = time.monotonic()
    try:
        while time.monotonic() - timeline.started < seconds:
            batches = await consumer.getmany(timeout_ms=200)
            for messages in batches.values():
                for message in messages:
                    assert message.value is not None
                    timeline.add(len(message.value), message.offset)
    finally:
        await consumer.stop()


def kafka_python_drain(
    bootstrap: str, client_id: str, topic: str, seconds: float, timeline: Timeline
) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False
    )
    partition = KafkaTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    timeline.started = time.monotonic()
    try:
        while time.monotonic() - timeline.started < seconds:
            for messages in consumer.poll(timeout_ms=200).values():
                for message in messages:
                    timeline.add(len(message.value), message.offset)
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, timeout_s: float = 60) -> list[bytes]:
    """Every record of every partition of the topic, read straight from Kafka (no proxy, no
    quota); in offset order within each partition."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    deadline = time.monotonic() + timeout_s
    try:
        numbers = consumer.partitions_for_topic(topic)
        while not numbers and time.monotonic() < deadline:
            time.sleep(0.2)
            numbers = consumer.partitions_for_topic(topic)
        assert numbers, f"{topic}: no partitions"
        partitions = [KafkaTopicPartition(topic, n) for n in sorted(numbers)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        values: list[bytes] = []
        while time.monotonic() < deadline and any(
            consumer.position(p) < ends[p] for p in partitions
        ):
            for messages in consumer.poll(timeout_ms=500).values():
                values.extend(message.value for message in messages)
    finally:
        consumer.close()
    total = sum(ends.values())
    assert len(values) == total, f"read {len(values)} of {total} records of {topic}"
    return values


def assert_no_loss_or_duplicates(acked: Iterable[int], stored: Iterable[int]) -> None:
    acked_list, stored_list = sorted(acked), sorted(stored)
    assert len(set(stored_list)) == len(stored_list), "a record was stored twice"
    assert set(acked_list) <= set(stored_list), "an acknowledged record is missing"
    assert len(acked_list) == len(stored_list), (len(acked_list), len(stored_list))


#: ProducerPerformance's report every 5 s: "N records sent, R records/sec (M MB/sec), ..."
_PERF_REPORT = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec")


PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance"


def producer_perf_args(
    topic: str, records: int, record_bytes: int, throughput: int, *props: str
) -> list[str]:
    """ProducerPerformance's command line; `props` are producer properties (key=value)."""
    return [
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(record_bytes),
        "--throughput",
        str(throughput),
        "--producer-props",
        *props,
    ]


def consumer_perf_args(bootstrap: str, topic: str, records: int, *options: str) -> list[str]:
    """ConsumerPerformance's command line, giving up after 60 s without records."""
    return [
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--timeout",
        "60000",
        *options,
    ]


def start_tool(main_class: str, args: list[str]) -> subprocess.Popen[str]:
    """A Kafka tool running alongside the test, its output read when it has finished."""
    return subprocess.Popen(
        java_command(main_class, args, heap="256m"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def java_flood(
    bootstrap: str, client_id: str, topic: str, records: int, *props: str
) -> subprocess.Popen[str]:
    """ProducerPerformance at full speed; `java_flood_reports` reads its 5-second reports.
    `props` are more producer properties (key=value: SASL's, say)."""
    return start_tool(
        PRODUCER_PERFORMANCE,
        producer_perf_args(
            topic,
            records,
            RECORD_BYTES,
            -1,
            f"bootstrap.servers={bootstrap}",
            f"client.id={client_id}",
            "linger.ms=5",
            "buffer.memory=1000000",
            *props,
        ),
    )


def java_flood_reports(process: subprocess.Popen[str], timeout_s: float) -> list[tuple[int, float]]:
    """(records, seconds) of each 5-second report, once the tool has finished."""
    out, _ = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, out[-3000:]
    reports = []
    for line in out.splitlines():
        match = _PERF_REPORT.match(line)
        if match and "50th" not in line:  # the final summary has percentiles
            sent, per_second = int(match[1]), float(match[2])
            reports.append((sent, sent / per_second))
    return reports


def java_fill(cluster: KafkaCluster, topic: str, records: int) -> None:
    """Records straight into Kafka at full speed, for consumers to read through the proxy.

    In batches of the producer's default 16 KiB: a fetch capped by the quota ends in a
    partial batch the client discards, so much larger batches would waste much of each fetch.
    """
    cluster.tool(
        PRODUCER_PERFORMANCE,
        *producer_perf_args(
            topic,
            records,
            RECORD_BYTES,
            -1,
            f"bootstrap.servers={cluster.bootstrap_servers}",
            "linger.ms=20",
        ),
    )


def java_drain(
    bootstrap: str, client_id: str, topic: str, records: int, config: Path
) -> subprocess.Popen[str]:
    """ConsumerPerformance with a report every 5 s; `java_drain_rate` reads them."""
    config.write_text(f"client.id={client_id}\n")
    return start_tool(
        CONSUMER_PERFORMANCE,
        consumer_perf_args(
            bootstrap,
            topic,
            records,
            "--show-detailed-stats",
            "--reporting-interval",
            "5000",
            "--hide-header",
            "--consumer.config",
            str(config),
        ),
    )


def java_drain_rate(process: subprocess.Popen[str], timeout_s: float, span_s: float) -> float:
    """Records/s over `span_s` (whole 5-second reports) from ConsumerPerformance's first report.
    The tool is stopped once that span's last report is in: the rest of its drain would only
    be waited for.

    Each report line: time, thread, total MB, MB/s, total records, records/s, ...
    """
    last_report = int(span_s // 5)
    reports: list[tuple[datetime, int]] = []
    out: list[str] = []
    overdue = threading.Timer(timeout_s, process.kill)
    overdue.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            out.append(line)
            fields = [field.strip() for field in line.split(",")]
            if len(fields) >= 6 and fields[0][:2] == "20":
                at = datetime.strptime(fields[0], "%Y-%m-%d %H:%M:%S:%f")
                reports.append((at, int(fields[4])))
                if len(reports) > last_report:
                    break
    finally:
        overdue.cancel()
        process.terminate()
        process.wait()
    assert len(reports) > last_report, "".join(out)[-3000:]
    (start, first), (end, last) = reports[0], reports[last_report]
    return (last - first) / (end - start).total_seconds()


def confluent_flood(
    config: dict[str, str],
    topic: str,
    seconds: float,
    timeline: Timeline,
    first_seq: int = 0,
    in_flight: int = 1000,
    offered_rate: float | None = None,
) -> int:
    """The same with librdkafka, at most `in_flight` records unacknowledged; sequence numbers
    from `first_seq`, so that several producers of one topic can tell their records apart;
    with offered_rate (bytes/s), records offered no faster than that."""
    producer = ConfluentProducer({"linger.ms": 5, **config})
    sent = 0
    errors: list[object] = []

    def delivered(error: object, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            timeline.add(RECORD_BYTES, seq_of(message.value()))

    timeline.started = time.monotonic()
    while time.monotonic() - timeline.started < seconds:
        if sent - len(timeline.events) - len(errors) >= in_flight:
            producer.poll(0.05)
            continue
        producer.produce(topic, record(first_seq + sent), on_delivery=delivered)
        sent += 1
        producer.poll(0)
        if offered_rate is not None and sent % 20 == 0:
            due = timeline.started + sent * RECORD_BYTES / offered_rate
            time.sleep(max(0.0, due - time.monotonic()))
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return sent


@contextmanager
def reaped(process: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """The tool's process, killed if the block is left while it still runs (a failed test)."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
