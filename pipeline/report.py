"""`kafka-quota-proxy report`: usage samples in; Parquet tables, an HTML report, the
recommended quota file and the what-if out.

Spark runs in local mode (local[*]) unless --master names a cluster; the same code runs on
both, and spark-submit can run this module (docs/usage-reports.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from config.errors import ConfigError
from config.loader import load_config
from config.quota_file import HEADER_MARK, quota_file
from pipeline.html import clock, render
from pipeline.page import cluster_totals, offender_lists, principal_charts, with_series
from pipeline.samples import SampleError, check_versions, read_files, read_kafka
from pipeline.usage_stats import (
    Recommendation,
    offenders,
    principal_stats,
    principal_windows,
    recommendations,
    user_producer_id_windows,
    user_stats,
)
from pipeline.whatif import PrincipalWindow, replay_columns
from quotas.settings import QuotaConfig, QuotaSettings

log = logging.getLogger("kafka-quota-proxy.report")

#: Spark's Kafka source for this pyspark, fetched by Spark when no --jars are given
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
#: the what-if's Arrow types as Spark names them
_SPARK_TYPE = {pa.string(): "string", pa.float64(): "double", pa.int64(): "long"}


@dataclass(frozen=True)
class ReportOptions:
    """What one report is asked for: the command's flags (add_arguments), or a caller's own
    choice, with the same defaults."""

    out: Path = Path("usage-report")
    #: sample files or directories (None: usage-samples, the proxy's default)
    samples: Sequence[str] | None = None
    kafka_bootstrap_servers: str | None = None
    #: read the samples from this topic instead of files
    kafka_topic: str | None = None
    #: local jars of Spark's Kafka source (None: Spark fetches KAFKA_PACKAGE)
    jars: str | None = None
    #: the proxy's config: its windows, settings and entities
    config: Path | None = None
    #: a config whose quotas the what-if applies instead of the recommended ones
    quotas: Path | None = None
    percentile: float = 0.99
    headroom: float = 1.5
    #: offenders listed per quota
    top: int = 10
    #: principals charted, the throttled first
    charts: int = 50
    master: str | None = None
    #: Spark settings, KEY=VALUE
    conf: Sequence[str] = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ReportOptions:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in vars(args).items() if k in names and v is not None})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_argument_group("samples")
    source.add_argument(
        "--samples",
        action="append",
        metavar="PATH",
        help="sample files or directories (default: usage-samples, the proxy's default)",
    )
    source.add_argument("--kafka-bootstrap-servers", metavar="HOST:PORT[,...]")
    source.add_argument("--kafka-topic", help="read the samples from this topic instead")
    source.add_argument(
        "--jars",
        help="comma-separated local jars of Spark's Kafka source (default: Spark fetches "
        f"{KAFKA_PACKAGE.format(version='<pyspark version>')} from Maven Central)",
    )
    parser.add_argument("--out", type=Path, default=Path("usage-report"), help="output directory")
    parser.add_argument(
        "--config",
        type=Path,
        help="the proxy's config: its windows are used and its settings and entities kept in "
        "the recommended quota file",
    )
    parser.add_argument(
        "--quotas",
        type=Path,
        help="a config file whose quotas the what-if applies instead of the recommended ones",
    )
    parser.add_argument("--percentile", type=float, default=0.99, help="default 0.99")
    parser.add_argument("--headroom", type=float, default=1.5, help="default 1.5")
    parser.add_argument("--top", type=int, default=10, help="offenders listed per quota")
    parser.add_argument(
        "--charts",
        type=int,
        default=50,
        metavar="N",
        help="principals charted, the throttled first (default 50; every principal is in the "
        "page's table)",
    )
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )


def session(args: ReportOptions) -> SparkSession:
    import pyspark

    # the what-if runs the project's quota code in Spark's Python workers: by default they
    # run this interpreter, which has the project installed (a cluster's workers need it too)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("kafka-quota-proxy report")
    if args.master or not os.environ.get("SPARK_ENV_LOADED"):  # spark-submit sets its own
        master = args.master or "local[*]"
        builder = builder.master(master)
        if master.startswith("local"):  # nothing outside this host need reach the driver
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = builder.config("spark.driver.host", "127.0.0.1").config(
                "spark.driver.bindAddress", "127.0.0.1"
            )
    builder = builder.config("spark.ui.showConsoleProgress", "true").config(
        "spark.sql.shuffle.partitions", "16"
    )
    if args.kafka_topic:
        if args.jars:
            builder = builder.config("spark.jars", args.jars)
        else:
            package = KAFKA_PACKAGE.format(version=pyspark.__version__)
            builder = builder.config("spark.jars.packages", package)
    for setting in args.conf:
        key, _, value = setting.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run(namespace: argparse.Namespace) -> int:
    args = ReportOptions.from_args(namespace)
    for name, value, low, high in (
        ("--percentile", args.percentile, 0.0, 1.0),
        ("--headroom", args.headroom, 0.0, float("inf")),
        ("--charts", args.charts, -1, float("inf")),
    ):
        if not (low < value <= high):
            print(f"kafka-quota-proxy report: {name} must be in ({low}, {high}]", file=sys.stderr)
            return 2
    try:
        current = load_config(args.config) if args.config else None
        candidate = load_config(args.quotas) if args.quotas else None
    except ConfigError as exc:
        print(exc.report("kafka-quota-proxy report"), file=sys.stderr)
        return 2
    settings = current.quotas.settings if current else QuotaSettings()
    spark = session(args)
    try:
        samples = _read(spark, args)
        written = report(spark, samples, args, settings, candidate.quotas if candidate else None)
    except SampleError as exc:
        print(f"kafka-quota-proxy report: {exc}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    for line in written:
        print(line)
    return 0


def _read(spark: SparkSession, args: ReportOptions) -> DataFrame:
    if args.kafka_topic:
        if not args.kafka_bootstrap_servers:
            raise SampleError("--kafka-topic needs --kafka-bootstrap-servers")
        return read_kafka(spark, args.kafka_bootstrap_servers, args.kafka_topic, {})
    paths = args.samples or ["usage-samples"]
    missing = [path for path in paths if not Path(path).exists()]
    if missing:
        raise SampleError(f"no samples at {', '.join(missing)}")
    return read_files(spark, paths)


def report(
    spark: SparkSession,
    samples: DataFrame,
    args: ReportOptions,
    settings: QuotaSettings,
    candidate: QuotaConfig | None,
) -> list[str]:
    """Compute and write everything; returns what was written, a line each."""
    out: Path = args.out
    stages = Stages()
    with stages("read and aggregate the samples into windows"):
        windows, totals = _windows_table(spark, samples, out)
    with stages("percentiles and recommended quotas"):
        id_windows = user_producer_id_windows(
            windows, settings.producer_ids.window_ms, totals["start"], totals["end"]
        )
        stats = principal_stats(windows, args.percentile).cache()
        users = user_stats(id_windows, args.percentile).cache()
        recommended = recommendations(stats, users, args.headroom)
        quotas_path = out / "quotas.toml"
        quotas_path.write_text(
            quota_file(
                _by_entity(recommended),
                args.config,
                f"{HEADER_MARK}: p{args.percentile * 100:g} of each "
                f"principal's windows x {args.headroom:g}\n(from "
                f"{totals['samples']} samples, {_span(totals['start'], totals['end'])})",
            )
        )
    try:
        applied = candidate or load_config(quotas_path).quotas
    except ConfigError as exc:  # a bug, not the user's: say which file
        raise SampleError(f"the recommended quota file does not load: {exc}") from exc
    with stages("what-if: every window replayed under the quotas"):
        _what_if(spark, windows, applied).write.mode("overwrite").parquet(str(out / "what_if"))
        what_if = spark.read.parquet(str(out / "what_if"))
    with stages("Parquet tables"):
        stats.write.mode("overwrite").parquet(str(out / "principals"))
        users.write.mode("overwrite").parquet(str(out / "users"))
        ranked = offenders(stats, users, args.top).cache()
        ranked.write.mode("overwrite").parquet(str(out / "offenders"))
    summary = [
        ("samples", str(totals["samples"])),
        ("principals", str(stats.count())),
        ("span", _span(totals["start"], totals["end"])),
        ("recommendation", f"p{args.percentile * 100:g} x {args.headroom:g}"),
        ("what-if quotas", str(args.quotas) if args.quotas else str(quotas_path)),
    ]
    with stages("report page"):
        span = (totals["start"], totals["end"])
        principals, throttled = principal_charts(stats, what_if, applied)
        page = render(
            with_series(spark, windows, principals[: args.charts], span)
            + principals[args.charts :],
            summary,
            offender_lists(ranked),
            cluster_totals(windows, stats, users, throttled, settings, span),
            throttled,
            span,
            args.charts,
        )
        (out / "report.html").write_text(page, encoding="utf-8")
    tables = ("windows", "principals", "users", "offenders", "what_if")
    return [
        f"principals: {summary[1][1]}, samples: {totals['samples']}",
        f"recommended quotas: {quotas_path}",
        f"report: {out / 'report.html'}",
        f"Parquet tables: {', '.join(str(out / table) for table in tables)}",
    ]


class Stages:
    """A line on stderr as each stage ends, with its time: Spark's own progress bar shows a
    stage's tasks, not which part of the report they are, nor where the time went."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        now = time.monotonic()
        print(
            f"report: {name}: {now - started:.1f} s (at {now - self.started:.1f} s)",
            file=sys.stderr,
            flush=True,
        )


