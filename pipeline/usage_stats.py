"""Per-window rates, their percentiles per principal, the top users of each quota, and the
recommended quotas: a high percentile of a principal's windows times a headroom.

A principal's percentiles are over the sampling windows in which it sent anything: a tenant
idle half the day should not have its quota halved. producer_ids_rate is per user and counts
ids per producer-id quota window (an hour by default), so its rate is taken per such window.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from protocol.apis import FETCH, PRODUCE, REQUEST_QUOTA_EXEMPT
from quotas.entities import QuotaType

#: each client quota's use in a window (a column of principal_windows), and the factor that
#: makes use per window millisecond the quota's unit: bytes/s, percent of a thread, per second
CLIENT_RATES: Mapping[str, tuple[str, float]] = {
    QuotaType.PRODUCE.key: ("produce_bytes", 1000.0),
    QuotaType.FETCH.key: ("fetch_bytes", 1000.0),
    QuotaType.REQUEST.key: ("request_time_ms", 100.0),
    QuotaType.CONTROLLER_MUTATION.key: ("mutations", 1000.0),
}
PRODUCER_IDS = QuotaType.PRODUCER_IDS.key
#: shorter windows (the edges of a proxy's run) are not rated
MIN_RATED_WINDOW_MS = 1000
QUANTILES = (0.5, 0.95, 0.99)


#: summed as they are from samples to windows, and from windows to principals
_TOTALS = (
    "requests",
    "throttle_time_ms",
    "throttled_requests",
    "mutations_rejected",
    "producer_ids_rejected",
)


def _sums() -> list[Column]:
    return [F.sum(name).alias(name) for name in _TOTALS]


def _sum_where(condition: Column, value: Column) -> Column:
    return F.sum(F.when(condition, value).otherwise(0))


def principal_windows(samples: DataFrame) -> DataFrame:
    """One row per (user, client_id, window): every API and every proxy summed (the proxies'
    windows line up on multiples of the interval), with each client quota's rate."""
    api = F.col("api_key")
    windows = samples.groupBy("user", "client_id", "window_start_ms").agg(
        F.max("window_ms").alias("window_ms"),
        F.count("*").alias("samples"),
        _sum_where(api == PRODUCE, F.col("bytes_in")).alias("produce_bytes"),
        _sum_where(api == FETCH, F.col("bytes_out")).alias("fetch_bytes"),
        _sum_where(~api.isin(*REQUEST_QUOTA_EXEMPT), F.col("request_time_ms")).alias(
            "request_time_ms"
        ),
        F.sum(F.col("mutations_admitted") + F.col("mutations_rejected")).alias("mutations"),
        F.sum(F.col("producer_ids_admitted") + F.col("producer_ids_rejected")).alias(
            "producer_ids"
        ),
        *_sums(),
        # the versions the window was summed from: two plain aggregates keep Spark's hash
        # aggregation (a set of them would sort all eight million windows)
        F.min("schema").alias("schema_min"),
        F.max("schema").alias("schema_max"),
    )
    windows = windows.where(F.col("window_ms") > 0)
    # a window cut short by a start or a stop is counted, but not rated: a few responses in
    # a few milliseconds would read as a burst nobody sent
    rated = F.col("window_ms") >= MIN_RATED_WINDOW_MS
    return windows.select(
        "*",
        *(
            F.when(rated, F.col(used) * factor / F.col("window_ms")).alias(key)
            for key, (used, factor) in CLIENT_RATES.items()
        ),
    )


def user_producer_id_windows(
    windows: DataFrame, producer_id_window_ms: int, start_ms: int, end_ms: int
) -> DataFrame:
    """New producer ids per user per producer-id window. A window the samples cover only in
    part (the first and the last, or all of a short run) is scaled to a whole one over the
    part the samples cover, not the part the user was active in."""
    width = producer_id_window_ms
    bucket = F.floor(F.col("window_start_ms") / width)
    per_bucket = windows.groupBy("user", bucket.alias("bucket")).agg(
        F.sum("producer_ids").alias("producer_ids")
    )
    covered = F.least(F.lit(end_ms), (F.col("bucket") + 1) * width) - F.greatest(
        F.lit(start_ms), F.col("bucket") * width
    )
    rate = F.col("producer_ids") * width / covered
    return per_bucket.where(F.col("producer_ids") > 0).select("user", rate.alias(PRODUCER_IDS))


def _sorted_active(key: str) -> Column:
    """A principal's active rates in order. Spark's own `percentile` keeps a map of counts
    per value and sorts it per group; a sorted list is the same data at half the time."""
    rate = F.col(key)
    return F.sort_array(F.collect_list(F.when(rate > 0, rate))).alias(f"{key}_sorted")


