"""One client library producing (kafka-python: and consuming) while a broker is down, in a
process of its own so that tests/integration/native/connect_counter.c can count its
connection attempts.

    python -m tests.integration.support.reconnecting CLIENT BOOTSTRAP TOPIC SECONDS

It sends to every partition in turn, so it keeps wanting the partitions the stopped broker
still leads, and exits without waiting for what the dead broker will never acknowledge.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer, KafkaProducer

PARTITIONS = 3
#: bounds every loop in count as well as time
MAX_SENDS = 100_000


def _kafka_python(bootstrap: str, topic: str, deadline: float) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    # a group of its own: the direct and the proxied client run at once
    group = "reconnecting-" + bootstrap.replace(":", "-").replace(",", "-")
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group)
    for sent in range(MAX_SENDS):
        if time.monotonic() >= deadline:
            break
        producer.send(topic, b"x", partition=sent % PARTITIONS)
        consumer.poll(timeout_ms=20)


async def _aiokafka(bootstrap: str, topic: str, deadline: float) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    for sent in range(MAX_SENDS):
        if time.monotonic() >= deadline:
            break
        try:
            await asyncio.wait_for(
                producer.send(topic, b"x", partition=sent % PARTITIONS),
                max(deadline - time.monotonic(), 0.01),
            )
        except TimeoutError:
            break
        await asyncio.sleep(0.02)


def _confluent(bootstrap: str, topic: str, deadline: float) -> None:
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "acks": "all"})
    for sent in range(MAX_SENDS):
        if time.monotonic() >= deadline:
            break
        producer.produce(topic, b"x", partition=sent % PARTITIONS)
        producer.poll(0.02)


def main(argv: list[str]) -> int:
    client, bootstrap, topic, seconds = argv[0], argv[1], argv[2], float(argv[3])
    deadline = time.monotonic() + seconds
    if client == "kafka-python":
        _kafka_python(bootstrap, topic, deadline)
    elif client == "aiokafka":
        asyncio.run(_aiokafka(bootstrap, topic, deadline))
    elif client == "confluent-kafka":
        _confluent(bootstrap, topic, deadline)
    else:
        raise SystemExit(f"unknown client {client}")
    sys.stdout.flush()
    os._exit(0)  # not waiting for acknowledgements the stopped broker will never send


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
