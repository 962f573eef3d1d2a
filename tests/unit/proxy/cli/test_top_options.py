"""What `kafka-quota-proxy top` reads: from its options, and where they are not given, from
the proxy's config file, so that `top --config proxy.toml` is enough on a proxy's host."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from protocol.quota_records import record_key, record_value
from proxy.cli.top import add_arguments, feed_for
from proxy.top.feed import Update, feed_view, view_of
from proxy.top.view import Measure, UserClient
from quotas.entities import QuotaEntity
from quotas.store import ALTERED
from quotas.validation import record_change

CONFIG = """\
[proxy]
upstream_bootstrap_servers = ["kafka-1:9092", "kafka-2:9092"]
[usage]
kafka_topic = "kqp-usage"
[quota_store]
topic = "kqp-quotas"
[fleet]
name = "edge"
"""


def options(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_proxys_config_file_says_where_everything_is(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text(CONFIG)
    feed = feed_for(options("--config", str(config)))
    assert feed.servers == ["kafka-1:9092", "kafka-2:9092"]
    assert (feed.usage_topic, feed.quota_topic) == ("kqp-usage", "kqp-quotas")
    assert feed.fleet_topic == "kafka-quota-proxy-fleet.edge"


def test_options_win_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text(CONFIG)
    feed = feed_for(
        options("--config", str(config), "--bootstrap-server", "other:9092",
                "--usage-topic", "u", "--quota-topic", "q", "--fleet", "f")
    )  # fmt: skip
    assert feed.servers == ["other:9092"]
    assert (feed.usage_topic, feed.quota_topic, feed.fleet_topic) == (
        "u", "q", "kafka-quota-proxy-fleet.f",
    )  # fmt: skip


def test_without_a_file_the_cluster_and_the_usage_topic_are_named() -> None:
    with pytest.raises(ValueError, match="--bootstrap-server and --usage-topic"):
        feed_for(options("--bootstrap-server", "kafka:9092"))
    feed = feed_for(options("--bootstrap-server", "kafka:9092", "--usage-topic", "u"))
    assert (feed.quota_topic, feed.fleet_topic) == ("kafka-quota-proxy-quotas", "")


def test_samples_on_another_cluster_need_the_options(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text(
        CONFIG.replace('kafka_topic = "kqp-usage"',
                       'kafka_topic = "kqp-usage"\nkafka_bootstrap_servers = ["metrics:9092"]')
    )  # fmt: skip
    for named in ((), ("--usage-topic", "kqp-usage"), ("--bootstrap-server", "metrics:9092")):
        with pytest.raises(ValueError, match=r"proxy.toml: \[usage\] kafka_bootstrap_servers"):
            feed_for(options("--config", str(config), *named))
    feed = feed_for(
        options("--config", str(config), "--bootstrap-server", "metrics:9092",
                "--usage-topic", "kqp-usage")
    )  # fmt: skip
    assert feed.servers == ["metrics:9092"]


def test_quotas_read_from_the_store_topic_reach_the_view_once_per_update() -> None:
    feed = feed_for(options("--bootstrap-server", "kafka:9092", "--usage-topic", "u"))
    view = view_of(feed)
    flooder = UserClient("ANONYMOUS", "flooder")
    # as the feed applies a quota record it reads, and says so in the poll's update
    feed.store.alter(ALTERED, QuotaEntity(client_id="flooder"), {"producer_byte_rate": 5.0})
    feed_view(view, feed, Update())
    assert view.quota(flooder, Measure.PRODUCE) is None
    feed_view(view, feed, Update(quotas=True))
    assert view.quota(flooder, Measure.PRODUCE) == 5.0


def test_records_the_feed_skips_are_counted_in_one_problem_line() -> None:
    feed = feed_for(options("--bootstrap-server", "kafka:9092", "--usage-topic", "u"))
    feed._skipped(2)
    feed._skipped(1)
    assert [p for p in feed.problems if "skipped" in p] == [
        "3 records skipped: not what their topic's writer writes"
    ]


def test_a_quota_record_is_read_as_the_proxys_reader_reads_it() -> None:
    """One decoding for both: the entity named as the proxy names it, the value validated."""
    key = record_key([("ip", "0:0:0:0:0:0:0:1")], "connection_creation_rate")
    assert record_change(key, record_value(5.0)) == (
        QuotaEntity(ip="::1"), "connection_creation_rate", 5.0,
    )  # fmt: skip
    assert record_change(key, None)[2] is None  # removed
    for bad in ((None, record_value(5.0)), (key, record_value(-1.0))):
        with pytest.raises(ValueError):
            record_change(*bad)


def test_samples_are_read_back_the_span_and_one_sampling_interval(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text(CONFIG.replace("[usage]\n", "[usage]\ninterval_s = 30\n"))
    assert feed_for(options("--config", str(config))).read_back_s == 40.0
    named = ("--bootstrap-server", "kafka:9092", "--usage-topic", "u")
    assert feed_for(options(*named)).read_back_s == 20.0  # the default 10 s interval
    assert feed_for(options(*named, "--window-s", "5")).read_back_s == 5.0