def _percentile(ordered: Column, quantile: float) -> Column:
    """Spark's `percentile` over an ordered list, operation for operation: the position
    (n - 1) x q, and linear interpolation between its two ranks unless they are one rank
    or one value (null for no values)."""
    n = F.size(ordered)
    position = (n - 1) * F.lit(quantile)
    lower, higher = F.floor(position), F.ceil(position)
    low = F.try_element_at(ordered, lower.cast("int") + 1)
    high = F.try_element_at(ordered, higher.cast("int") + 1)
    between = (higher - position) * low + (position - lower) * high
    return F.when(n > 0, F.when((lower == higher) | (low == high), low).otherwise(between))


def _percentiles(key: str, quantile: float) -> list[Column]:
    ordered = F.col(f"{key}_sorted")
    return [
        *(_percentile(ordered, q).alias(f"{key}_p{round(q * 100)}") for q in QUANTILES),
        F.try_element_at(ordered, F.lit(-1)).alias(f"{key}_max"),
        _percentile(ordered, quantile).alias(f"{key}_basis"),
    ]


def principal_stats(windows: DataFrame, quantile: float) -> DataFrame:
    """Per (user, client_id): windows seen, the percentiles of each client quota's rate over
    its active windows, and what the principal was throttled and refused."""
    # principals dealt to partitions first: a partition's list aggregation then holds a few
    # dozen principals and stays a hash aggregation (past 128 it sorts every window it has)
    lists = (
        windows.repartition("user", "client_id")
        .groupBy("user", "client_id")
        .agg(
            F.count("*").alias("windows"),
            *_sums(),
            *(_sorted_active(key) for key in CLIENT_RATES),
        )
    )
    return lists.select(
        "user",
        "client_id",
        "windows",
        *_TOTALS,
        *(column for key in CLIENT_RATES for column in _percentiles(key, quantile)),
    )


def user_stats(producer_id_windows: DataFrame, quantile: float) -> DataFrame:
    lists = producer_id_windows.groupBy("user").agg(_sorted_active(PRODUCER_IDS))
    return lists.select("user", *_percentiles(PRODUCER_IDS, quantile))


def offenders(stats: DataFrame, users: DataFrame, top: int) -> DataFrame:
    """The `top` heaviest principals of each quota, by the recommendation's percentile."""
    parts = [
        stats.where(F.col(f"{key}_basis") > 0).select(
            F.lit(key).alias("quota"),
            "user",
            "client_id",
            F.col(f"{key}_basis").alias("rate"),
            F.col(f"{key}_max").alias("max"),
            "throttle_time_ms",
        )
        for key in CLIENT_RATES
    ]
    parts.append(
        users.where(F.col(f"{PRODUCER_IDS}_basis") > 0).select(
            F.lit(PRODUCER_IDS).alias("quota"),
            "user",
            F.lit(None).cast("string").alias("client_id"),
            F.col(f"{PRODUCER_IDS}_basis").alias("rate"),
            F.col(f"{PRODUCER_IDS}_max").alias("max"),
            F.lit(None).cast("long").alias("throttle_time_ms"),
        )
    )
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    ranking = Window.partitionBy("quota").orderBy(F.desc("rate"), "user", "client_id")
    ranked = union.select("*", F.row_number().over(ranking).alias("rank"))
    return ranked.where(F.col("rank") <= top)


class Recommendation(NamedTuple):
    user: str
    client_id: str | None
    quota: str
    basis: float
    value: float


def recommend(value: float, key: str, headroom: float) -> float:
    """basis x headroom, rounded up: whole bytes for the byte rates (Kafka's LONG), three
    decimals for the others."""
    raw = value * headroom
    if key in (QuotaType.PRODUCE.key, QuotaType.FETCH.key):
        return float(max(math.ceil(raw), 1))
    return max(math.ceil(raw * 1000) / 1000, 0.001)


def recommendations(stats: DataFrame, users: DataFrame, headroom: float) -> list[Recommendation]:
    """Collected to the driver: one row per principal and quota it used."""
    found = []
    for row in stats.collect():
        for key in CLIENT_RATES:
            basis = row[f"{key}_basis"]
            if basis:
                found.append(
                    Recommendation(
                        row["user"], row["client_id"], key, basis, recommend(basis, key, headroom)
                    )
                )
    for row in users.collect():
        basis = row[f"{PRODUCER_IDS}_basis"]
        if basis:
            found.append(
                Recommendation(
                    row["user"], None, PRODUCER_IDS, basis, recommend(basis, PRODUCER_IDS, headroom)
                )
            )
    return found
