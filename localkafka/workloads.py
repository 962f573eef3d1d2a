"""Workloads whose requests wait in the broker more than they use its threads (issue 41), and
one that only uses them: what a request quota (KIP-124) must charge little, and what it must
hold.

Each runs a fixed amount of work with librdkafka (confluent-kafka) under one client-id, counts
the throttle_time_ms its responses carried (librdkafka's throttle_cb), and returns how long it
took; the flood runs for a fixed time with aiokafka, which ignores throttle_time_ms, so that
only the mute holds it, and counts the requests answered. Every loop is bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from localkafka.broker_queries import recv_exact
from protocol.apis import ALTER_CLIENT_QUOTAS, DECODED
from protocol.client_quotas import AlterEntry, alter_body
from protocol.headers import encode_request, response_body_offset

#: a Kafka group protocol: the classic one, or KIP-848's
GroupProtocol = str
#: the Java helper printing a running broker's request-quota sensors (request-time and
#: throttle-time per user and client-id), read over JMX
REQUEST_QUOTA_METRICS = Path(__file__).parent / "java" / "RequestQuotaMetrics.java"


@dataclass
class Outcome:
    """What one workload's clients got."""

    #: from the first request to the last piece of work done
    seconds: float
    #: throttle_time_ms over every response, and how many responses carried one
    throttle_ms: int = 0
    throttled: int = 0
    #: the flood only: requests answered
    requests: int = 0


class Throttles:
    """librdkafka's throttle_cb: each broker response with a throttle_time_ms (and one with 0
    when a throttle ends, not counted)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ms = 0
        self.count = 0

    def __call__(self, event: Any) -> None:
        ms = round(event.throttle_time * 1000)
        if ms > 0:
            with self._lock:
                self.ms += ms
                self.count += 1


def alter_client_quotas(address: str, entries: Sequence[AlterEntry]) -> None:
    """AlterClientQuotas v0 sent to one broker (which forwards it to the controller), as
    kafka-configs --alter does, without a JVM; raises with the broker's error."""
    host, _, port = address.rpartition(":")
    frame = encode_request(ALTER_CLIENT_QUOTAS, 0, 1, "localkafka", alter_body(0, entries, False))
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame)
        size = struct.unpack(">i", recv_exact(sock, 4))[0]
        response = struct.pack(">i", size) + recv_exact(sock, size)
    offset = response_body_offset(response, ALTER_CLIENT_QUOTAS, 0)
    decoded = DECODED[ALTER_CLIENT_QUOTAS][1].decode(response[offset:], version=0)
    errors = [(e.error_code, e.error_message) for e in decoded.entries if e.error_code]
    if errors:
        raise RuntimeError(f"AlterClientQuotas refused: {errors}")


def _config(bootstrap: str, client_id: str, throttles: Throttles, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "client.id": client_id,
        "throttle_cb": throttles,
        **extra,
    }


def fill(bootstrap: str, topic: str, records: int, value: Callable[[int], bytes]) -> None:
    """`records` records written (acks=all) within 60 s, not under any workload's client-id."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "workload-fill"})
    deadline = time.monotonic() + 60
    for seq in range(records):
        while True:
            try:
                producer.produce(topic, value(seq), key=str(seq).encode())
                break
            except BufferError:  # the producer's queue is full: wait for deliveries
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic} was not filled within 60 s") from None
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(max(deadline - time.monotonic(), 0.1)) != 0:
        raise TimeoutError(f"{topic} was not filled within 60 s")


class _Member(threading.Thread):
    """One member of a group polling until stopped, its assignment readable at any time."""

    def __init__(self, config: dict[str, Any], topic: str) -> None:
        super().__init__(daemon=True)
        self._config, self._topic = config, topic
        self.assignment: frozenset[int] = frozenset()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        consumer = Consumer(self._config)
        try:
            consumer.subscribe([self._topic])
            while not self.stop.is_set():
                message = consumer.poll(0.05)
                if message is not None and message.error() is not None:
                    raise KafkaException(message.error())
                self.assignment = frozenset(tp.partition for tp in consumer.assignment())
        except BaseException as exc:  # reported by the workload's thread
            self.error = exc
        finally:
            consumer.close()


def rebalancing_group(
    bootstrap: str,
    client_id: str,
    group: str,
    topic: str,
    partitions: int,
    protocol: GroupProtocol,
    cycles: int,
    timeout_s: float,
) -> Outcome:
    """Three members of one group; `cycles` times the oldest leaves and a new one joins, and
    each cycle ends when the three hold every partition once, each at least one. The time is
    the cycles', and the throttles all the members got."""
    throttles = Throttles()
    config = _config(
        bootstrap, client_id, throttles, **{"group.id": group, "group.protocol": protocol}
    )
    if protocol == "classic":  # KIP-848 groups take their heartbeat interval from the broker
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 250})
    members = [_Member(config, topic) for _ in range(3)]
    deadline = time.monotonic() + timeout_s
    for member in members:
        member.start()
    try:
        # timed from the group's first settled state: three clients starting at once take
        # 0.4-2.2 s to form it here, a spread that would hide the rebalances' own time
        _until_balanced(members, partitions, deadline)
        started = time.monotonic()
        for _ in range(cycles):
            leaving = members.pop(0)
            leaving.stop.set()
            leaving.join(max(deadline - time.monotonic(), 0.1))
            joining = _Member(config, topic)
            members.append(joining)
            joining.start()
            _until_balanced(members, partitions, deadline)
        return Outcome(time.monotonic() - started, throttles.ms, throttles.count)
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            member.join(10)


