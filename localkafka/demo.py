"""`make run`: a local Kafka with a demo topic, and the proxy in front of it. The proxy also
writes its usage samples to a topic of that Kafka, so `kafka-quota-proxy top` can be tried
on it."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path

from config.loader import ProxyConfig, load_config
from localkafka.cluster import KafkaCluster
from proxy.network.garbage import collect_rarely
from proxy.network.loop import install_event_loop
from proxy.observability.log_limit import configure_logging
from proxy.process import ProxyProcess

#: where the demo's proxy writes its usage samples when the config names no topic
USAGE_TOPIC = "kafka-quota-proxy-usage"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localkafka.demo", description=__doc__)
    parser.add_argument("--brokers", type=int, default=1)
    parser.add_argument("--config", type=Path, default=Path("config/example.toml"))
    args = parser.parse_args(argv)
    configure_logging("INFO")
    config = load_config(args.config)
    print(f"starting a local Kafka of {args.brokers} broker(s)")
    cluster = KafkaCluster(brokers_count=args.brokers).start()
    try:
        cluster.create_topic("demo", partitions=6, replication=min(3, args.brokers))
        proxy = dataclasses.replace(
            config.proxy, upstream_bootstrap_servers=tuple(cluster.bootstrap_servers.split(","))
        )
        usage = config.usage
        if usage.enabled and not usage.kafka_bootstrap_servers:
            usage = dataclasses.replace(usage, kafka_topic=usage.kafka_topic or USAGE_TOPIC)
            cluster.create_topic(usage.kafka_topic, partitions=1, replication=1)
        print(f"Kafka serving at {cluster.bootstrap_servers} (topic 'demo', 6 partitions)")
        install_event_loop(proxy.uvloop)
        collect_rarely()
        process = ProxyProcess(dataclasses.replace(config, proxy=proxy, usage=usage))
        asyncio.run(process.run(serving=what_to_try))
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


def what_to_try(process: ProxyProcess) -> None:
    """The first things a newcomer does with a running proxy, with this run's addresses."""
    config: ProxyConfig = process.config
    bootstrap = process.server.bootstrap_address
    quotas = "kafka-quota-proxy quotas --bootstrap-server " + bootstrap
    lines = [
        "",
        f"The proxy ({config.path}) serves at {bootstrap}. Try:",
        f"  produce through it    kcat -b {bootstrap} -t demo -P   (or any Kafka client)",
        f"  its quotas            .venv/bin/{quotas} --describe --entity-type users",
        f"  set one               .venv/bin/{quotas} --alter --entity-type users "
        "--entity-name ANONYMOUS --add-config producer_byte_rate=1024",
    ]
    if config.usage.kafka_topic and not config.usage.kafka_bootstrap_servers:
        kafka = ",".join(config.proxy.upstream_bootstrap_servers)
        quota_topic = config.quota_store.topic
        lines.append(
            f"  who uses it, live     .venv/bin/kafka-quota-proxy top --bootstrap-server {kafka}"
            f" --usage-topic {config.usage.kafka_topic}"
            + (f" --quota-topic {quota_topic}" if quota_topic else "")
        )
    if config.metrics.enabled:
        endpoint = f"http://{config.metrics.listen_host}:{config.metrics.port}"
        lines.append(f"  its metrics           {endpoint}/metrics")
        lines.append(
            f"  why a client is slow  .venv/bin/kafka-quota-proxy explain --proxy {endpoint}"
            " --user ANONYMOUS --client-id CLIENT_ID"
        )
    lines += ["Ctrl-C stops the proxy and Kafka.", ""]
    print("\n".join(lines), flush=True)


if __name__ == "__main__":
    sys.exit(main())
