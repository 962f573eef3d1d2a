"""Shadow mode decides and reports throttles on live traffic and applies none of them.

kafka-python logs every throttle_time_ms it receives, so its silence shows that nothing
reached the client; the proxy's metrics and log show what would have been enforced. A
reload that leaves shadow mode then throttles the same client.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from localkafka.cluster import KafkaCluster
from localkafka.load import Timeline, kafka_python_flood
from localkafka.proxy_process import SHORT_QUOTA_WINDOWS, RunningProxy, start_proxy
from localkafka.scrape import scrape, value, wait_for_metric

CLIENT_ID = "shadow-app"
QUOTA = 200_000
CONFIG = f"""config_poll_interval_s = 0.2

[enforcement]
shadow = ["producer_byte_rate"]

{SHORT_QUOTA_WINDOWS}
[clients."{CLIENT_ID}"]
producer_byte_rate = {QUOTA}
"""


@pytest.fixture
def shadow_proxy(kafka3: KafkaCluster, tmp_path: Path) -> Iterator[RunningProxy]:
    kafka3.create_topic(CLIENT_ID, partitions=1)
    proxy = start_proxy(tmp_path, kafka3.bootstrap_servers, 3, extra=CONFIG)
    yield proxy
    proxy.stop()


async def test_shadow_mode_reports_throttles_and_applies_none(
    shadow_proxy: RunningProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kafka.net.connection")
    timeline = Timeline()
    await asyncio.to_thread(
        kafka_python_flood, shadow_proxy.bootstrap, CLIENT_ID, CLIENT_ID, 5.0, timeline
    )
    rate = timeline.rate(1.0, 5.0)
    assert rate > 2 * QUOTA, f"shadow mode held the producer to {rate:,.0f} B/s"
    assert not [r for r in caplog.records if "throttled by broker" in r.getMessage()]
    samples = scrape(shadow_proxy.metrics_url)
    labels = {"user": "", "client_id": CLIENT_ID}
    decided = value(
        samples, "kafka_quota_proxy_shadow_throttles_total", quota="producer_byte_rate", **labels
    )
    throttle_time = value(samples, "kafka_server_produce_throttle_time", **labels)
    assert decided is not None and decided > 10
    assert throttle_time is not None and not math.isnan(throttle_time) and throttle_time > 0
    assert "shadow mode: would throttle user= client_id=shadow-app" in shadow_proxy.log()
    print(f"shadow: {rate:,.0f} B/s against {QUOTA:,}; {decided:.0f} throttles not applied")

    config = shadow_proxy.config_path
    config.write_text(config.read_text().replace('shadow = ["producer_byte_rate"]', ""))
    await wait_for_metric(
        shadow_proxy.metrics_url,
        lambda s: value(s, "kafka_quota_proxy_config_reloads_total", result="success") == 1,
    )
    await asyncio.sleep(3)  # the shadow phase's bytes leave the 2 s quota window
    enforced = Timeline()
    await asyncio.to_thread(
        kafka_python_flood, shadow_proxy.bootstrap, CLIENT_ID, CLIENT_ID, 5.0, enforced
    )
    held = enforced.rate(2.0, 5.0)
    assert held < 2 * QUOTA, f"enforcing after the reload, still {held:,.0f} B/s"
    assert [r for r in caplog.records if "throttled by broker" in r.getMessage()]