def _windows_table(spark: SparkSession, samples: DataFrame, out: Path) -> tuple[DataFrame, Row]:
    """The windows, written as the `windows` table and read back from it, with their totals:
    every later stage reads them, and Parquet takes a fifth of the time of Spark's in-memory
    cache of eight million rows. They are staged beside the table until their schema
    versions are known to be readable, so bad samples leave an earlier report whole."""
    out.mkdir(parents=True, exist_ok=True)
    staged, table = out / "windows.partial", out / "windows"
    principal_windows(samples).write.mode("overwrite").parquet(str(staged))
    totals = (
        spark.read.parquet(str(staged))
        .agg(
            F.count("*").alias("windows"),
            F.sum("samples").alias("samples"),
            F.min("window_start_ms").alias("start"),
            F.max(F.col("window_start_ms") + F.col("window_ms")).alias("end"),
            F.array_union(F.collect_set("schema_min"), F.collect_set("schema_max")).alias(
                "schemas"
            ),
        )
        .first()
    )
    try:
        if totals is None or not totals["windows"]:
            raise SampleError("no usage samples found")
        check_versions(totals["schemas"])
    except SampleError:
        shutil.rmtree(staged)
        raise
    shutil.rmtree(table, ignore_errors=True)
    staged.rename(table)
    return spark.read.parquet(str(table)), totals


