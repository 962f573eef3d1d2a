"""What an operator looks at, against the real thing: Debian's Prometheus, on deploy/'s config
and alerting rules, scrapes two proxies of one fleet in front of the 3-broker cluster while a
flooder is throttled beside a well-behaved producer, a consumer and an admin client.

Every query of the Grafana dashboard is asked as Grafana asks it (its variables resolved as
Grafana resolves them, a range query for each panel) and must return series; the throttling
alert must fire for the flooder and for nobody else. The two alerts under test wait 0 s here
instead of their minutes, the one change from the shipped rules: promtool's unit tests
(tests/deploy/test_prometheus_rules.py) hold the waiting itself.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.dashboard import DASHBOARD
from localkafka.broker_queries import create_topic
from localkafka.cluster import KafkaCluster
from localkafka.load import Timeline, aiokafka_drain, aiokafka_flood
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from tests.integration.support.prometheus import RunningPrometheus, prometheus

TOPIC = "operators-view"
FLOODER_QUOTA = 100_000
LOAD_S = 10.0
#: Grafana's $__rate_interval at a 1 s scrape interval is 4 s; one more for a late scrape
RATE_INTERVAL = "5s"
UNDER_TEST = {"KafkaQuotaProxyPrincipalThrottled": "0s", "KafkaQuotaProxyShadowThrottles": "0s"}


def config(fleet: str) -> str:
    return f"""config_poll_interval_s = 0.2

[enforcement]
shadow = ["request_percentage"]

[guards.disk]
interval_s = 1

[fleet]
name = "{fleet}"

[quota_store]
topic = "{fleet}-quotas"

{SHORT_QUOTA_WINDOWS}
[clients.flooder]
producer_byte_rate = {FLOODER_QUOTA}
# a Produce round trip to a broker takes more than a ten-thousandth of a second: shadowed
request_percentage = 0.01

[clients.steady]
producer_byte_rate = 50000000

[clients.reader]
consumer_byte_rate = 10000000

[users."<default>"]
controller_mutation_rate = 100
producer_ids_rate = 100
# request-rate guards far above this load: the guard panels' series
kafka-quota-proxy.metadata_rate = 1000
kafka-quota-proxy.find_coordinator_rate = 1000
kafka-quota-proxy.init_producer_id_rate = 1000
# and connection guards far above it: the principal connection panels' series
kafka-quota-proxy.connections = 1000
kafka-quota-proxy.connection_creation_rate = 1000

# every broker a produce ceiling the hog is over, beside the exempt clients: the ceiling
# panels' series, for the best-effort hog it sheds (held to what they leave, it is muted for
# less than a second at a time)
[brokers."<default>"]
kafka-quota-proxy.produce_ceiling = 300000
# and a disk guard far below what the brokers have: the log directories' series
kafka-quota-proxy.disk_soft_limit_bytes = 2000
kafka-quota-proxy.disk_hard_limit_bytes = 1000
[clients.flooder.kafka-quota-proxy]
ceiling_exempt = 1
[clients.steady.kafka-quota-proxy]
ceiling_exempt = 1

