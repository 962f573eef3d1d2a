"""Usage samples through a Kafka topic, and the report on a Spark standalone cluster.

The proxy produces its samples to a topic of the upstream cluster (no files), the report
reads them through Spark's Kafka source (spark-sql-kafka, fetched by Maven), and runs on a
master and a worker started from the pyspark distribution instead of local mode.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from config.loader import load_config
from localkafka.cluster import KafkaCluster
from localkafka.jars import ensure_spark_kafka_jars
from localkafka.proxy_process import RunningProxy, start_proxy
from localkafka.scrape import value, wait_for_metric
from quotas.entities import QuotaEntity, QuotaType
from tests.integration.support.spark_standalone import standalone_spark

TOPIC = "usage-kafka-traffic"
SAMPLES_TOPIC = "kafka-quota-proxy-usage"
CLIENT_ID = "sampled-app"
USAGE = f"""
[usage]
interval_s = 1
directory = ""
kafka_topic = "{SAMPLES_TOPIC}"
"""


@pytest.fixture
def topic_proxy(kafka3: KafkaCluster, tmp_path: Path) -> Iterator[RunningProxy]:
    kafka3.create_topic(TOPIC, partitions=3, replication=1)
    kafka3.create_topic(SAMPLES_TOPIC, partitions=3, replication=1)
    proxy = start_proxy(tmp_path, kafka3.bootstrap_servers, 3, extra=USAGE)
    yield proxy
    proxy.stop()


async def test_samples_produced_to_a_topic_are_reported_by_a_standalone_spark_cluster(
    topic_proxy: RunningProxy, kafka3: KafkaCluster, tmp_path: Path
) -> None:
    (tmp_path / "spark").mkdir()
    with standalone_spark(tmp_path / "spark") as cluster:  # its JVMs start while we produce
        producer = AIOKafkaProducer(bootstrap_servers=topic_proxy.bootstrap, client_id=CLIENT_ID)
        await producer.start()
        try:
            for _ in range(40):  # 40 x 5 records over about 4 s
                await asyncio.gather(*[await producer.send(TOPIC, b"x" * 1000) for _ in range(5)])
                await asyncio.sleep(0.1)
        finally:
            await producer.stop()
        produced = "kafka_quota_proxy_usage_samples_total"
        await wait_for_metric(
            topic_proxy.metrics_url, lambda m: (value(m, produced, sink="kafka") or 0) >= 3
        )
        jars = ",".join(str(jar) for jar in ensure_spark_kafka_jars())
        out = tmp_path / "report"
        await asyncio.to_thread(cluster.wait_for_worker)
        command = [
            *(sys.executable, "-m", "proxy", "report", "--out", str(out)),
            *("--kafka-topic", SAMPLES_TOPIC),
            *("--kafka-bootstrap-servers", kafka3.bootstrap_servers),
            *("--jars", jars, "--master", cluster.master_url),
            *("--conf", "spark.driver.host=127.0.0.1"),
            *("--conf", "spark.driver.bindAddress=127.0.0.1"),
            *("--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=1"),
            # a few hundred samples: one core's worth of shuffle partitions, not 16
            *("--conf", "spark.sql.shuffle.partitions=2"),
            *("--conf", "spark.ui.showConsoleProgress=false"),
            *("--conf", "spark.ui.enabled=false"),  # no web UI to start: a few seconds
        ]  # fmt: skip
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        ran = [app for app in cluster.applications() if app["name"] == "kafka-quota-proxy report"]
        assert ran, "the report did not run on the standalone cluster"

    limits = load_config(out / "quotas.toml").quotas.limits
    assert limits[QuotaType.PRODUCE][QuotaEntity("ANONYMOUS", CLIENT_ID)] > 0
    assert (out / "principals").is_dir() and (out / "report.html").is_file()
