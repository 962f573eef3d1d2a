"""A broker's produce ceiling against the real 3-broker cluster (issue 53; docs/ceilings.md).

Broker 1 leads every partition of the hot topic. Six principals (client-ids) write it through
two members of one fleet: an exempt one at a steady rate, a guaranteed one and four
best-effort ones as fast as librdkafka goes, one process each, three principals on each
member. A seventh, best-effort too, writes a topic that broker 2 leads. What broker 1 took is
read at the broker: its log's growth, from DescribeLogDirs asked of it directly every half
second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.fleet import confluent_fleet, fleet_rate, fleet_timelines
from localkafka.load import Timeline, aiokafka_flood
from localkafka.log_growth import watch_logs, window_rates
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import scrape, total

HOT, COLD = 1, 2
CEILING = 6_000_000
FLOOR = 1_500_000
EXEMPT_RATE = 1_000_000
COLD_RATE = 1_000_000
PARTITIONS = 4
#: the seconds before the measured span: the ceiling finds its level
SETTLE_S = 8.0
MEASURED_S = 12.0
BEST_EFFORT = ("best-1", "best-2", "best-3", "best-4")

CONFIG = f"""
[fleet]
name = "ceilings"
[quota_store]
topic = "ceilings-store"
[clients.ops]
kafka-quota-proxy.ceiling_exempt = 1
[clients.gold]
kafka-quota-proxy.produce_floor = {FLOOR}
[brokers."{HOT}"]
kafka-quota-proxy.produce_ceiling = {CEILING}
"""


@pytest.fixture(scope="module")
def fleet(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RunningProxy]]:
    tmp = tmp_path_factory.mktemp("ceilings")
    members = [
        start_proxy(tmp, kafka3.bootstrap_servers, 3, CONFIG, f"ceilings-{index}")
        for index in range(2)
    ]
    yield members
    for member in members:
        member.stop()


async def test_a_hot_brokers_ceiling_sheds_best_effort_first(
    kafka3: KafkaCluster, fleet: list[RunningProxy]
) -> None:
    hot_topic, cold_topic = "ceiling-hot", "ceiling-cold"
    kafka3.create_topic(hot_topic, PARTITIONS, replicas=[[HOT]] * PARTITIONS)
    kafka3.create_topic(cold_topic, PARTITIONS, replicas=[[COLD]] * PARTITIONS)
    hot_broker = next(broker for broker in kafka3.brokers if broker.node_id == HOT)
    seconds = SETTLE_S + MEASURED_S
    exempt, cold = Timeline(), Timeline()
    greedy = ("gold", *BEST_EFFORT)
    # gold, best-1 and ops through the first member; the other three best-effort, the second
    member = {"gold": 0, "best-1": 0}
    started = time.monotonic()
    with ExitStack() as stack:
        processes = [
            stack.enter_context(
                confluent_fleet(fleet[member.get(name, 1)].bootstrap, name, hot_topic, seconds, 1)
            )[0]
            for name in greedy
        ]
        _, _, samples = await asyncio.gather(
            aiokafka_flood(fleet[0].bootstrap, "ops", hot_topic, seconds, exempt, EXEMPT_RATE),
            aiokafka_flood(fleet[1].bootstrap, "cold", cold_topic, seconds, cold, COLD_RATE),
            watch_logs([hot_broker.address], {hot_topic}, seconds + 1),
        )
        timelines = await asyncio.to_thread(fleet_timelines, processes, seconds + 90)
    first = min(t.started for t in timelines)
    got = {
        name: fleet_rate([timeline], SETTLE_S, seconds)
        for name, timeline in zip(greedy, timelines, strict=True)
    }
    got["ops"] = exempt.rate(SETTLE_S - (exempt.started - first), seconds)
    broker = window_rates(samples, started + SETTLE_S, 10.0)
    rest = (sum(got.values()) - got["ops"] - got["gold"]) / len(BEST_EFFORT)
    print(
        f"broker {HOT} took {', '.join(f'{r:,.0f}' for r in broker)} B/s over 10 s windows "
        f"(ceiling {CEILING:,}); by principal "
        + ", ".join(f"{name} {rate:,.0f}" for name, rate in got.items())
        + f"; best-effort fair share {rest:,.0f}; cold {cold.rate(SETTLE_S, seconds):,.0f}"
    )
    assert broker and max(broker) <= 1.05 * CEILING
    assert got["ops"] >= 0.9 * EXEMPT_RATE
    assert got["gold"] >= 0.95 * FLOOR
    for name in BEST_EFFORT:
        assert abs(got[name] - rest) <= 0.1 * rest, (name, got[name], rest)
    assert cold.rate(SETTLE_S, seconds) >= 0.9 * COLD_RATE
    scraped = [await asyncio.to_thread(scrape, member.metrics_url) for member in fleet]
    throttles = "kafka_quota_proxy_ceiling_throttles_total"
    assert total(scraped[0], throttles, client_id="ops") == 0
    assert total(scraped[1], throttles, client_id="cold") == 0
    assert total(scraped[0], throttles, client_id="best-1") > 0
    assert total(scraped[1], throttles, client_id="best-2") > 0
    for metrics in scraped:
        assert total(metrics, "kafka_quota_proxy_ceiling", broker=str(COLD)) == 0


def configs(kafka: KafkaCluster, bootstrap: str, *args: str) -> str:
    """Stock kafka-configs (the pinned Kafka's ConfigCommand) against `bootstrap`."""
    return kafka.tool("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args)


async def test_kafka_configs_sets_a_brokers_ceiling_through_either_member(
    kafka3: KafkaCluster, fleet: list[RunningProxy]
) -> None:
    """What an operator types: `--entity-type brokers` with the proxy's key, beside one of the
    broker's own; the broker keeps its own key alone, and the other member lists the
    ceiling as the broker's."""
    key = "kafka-quota-proxy.fetch_ceiling"
    out = configs(kafka3, fleet[0].bootstrap, "--alter", "--entity-type", "brokers",
                  "--entity-name", str(COLD), "--add-config",
                  f"{key}=3000000,log.cleaner.threads=2")  # fmt: skip
    assert f"Completed updating config for broker {COLD}." in out
    described = ""
    for _ in range(50):
        described = configs(kafka3, fleet[1].bootstrap, "--describe", "--entity-type",
                            "brokers", "--entity-name", str(COLD))  # fmt: skip
        if f"{key}=3000000" in described:
            break
        await asyncio.sleep(0.1)
    assert f"{key}=3000000" in described and "log.cleaner.threads=2" in described
    broker = configs(kafka3, kafka3.bootstrap_servers, "--describe", "--entity-type", "brokers",
                     "--entity-name", str(COLD))  # fmt: skip
    assert "log.cleaner.threads=2" in broker and "kafka-quota-proxy" not in broker
    requests = "kafka-quota-proxy.request_ceiling"
    out = configs(kafka3, fleet[1].bootstrap, "--alter", "--entity-type", "brokers",
                  "--entity-default", "--add-config", f"{requests}=5000")  # fmt: skip
    assert "Completed updating default config for brokers in the cluster." in out
    out = configs(kafka3, fleet[0].bootstrap, "--alter", "--entity-type", "brokers",
                  "--entity-name", str(COLD), "--delete-config", key)  # fmt: skip
    assert f"Completed updating config for broker {COLD}." in out
    listed = configs(kafka3, fleet[0].bootstrap, "--describe", "--entity-type", "brokers",
                     "--entity-default")  # fmt: skip
    assert f"{requests}=5000" in listed
    # the cluster's ceiling is the default broker's key alone
    cluster = "kafka-quota-proxy.cluster_produce_ceiling"
    out = configs(kafka3, fleet[1].bootstrap, "--alter", "--entity-type", "brokers",
                  "--entity-default", "--add-config", f"{cluster}=90000000")  # fmt: skip
    assert "Completed updating default config for brokers in the cluster." in out
    default = configs(kafka3, fleet[0].bootstrap, "--describe", "--entity-type", "brokers",
                      "--entity-default")  # fmt: skip
    assert f"{cluster}=90000000" in default
    with pytest.raises(RuntimeError, match=f"Invalid configuration key {cluster}"):
        configs(kafka3, fleet[0].bootstrap, "--alter", "--entity-type", "brokers",
                "--entity-name", str(COLD), "--add-config", f"{cluster}=1")  # fmt: skip
    configs(kafka3, fleet[0].bootstrap, "--alter", "--entity-type", "brokers", "--entity-default",
            "--delete-config", cluster)  # fmt: skip
    configs(kafka3, fleet[0].bootstrap, "--alter", "--entity-type", "brokers", "--entity-default",
            "--delete-config", requests)  # fmt: skip
    configs(kafka3, kafka3.bootstrap_servers, "--alter", "--entity-type", "brokers",
            "--entity-name", str(COLD), "--delete-config", "log.cleaner.threads")  # fmt: skip