def _until_balanced(members: list[_Member], partitions: int, deadline: float) -> None:
    while True:
        for member in members:
            if member.error is not None:
                raise member.error
        held = [member.assignment for member in members]
        if all(held) and sum(map(len, held)) == partitions == len(frozenset().union(*held)):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the group did not settle: {held}")
        time.sleep(0.02)


def transactional_etl(
    bootstrap: str,
    client_id: str,
    group: str,
    source: str,
    sink: str,
    records: int,
    batch: int,
    timeout_s: float,
) -> Outcome:
    """Consume-transform-produce in transactions of exactly `batch` records (read_committed,
    the consumed offsets committed in each transaction) until `records` are through; timed
    from the first records consumed (the producer's id and the consumer's group, which take a
    second or more to settle, are not the loop's)."""
    throttles = Throttles()
    consumer = Consumer(
        _config(
            bootstrap,
            client_id,
            throttles,
            **{
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            },
        )
    )
    producer = Producer(
        _config(bootstrap, client_id, throttles, **{"transactional.id": f"{group}-etl"})
    )
    deadline = time.monotonic() + timeout_s
    started = 0.0
    done = 0
    try:
        producer.init_transactions(timeout_s)
        consumer.subscribe([source])
        while done < records:
            # every transaction holds `batch` records, as many as the fetches bring: the
            # number of transactions, and so the work, is the same on every run
            wanted = min(batch, records - done)
            messages: list[Any] = []
            while len(messages) < wanted:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{done} of {records} records through in {timeout_s} s")
                messages += consumer.consume(wanted - len(messages), timeout=0.5)
                if messages:
                    started = started or time.monotonic()
            producer.begin_transaction()
            for message in messages:
                if message.error() is not None:
                    raise KafkaException(message.error())
                producer.produce(sink, (message.value() or b"").upper(), key=message.key())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(),
                max(deadline - time.monotonic(), 1.0),
            )
            producer.commit_transaction(max(deadline - time.monotonic(), 1.0))
            done += len(messages)
        return Outcome(time.monotonic() - started, throttles.ms, throttles.count)
    finally:
        consumer.close()


def acks_all_producer(
    bootstrap: str, client_id: str, topic: str, records: int, timeout_s: float
) -> Outcome:
    """`records` small records, acks=all, one request each (no batching, one in flight)."""
    throttles = Throttles()
    producer = Producer(
        _config(
            bootstrap,
            client_id,
            throttles,
            acks="all",
            **{"linger.ms": 0, "max.in.flight.requests.per.connection": 1},
        )
    )
    acked: list[int] = []
    errors: list[object] = []

    def delivered(error: object, _message: object) -> None:
        (acked if error is None else errors).append(1)

    started = time.monotonic()
    deadline = started + timeout_s
    for seq in range(records):
        while seq - len(acked) - len(errors) >= 1:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(acked)} of {records} records acknowledged")
            producer.poll(0.01)
        producer.produce(topic, b"%d" % seq, on_delivery=delivered)
        producer.poll(0)
    if producer.flush(max(deadline - time.monotonic(), 0.1)) != 0:
        raise TimeoutError(f"{len(acked)} of {records} records acknowledged")
    if errors:
        raise RuntimeError(f"{len(errors)} records failed")
    return Outcome(time.monotonic() - started, throttles.ms, throttles.count)


def idle_consumers(
    bootstrap: str,
    client_id: str,
    topic: str,
    partitions: int,
    idle_s: float,
    timeout_s: float,
) -> Outcome:
    """A consumer per partition long-polling an empty partition for `idle_s`, then a record
    written to each: done when every consumer has its record."""
    throttles = Throttles()
    got: set[int] = set()
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def consume(partition: int) -> None:
        consumer = Consumer(
            _config(
                bootstrap,
                client_id,
                throttles,
                **{"group.id": f"{client_id}-unused", "fetch.wait.max.ms": 500},
            )
        )
        try:
            consumer.assign([TopicPartition(topic, partition, 0)])
            while not stop.is_set():
                message = consumer.poll(0.1)
                if message is None:
                    continue
                if message.error() is not None:
                    raise KafkaException(message.error())
                with lock:
                    got.add(partition)
        except BaseException as exc:
            errors.append(exc)
        finally:
            consumer.close()

    threads = [threading.Thread(target=consume, args=(p,), daemon=True) for p in range(partitions)]
    started = time.monotonic()
    deadline = started + timeout_s
    for thread in threads:
        thread.start()
    try:
        time.sleep(idle_s)
        writer = Producer({"bootstrap.servers": bootstrap, "client.id": "workload-fill"})
        for partition in range(partitions):
            writer.produce(topic, b"wake", partition=partition)
        if writer.flush(10) != 0:
            raise TimeoutError("the waking records were not written")
        while len(got) < partitions:
            if errors:
                raise errors[0]
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(got)} of {partitions} consumers woke")
            time.sleep(0.01)
        return Outcome(time.monotonic() - started, throttles.ms, throttles.count)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


async def metadata_flood(bootstrap: str, client_id: str, seconds: float) -> Outcome:
    """Metadata requests back to back on one connection for `seconds` (aiokafka does not
    honour throttle_time_ms: only a mute slows it)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id=client_id)
    await client.bootstrap()
    node_id = next(iter(client.cluster.brokers())).nodeId
    answered = throttle_ms = throttled = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            response = await client.send(node_id, MetadataRequest([], False))
            answered += 1
            if response.throttle_time_ms:
                throttle_ms += response.throttle_time_ms
                throttled += 1
    finally:
        await client.close()
    return Outcome(time.monotonic() - started, throttle_ms, throttled, answered)


def run_flood(bootstrap: str, client_id: str, seconds: float) -> Outcome:
    """metadata_flood on an event loop of its own (for a thread beside other workloads)."""
    return asyncio.run(metadata_flood(bootstrap, client_id, seconds))
