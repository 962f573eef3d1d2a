"""The report on made-up samples with known answers, in Spark's local mode."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from config.loader import load_config
from localkafka.chromium import open_page, screenshot
from localkafka.inprocess.samples import sample, write
from pipeline.report import ReportOptions, report
from pipeline.samples import SampleError, read_files
from protocol.apis import CREATE_TOPICS, FETCH, PRODUCE, SASL_AUTHENTICATE
from quotas.entities import QuotaEntity, QuotaType

CONFIG = """
[proxy]
bootstrap_port = 19192
[broker]
producer.id.quota.window.size.seconds = 60
[clients."<default>"]
request_percentage = 50
"""


def samples() -> list:  # type: ignore[type-arg]
    made = []
    # alice/ramp: 100 B/s more each window, 100 .. 10000 B/s
    made += [sample("alice", "ramp", PRODUCE, i, bytes_in=1000 * i) for i in range(1, 101)]
    # alice/app: 8000 B/s, through two proxies at once
    for proxy in ("proxy-1", "proxy-2"):
        made += [
            sample("alice", "app", PRODUCE, i, proxy=proxy, bytes_in=40_000) for i in range(30)
        ]
    # bob/batch: 5000 B/s fetched with 500 ms of request time per window, 9 s of SASL time
    # (exempt from request_percentage), and one window creating 30 partitions, 10 refused
    made += [
        sample("bob", "batch", FETCH, i, bytes_out=50_000, request_time_ms=500.0) for i in range(30)
    ]
    made += [
        sample("bob", "batch", SASL_AUTHENTICATE, i, request_time_ms=9000.0) for i in range(30)
    ]
    made.append(
        sample("bob", "batch", CREATE_TOPICS, 5, mutations_admitted=20, mutations_rejected=10)
    )
    # carol: one new producer id per window, 6 per 60-s producer-id window
    made += [
        sample("carol", "ids", PRODUCE, i, bytes_in=100, producer_ids_admitted=1) for i in range(12)
    ]
    # dave: 5 new ids in one window and none in the rest of its producer-id window
    made.append(sample("dave", "burst", PRODUCE, 20, bytes_in=100, producer_ids_admitted=5))
    # erin: 1000 B/s, and a 200-ms window (a proxy's stop) whose 50 kB would read as 250 kB/s
    made += [sample("erin", "edge", PRODUCE, i, bytes_in=10_000) for i in range(10)]
    made.append(sample("erin", "edge", PRODUCE, 10, window_ms=200, bytes_in=50_000))
    return made


def arguments(tmp: Path, out: str, quotas: Path | None = None) -> ReportOptions:
    config = tmp / "proxy.toml"
    config.write_text(CONFIG)
    return ReportOptions(
        out=tmp / out,
        config=config,
        quotas=quotas,
        percentile=0.99,
        headroom=1.5,
        top=2,
        charts=50,
    )


def run_report(
    spark: SparkSession, samples_dir: Path, args: ReportOptions, candidate: Path | None = None
) -> None:
    """The job on these samples, with the settings of the proxy's config in `args`."""
    assert args.config is not None
    settings = load_config(args.config).quotas.settings
    quotas = load_config(candidate).quotas if candidate is not None else None
    report(spark, read_files(spark, [str(samples_dir)]), args, settings, quotas)


