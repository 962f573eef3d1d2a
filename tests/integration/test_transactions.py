"""KIP-447 exactly-once through the proxy: read-process-write across a group rebalance."""

from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from localkafka.proxy_process import RunningProxy
from tests.integration.support import clients
from tests.integration.support.clients import confluent_values

INPUT_RECORDS = 4000
DEADLINE_S = 120.0


class Worker(threading.Thread):
    """A consumer-group member with its own transactional producer (one per member, KIP-447)."""

    def __init__(self, bootstrap: str, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.committed_batches = 0
        self.aborted = 0
        self.error: BaseException | None = None
        #: set once the group has given this member partitions
        self.assigned = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc

    def _run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "eos-group",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"eos-{self.name}",
                "linger.ms": 5,
            }
        )
        producer.init_transactions(30)

        def on_assign(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if partitions:
                self.assigned.set()

        consumer.subscribe(["eos-in"], on_assign=on_assign)
        try:
            while not self.stop.is_set():
                messages = [m for m in consumer.consume(100, 0.5) if m.error() is None]
                if not messages:
                    continue
                producer.begin_transaction()
                try:
                    for m, value in zip(messages, confluent_values(messages), strict=True):
                        producer.produce("eos-out", b"out-" + value, key=m.key())
                    offsets = consumer.position(consumer.assignment())
                    producer.send_offsets_to_transaction(
                        offsets, consumer.consumer_group_metadata(), 30
                    )
                    producer.commit_transaction(30)
                    self.committed_batches += 1
                except KafkaException as exc:
                    if not exc.args[0].txn_requires_abort():
                        raise
                    producer.abort_transaction(30)
                    self.aborted += 1
                    self._rewind(consumer)
        finally:
            consumer.close()
            producer.flush(10)

    @staticmethod
    def _rewind(consumer: Consumer) -> None:
        """After an abort, continue from the group's committed offsets, as KIP-447 requires."""
        assignment = consumer.assignment()
        for tp in consumer.committed(assignment, timeout=30):
            consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))


def read_committed_output(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-verifier",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe(["eos-out"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            got += confluent_values(consumer.consume(500, 1.0))
        got += confluent_values(consumer.consume(500, 2.0))
    finally:
        consumer.close()
    return got


def test_read_process_write_is_exactly_once_across_a_rebalance(proxy3: RunningProxy) -> None:
    clients.create_topic(proxy3.bootstrap, "eos-in")
    clients.create_topic(proxy3.bootstrap, "eos-out")
    inputs = [f"rec-{i}".encode() for i in range(INPUT_RECORDS)]
    # the second half goes in only once the second member owns partitions, so it has work
    # however fast the first one gets through the first half (its keys span all partitions)
    half = INPUT_RECORDS // 2
    clients.confluent_produce(proxy3.bootstrap, "eos-in", inputs[:half])

    first = Worker(proxy3.bootstrap, "w1")
    first.start()
    deadline = time.monotonic() + DEADLINE_S
    while first.committed_batches < 3 and time.monotonic() < deadline and first.error is None:
        time.sleep(0.05)
    assert first.committed_batches >= 3, first.error
    second = Worker(proxy3.bootstrap, "w2")  # joins midway: the group rebalances
    second.start()
    assert second.assigned.wait(DEADLINE_S), second.error
    clients.confluent_produce(proxy3.bootstrap, "eos-in", inputs[half:])

    output: list[bytes] = []
    try:
        output = read_committed_output(proxy3.bootstrap, INPUT_RECORDS)
    finally:
        for worker in (first, second):
            worker.stop.set()
        for worker in (first, second):
            worker.join(60)
    assert first.error is None and second.error is None, (first.error, second.error)
    assert second.committed_batches > 0, "the second member never processed a batch"
    expected = sorted(b"out-" + v for v in inputs)
    assert len(output) == len(set(output)), "duplicates in committed output"
    assert sorted(output) == expected, f"{len(output)} of {len(expected)} records"