def _span(start: int, end: int) -> str:
    return f"{clock(start)} + {(end - start) / 1000:g} s"


def _by_entity(found: Iterable[Recommendation]) -> dict[tuple[str, str | None], dict[str, float]]:
    entities: dict[tuple[str, str | None], dict[str, float]] = defaultdict(dict)
    for rec in found:
        entities[(rec.user, rec.client_id)][rec.quota] = rec.value
    return entities


def _what_if(spark: SparkSession, windows: DataFrame, config: QuotaConfig) -> DataFrame:
    """The users' windows replayed (pipeline/whatif.py), in one group of users per core: a
    group goes to Python as Arrow columns, never a Python object per window, and its sensors
    advance in lockstep, so a step's cost is shared by every sensor of the group (a partition
    per group: grouping by a key could put two groups in one task, and leave a core idle)."""
    columns = ["user", *PrincipalWindow._fields]
    schema = pa.schema(
        [
            ("user", pa.string()),
            ("client_id", pa.string()),
            ("quota", pa.string()),
            ("limit", pa.float64()),
            ("windows", pa.int64()),
            ("throttled_windows", pa.int64()),
            ("used", pa.float64()),
            ("throttled", pa.float64()),
        ]
    )

    def replayed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = list(batches)
        results = []
        if parts:  # a partition no user hashed to has none
            group = pa.Table.from_batches(parts)
            results = replay_columns({name: group.column(name) for name in columns}, config)
        if results:
            yield pa.RecordBatch.from_arrays(
                [pa.array(values) for values in zip(*results, strict=True)], schema=schema
            )

    groups = spark.sparkContext.defaultParallelism
    spark_schema = ", ".join(f"{field.name} {_SPARK_TYPE[field.type]}" for field in schema)
    return windows.select(*columns).repartition(groups, "user").mapInArrow(replayed, spark_schema)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kafka-quota-proxy report")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