@pytest.fixture(scope="module")
def reported(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    write(tmp / "samples" / "usage-a.jsonl", samples())
    args = arguments(tmp, "out")
    run_report(spark, tmp / "samples", args)
    return tmp


def principals(spark: SparkSession, out: Path) -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
    rows = spark.read.parquet(str(out / "principals")).collect()
    return {(row["user"], row["client_id"]): row.asDict() for row in rows}


def test_percentiles_are_exact_over_each_principals_windows(
    spark: SparkSession, reported: Path
) -> None:
    stats = principals(spark, reported / "out")
    ramp = stats[("alice", "ramp")]
    # Spark's percentile interpolates between ranks: p95 of 100..10000 is 9500 + 0.05 x 100
    assert [ramp[f"producer_byte_rate_{p}"] for p in ("p50", "p95", "p99", "max")] == [
        5050.0, 9505.0, 9901.0, 10000.0,
    ]  # fmt: skip
    assert stats[("alice", "app")]["producer_byte_rate_p99"] == 8000.0  # both proxies summed
    bob = stats[("bob", "batch")]
    assert bob["consumer_byte_rate_p50"] == 5000.0
    assert bob["request_percentage_p99"] == 5.0  # SASL time is not request time
    assert bob["controller_mutation_rate_p99"] == 3.0  # its one active window
    assert bob["windows"] == 30 and bob["mutations_rejected"] == 10
    erin = stats[("erin", "edge")]
    assert (erin["windows"], erin["producer_byte_rate_max"]) == (11, 1000.0)  # counted, not rated


def test_the_recommended_quota_file_loads_with_the_current_settings_kept(reported: Path) -> None:
    config = load_config(reported / "out" / "quotas.toml")
    limits = config.quotas.limits
    assert config.proxy.bootstrap_port == 19192
    assert config.quotas.settings.producer_ids.window_ms == 60_000
    assert limits[QuotaType.PRODUCE][QuotaEntity("alice", "ramp")] == 14852  # 9901 x 1.5, up
    assert limits[QuotaType.PRODUCE][QuotaEntity("alice", "app")] == 12000
    assert limits[QuotaType.FETCH][QuotaEntity("bob", "batch")] == 7500
    assert limits[QuotaType.REQUEST][QuotaEntity("bob", "batch")] == 7.5
    assert limits[QuotaType.CONTROLLER_MUTATION][QuotaEntity("bob", "batch")] == 4.5
    assert limits[QuotaType.PRODUCER_IDS][QuotaEntity("carol")] == 9.0  # 6 per window x 1.5
    # 5 in a producer-id window the samples cover whole, not 5 in 10 s scaled to 60 s
    assert limits[QuotaType.PRODUCER_IDS][QuotaEntity("dave")] == 7.5
    assert limits[QuotaType.REQUEST][QuotaEntity(client_id="<default>")] == 50  # kept


def test_offenders_rank_the_heaviest_principals_of_each_quota(
    spark: SparkSession, reported: Path
) -> None:
    rows = (
        spark.read.parquet(str(reported / "out" / "offenders")).orderBy("quota", "rank").collect()
    )
    ranked = [(r["quota"], r["rank"], r["user"], r["client_id"], r["rate"]) for r in rows]
    assert [r for r in ranked if r[0] == "producer_byte_rate"] == [
        ("producer_byte_rate", 1, "alice", "ramp", 9901.0),
        ("producer_byte_rate", 2, "alice", "app", 8000.0),
    ]
    assert ("producer_ids_rate", 1, "carol", None, 6.0) in ranked


def test_the_recommended_quotas_throttle_nobody_in_the_what_if(
    spark: SparkSession, reported: Path
) -> None:
    rows = spark.read.parquet(str(reported / "out" / "what_if")).collect()
    app = [r for r in rows if (r["client_id"], r["quota"]) == ("app", "producer_byte_rate")]
    assert [(r["windows"], r["throttled_windows"]) for r in app] == [(30, 0)]
    ramp = next(r for r in rows if r["client_id"] == "ramp")
    assert (ramp["windows"], ramp["throttled_windows"]) == (100, 0)  # 10000 B/s < 14852


def test_a_candidate_quota_file_is_replayed_exactly(spark: SparkSession, reported: Path) -> None:
    """8000 B/s against 5000 B/s: every window throttled, 294 of its 300 seconds' bytes
    (tests/unit/pipeline/test_whatif.py derives the number from Kafka's rate)."""
    candidate = reported / "candidate.toml"
    candidate.write_text("[users.alice.clients.app]\nproducer_byte_rate = 5000\n")
    args = arguments(reported, "what-if", candidate)
    run_report(spark, reported / "samples", args, candidate)
    [row] = spark.read.parquet(str(reported / "what-if" / "what_if")).collect()
    assert (row["user"], row["client_id"], row["windows"], row["throttled_windows"]) == (
        "alice",
        "app",
        30,
        30,
    )
    assert row["throttled"] / row["used"] == pytest.approx(294 / 300)
    # the page leads with it: the one throttled principal, ranked and charted first
    page = (reported / "what-if" / "report.html").read_text()
    throttled = re.search(r'<table class="throttled">.*?</table>', page, re.S)
    assert throttled is not None and throttled.group().count("<tr>") == 2
    assert "<td>1</td><td>alice</td><td>app</td><td>producer_byte_rate</td>" in throttled.group()
    first = re.search(
        r'<section class="principal" data-user="([^"]*)" data-client-id="([^"]*)"', page
    )
    assert first is not None and first.groups() == ("alice", "app")
    assert page.index('id="cluster"') < page.index('id="throttled"') < page.index('id="charts"')


def test_the_html_report_has_a_chart_per_principal(reported: Path) -> None:
    page = (reported / "out" / "report.html").read_text()
    sections = re.findall(r'<section class="principal"[^>]*>.*?</section>', page, re.S)
    assert len(sections) == 6 and all("<svg" in section for section in sections)
    assert "http" not in page.replace("http://www.w3.org", "")  # nothing fetched


def test_samples_of_an_unknown_schema_version_are_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    write(tmp_path / "s" / "usage.jsonl", [sample("a", "b", PRODUCE, 1, schema=5, bytes_in=1)])
    args = arguments(tmp_path, "out")
    with pytest.raises(SampleError, match="version 5: this report reads versions 1, 2, 3, 4"):
        run_report(spark, tmp_path / "s", args)


def test_the_report_opens_in_headless_chromium_with_every_chart_visible(
    reported: Path, tmp_path: Path
) -> None:
    page = reported / "out" / "report.html"
    opened = open_page(page, tmp_path)
    # six principals and the cluster's chart; one throttled under the recommended quotas:
    # erin's 200-ms window of 50 kB, never rated, is over any quota its other windows set
    assert (opened.charts_visible, opened.throttled_rows) == (7, 1)
    assert opened.everyone_rows >= 6
    shot = screenshot(page, tmp_path)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
