"""The report page's model from the report's tables: the principals charted and listed, the
cluster's totals per quota, the throttled and the offenders, as pipeline/html.py renders them.

Kept apart from pipeline/report.py, which runs the job's stages and writes its files, so the
page's content can change without reading the job, and the other way round.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.html import PrincipalChart, QuotaTotal, Throttled
from pipeline.usage_stats import (
    CLIENT_RATES,
    PRODUCER_IDS,
)
from pipeline.whatif import WhatIf, throttled_seconds
from quotas.engine import QuotaEngine
from quotas.entities import QUOTA_KEYS
from quotas.managers import UNLIMITED
from quotas.settings import QuotaConfig, QuotaSettings

#: points per principal's chart: a day of 10-s windows is drawn from its peaks in buckets
_CHART_POINTS = 240


def principal_charts(
    stats: DataFrame, what_if: DataFrame, config: QuotaConfig
) -> tuple[list[PrincipalChart], list[Throttled]]:
    """Every principal with its percentiles, quotas and what-if, in the page's order: those
    the what-if throttled, most first, then the rest by their p99 as a share of their quota
    (the next to reach it); and the throttled ranking itself."""
    engine = QuotaEngine(config)
    results = [WhatIf(*row) for row in what_if.collect()]
    throttled = sorted(
        (Throttled(r, throttled_seconds(r, engine)) for r in results if r.throttled_windows),
        key=lambda t: (-t.seconds, t.result.user, t.result.client_id, t.result.quota),
    )
    shares: dict[tuple[str, str], dict[str, tuple[float, float]]] = defaultdict(dict)
    for r in results:
        shares[(r.user, r.client_id)][r.quota] = (
            r.throttled_windows / r.windows if r.windows else 0.0,
            r.throttled / r.used if r.used else 0.0,
        )
    principals = []
    for row in stats.collect():
        principal = (row["user"], row["client_id"])
        limits = {}
        for key in (*CLIENT_RATES, PRODUCER_IDS):
            limit = engine.manager(QUOTA_KEYS[key]).sensors_for(*principal, 0).limit
            if limit != UNLIMITED:
                limits[key] = limit
        percentiles = {
            key: (row[f"{key}_p50"], row[f"{key}_p95"], row[f"{key}_p99"], row[f"{key}_max"])
            for key in CLIENT_RATES
            if row[f"{key}_max"]
        }
        principals.append(
            PrincipalChart(
                *principal,
                series={},
                limits=limits,
                what_if=shares.get(principal, {}),
                percentiles=percentiles,
            )
        )
    rank: dict[tuple[str, str], int] = {}
    for found in throttled:
        rank.setdefault((found.result.user, found.result.client_id), len(rank))

    def order(chart: PrincipalChart) -> tuple[int, float, str, str]:
        nearest = max(
            (
                p99 / chart.limits[key]
                for key, (_, _, p99, _) in chart.percentiles.items()
                if key in chart.limits
            ),
            default=0.0,
        )
        return (
            rank.get((chart.user, chart.client_id), len(rank)),
            -nearest,
            chart.user,
            chart.client_id,
        )

    return sorted(principals, key=order), throttled


def _chart_buckets(span: tuple[int, int]) -> tuple[int, Column]:
    """The span cut into _CHART_POINTS buckets: their width, and each window's bucket."""
    start, end = span
    bucket_ms = max((end - start) // _CHART_POINTS, 1)
    return bucket_ms, F.floor((F.col("window_start_ms") - start) / bucket_ms)


def with_series(
    spark: SparkSession, windows: DataFrame, charted: list[PrincipalChart], span: tuple[int, int]
) -> list[PrincipalChart]:
    """The charted principals with their peaks per chart bucket, read for them alone."""
    if not charted:
        return []
    _, bucket = _chart_buckets(span)
    chosen = spark.createDataFrame(
        [(c.user, c.client_id) for c in charted], "user string, client_id string"
    )
    peaks = (
        windows.join(F.broadcast(chosen), ["user", "client_id"])
        .groupBy("user", "client_id", bucket.alias("bucket"))
        .agg(F.min("window_start_ms").alias("t"), *(F.max(key).alias(key) for key in CLIENT_RATES))
    )
    series: dict[tuple[str, str], dict[str, list[tuple[int, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in peaks.orderBy("t").collect():
        for key in CLIENT_RATES:
            if row[key] is not None:  # None: only windows too short to rate
                series[(row["user"], row["client_id"])][key].append((row["t"], row[key]))
    return [replace(c, series=series.get((c.user, c.client_id), {})) for c in charted]


def cluster_totals(
    windows: DataFrame,
    stats: DataFrame,
    users: DataFrame,
    throttled: list[Throttled],
    settings: QuotaSettings,
    span: tuple[int, int],
) -> list[QuotaTotal]:
    """Each quota's use summed over the cluster, per chart bucket, in the quota's unit."""
    start, _ = span
    bucket_ms, bucket = _chart_buckets(span)
    # use per window millisecond -> the quota's rate (producer ids: per producer-id window)
    factors = {key: factor for key, (_, factor) in CLIENT_RATES.items()}
    factors[PRODUCER_IDS] = float(settings.producer_ids.window_ms)
    used = {key: column for key, (column, _) in CLIENT_RATES.items()}
    used[PRODUCER_IDS] = "producer_ids"
    rows = (
        windows.groupBy(bucket.alias("bucket"))
        .agg(*(F.sum(column).alias(key) for key, column in used.items()))
        .orderBy("bucket")
        .collect()
    )
    active = stats.agg(
        *(F.count(f"{key}_max").alias(key) for key in CLIENT_RATES),
    ).first()
    id_users = users.agg(F.count(f"{PRODUCER_IDS}_max").alias(PRODUCER_IDS)).first()
    assert active is not None and id_users is not None  # a global aggregate has its one row
    totals = []
    for key in used:
        series = [
            (start + row["bucket"] * bucket_ms, row[key] * factors[key] / bucket_ms) for row in rows
        ]
        hit = [t.result for t in throttled if t.result.quota == key]
        totals.append(
            QuotaTotal(
                key,
                float(sum(row[key] for row in rows)),
                series,
                int((id_users if key == PRODUCER_IDS else active)[key]),
                float(sum(r.throttled for r in hit)),
                len(hit),
            )
        )
    return totals


def offender_lists(ranked: DataFrame) -> dict[str, list[tuple[str, str, float]]]:
    lists: dict[str, list[tuple[str, str, float]]] = defaultdict(list)
    for row in ranked.orderBy("quota", "rank").collect():
        lists[row["quota"]].append((row["user"], row["client_id"], row["rate"]))
    return lists
