"""`python -m localkafka fetch | images | start [--brokers N]`: the project's own local Kafka,
and the images docker-compose.yml runs in the suite."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from localkafka.cluster import KafkaCluster
from localkafka.engine import ensure_images
from localkafka.jars import ensure_jars, ensure_spark_kafka_jars, kafka_version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localkafka", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "fetch", help="download the pinned Kafka jars, and Spark's Kafka source, into .cache/"
    )
    sub.add_parser(
        "images", help="make the images docker-compose.yml runs in the suite (localkafka/engine.py)"
    )
    start = sub.add_parser("start", help="run a local KRaft cluster until interrupted")
    start.add_argument("--brokers", type=int, default=1)
    start.add_argument("--topic", action="append", default=[], metavar="NAME:PARTITIONS")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        print(ensure_jars())
        print(ensure_spark_kafka_jars()[0].parent)
        return 0
    if args.command == "images":
        for variable, image in ensure_images().items():
            print(f"{variable}={image}")
        return 0
    cluster = KafkaCluster(brokers_count=args.brokers).start()
    try:
        for spec in args.topic:
            name, _, partitions = spec.partition(":")
            cluster.create_topic(name, int(partitions or 1), replication=1)
        print(f"Kafka {kafka_version()} serving at {cluster.bootstrap_servers}", flush=True)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
