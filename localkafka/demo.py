"""`make run`: a local Kafka with a demo topic, and the proxy in front of it."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys
from pathlib import Path

from config.loader import load_config
from localkafka.cluster import KafkaCluster
from proxy.network.loop import install_event_loop
from proxy.process import ProxyProcess


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localkafka.demo", description=__doc__)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--config", type=Path, default=Path("config/example.toml"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    config = load_config(args.config)
    cluster = KafkaCluster(brokers_count=args.brokers).start()
    try:
        cluster.create_topic("demo", partitions=6, replication=min(3, args.brokers))
        proxy = dataclasses.replace(
            config.proxy, upstream_bootstrap_servers=tuple(cluster.bootstrap_servers.split(","))
        )
        print(f"Kafka serving at {cluster.bootstrap_servers} (topic 'demo', 6 partitions)")
        install_event_loop(proxy.uvloop)
        asyncio.run(ProxyProcess(dataclasses.replace(config, proxy=proxy)).run())
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