# every topic a budget of its own, far above this load: the topic panels' series
[topics."<default>"]
producer_byte_rate = 500000000
consumer_byte_rate = 500000000
"""


@pytest.fixture(scope="module")
def fleet(
    kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RunningProxy]]:
    kafka3.create_topic(TOPIC, partitions=3)
    name = f"operators-{uuid.uuid4().hex[:8]}"
    tmp = tmp_path_factory.mktemp("operators-view")
    proxies = [
        start_proxy(tmp, kafka3.bootstrap_servers, 3, extra=config(name), name=f"proxy-{i}")
        for i in range(2)
    ]
    yield proxies
    for proxy in proxies:
        proxy.stop()


def metrics_target(proxy: RunningProxy) -> str:
    return proxy.metrics_url.removeprefix("http://").removesuffix("/metrics")


async def load(fleet: list[RunningProxy]) -> None:
    """A flooder over its quota (idempotent: a producer id), a producer far under its own
    through the other member, a hog the brokers' ceilings shed, a consumer, and a topic made
    through the proxy."""
    first, second = fleet
    await asyncio.gather(
        aiokafka_flood(
            first.bootstrap, "flooder", TOPIC, LOAD_S, Timeline(), enable_idempotence=True
        ),
        aiokafka_flood(second.bootstrap, "steady", TOPIC, LOAD_S, Timeline(), offered_rate=20_000),
        aiokafka_flood(second.bootstrap, "hog", TOPIC, LOAD_S, Timeline()),
        aiokafka_drain(first.bootstrap, "reader", TOPIC, LOAD_S, Timeline()),
        asyncio.to_thread(create_topic, second.bootstrap, f"{TOPIC}-made", 3, 1),
    )


def resolved(expr: str, variables: dict[str, str], span_s: int) -> str:
    """A panel's query with the dashboard's variables as Grafana fills them in."""
    values = {**variables, "__rate_interval": RATE_INTERVAL, "__range": f"{span_s}s"}
    return re.sub(r"\$(\w+)", lambda m: values.get(m[1], m[0]), expr)


def variables(dashboard: Any, server: RunningPrometheus) -> dict[str, str]:
    """Each query variable's values, asked as Grafana asks them; a single-valued one takes
    its value, the others "All"."""
    chosen: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        found = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
        assert found, variable["definition"]
        match = resolved(found[1], chosen, 0)
        values = server.label_values(found[2], match)
        assert values, f"variable {variable['name']} has no values ({match})"
        chosen[variable["name"]] = variable["allValue"] if variable["includeAll"] else values[0]
    return chosen


async def test_every_panel_has_series_and_the_flooder_alone_is_alerted(
    fleet: list[RunningProxy], tmp_path: Path
) -> None:
    targets = [metrics_target(proxy) for proxy in fleet]
    with prometheus(tmp_path, targets, UNDER_TEST) as server:
        start = time.time()
        await load(fleet)
        deadline = time.monotonic() + 30
        while not any(a["alertname"] in UNDER_TEST for a in server.firing()):
            assert time.monotonic() < deadline, f"no alert fired: {server.api('alerts')}"
            await asyncio.sleep(0.5)
        await asyncio.sleep(2)  # the other alert's evaluation, a second later at most
        firing = server.firing()
        end = time.time()

        throttled = [a for a in firing if a["alertname"] == "KafkaQuotaProxyPrincipalThrottled"]
        assert [(a["quota"], a["client_id"]) for a in throttled] == [
            ("producer_byte_rate", "flooder")
        ], firing
        shadowed = [a for a in firing if a["alertname"] == "KafkaQuotaProxyShadowThrottles"]
        assert [(a["quota"], a["client_id"]) for a in shadowed] == [
            ("request_percentage", "flooder")
        ], firing
        assert {a["alertname"] for a in firing} == set(UNDER_TEST), firing

        dashboard = json.loads(DASHBOARD.read_text())
        chosen = variables(dashboard, server)
        span = int(end - start) + 1
        empty = []
        answers: dict[str, list[Any]] = {}
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                expr = resolved(target["expr"], chosen, span)
                series = await asyncio.to_thread(server.query_range, expr, start, end)
                answers[f"{panel['title']}/{target['refId']}"] = series
                if not series:
                    empty.append(f"{panel['title']} ({target['refId']}): {expr}")
        assert not empty, "panels without series:\n" + "\n".join(empty)
        print(
            f"{len(answers)} queries, {sum(map(len, answers.values()))} series; firing: "
            + ", ".join(f"{a['alertname']}({a['quota']}, {a['client_id']})" for a in firing)
        )

    def peak(key: str, **labels: str) -> float:
        """The largest value a query's series with these labels took (Kafka's averages are
        NaN while they have no samples: not counted)."""
        values = [
            float(value)
            for series in answers[key]
            if labels.items() <= series["metric"].items()
            for _, value in series["values"]
            if value != "NaN"
        ]
        assert values, (key, labels)
        return max(values)

    assert peak("Principals throttled/A") >= 1
    assert peak("Listeners down/A") == 0
    assert peak("Throttle time/A", group="produce", client_id="flooder") > 0
    assert peak("Use of producer_byte_rate/A", client_id="flooder") > 0.5
    assert peak("Use of producer_byte_rate/A", client_id="steady") < 0.01
    assert peak("Throttled responses/A", client_id="flooder", quota="producer_byte_rate") > 0
    assert "steady" not in {s["metric"].get("client_id") for s in answers["Throttled responses/A"]}
    assert peak("Fleet members and watched sensors/A") == 2
    # the flooder, near its limit, is published; the steady principal far from it need not be
    assert peak("Fleet members and watched sensors/B") >= 1
    assert 0 < peak("Fleet bus CPU/A") < 1  # some of a core, never all of it
