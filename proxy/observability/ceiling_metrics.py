"""Each broker's ceilings and the disk guard's as series (docs/ceilings.md,
docs/monitoring.md): what is in force, what the broker (or the log directory, `log_dir`)
takes through this process, whether it sheds, and each principal's share."""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from quotas.ceilings import RATES, CeilingManager, Standing
from quotas.engine import QuotaEngine
from quotas.entities import PROXY_PREFIX, sanitize
from quotas.managers import UNLIMITED


def kind_of(manager: CeilingManager) -> str:
    """produce, fetch, request or disk_guard: the `ceiling` label."""
    return manager.quota_type.key.removeprefix(PROXY_PREFIX).removesuffix("_ceiling")


def class_of(standing: Standing) -> str:
    """exempt, guaranteed or best-effort: the `class` label."""
    if standing.exempt:
        return "exempt"
    return "guaranteed" if standing.floor else "best-effort"


def ceiling_families(engine: QuotaEngine, now_ms: int) -> Iterator[Metric]:
    scope = ["ceiling", "broker", "log_dir"]
    principal = [*scope, "user", "client_id", "class"]
    limit = GaugeMetricFamily(
        "kafka_quota_proxy_ceiling",
        "A broker's ceiling in force: bytes per second (produce, fetch) or requests per second",
        labels=scope,
    )
    rate = GaugeMetricFamily(
        "kafka_quota_proxy_ceiling_rate",
        "What every principal together sent the broker (or read from it) through this process, "
        "per second, over the last seconds",
        labels=scope,
    )
    shedding = GaugeMetricFamily(
        "kafka_quota_proxy_ceiling_shedding",
        "1 while the broker's ceiling holds principals to their shares, 0 while it holds nobody",
        labels=scope,
    )
    allowance = GaugeMetricFamily(
        "kafka_quota_proxy_ceiling_allowance",
        "A principal's share of the broker while its ceiling sheds, per second",
        labels=principal,
    )
    used = GaugeMetricFamily(
        "kafka_quota_proxy_ceiling_principal_rate",
        "What a principal sent the broker (or read from it) through this process, per second",
        labels=principal,
    )
    throttles = CounterMetricFamily(
        "kafka_quota_proxy_ceiling_throttles",
        "Responses whose largest throttle was the broker's ceiling (the client held for it)",
        labels=principal,
    )
    shadow = CounterMetricFamily(
        "kafka_quota_proxy_ceiling_shadow_throttles",
        "Throttles the broker's ceiling decided in shadow mode, not applied",
        labels=principal,
    )
    for manager in engine.ceilings():
        kind = kind_of(manager)
        for key, ceiling in manager.scopes():
            # a broker's ceiling is named by its node id, a log directory's by both
            broker, _, log_dir = key.partition(":")
            where = [kind, broker, log_dir]
            limit.add_metric(where, ceiling.limit)
            rate.add_metric(where, ceiling.total.measure(RATES, now_ms))
            shedding.add_metric(where, 0.0 if math.isinf(ceiling.level) else 1.0)
            for sensors, standing in list(ceiling.shares.values()):
                user, client_id = sensors.tags
                values = [*where, sanitize(user), client_id, class_of(standing)]
                used.add_metric(values, sensors.rate.measure(RATES, now_ms))
                if sensors.limit != UNLIMITED:
                    allowance.add_metric(values, sensors.limit)
                throttles.add_metric(values, sensors.throttles)
                shadow.add_metric(values, sensors.shadow_throttles)
    yield from (limit, rate, shedding, allowance, used, throttles, shadow)
    yield from _disk_families(engine, now_ms)


def _disk_families(engine: QuotaEngine, now_ms: int) -> Iterator[Metric]:
    """What the disk guard last read of each log directory, and which brokers it could not
    read for stale_after_s ([guards.disk])."""
    guard = engine.disk.guard
    where = ["broker", "log_dir"]
    usable = GaugeMetricFamily(
        "kafka_quota_proxy_disk_usable_bytes",
        "A log directory's volume's usable bytes, as its broker last described them",
        labels=where,
    )
    total = GaugeMetricFamily(
        "kafka_quota_proxy_disk_total_bytes",
        "A log directory's volume's size, as its broker last described it",
        labels=where,
    )
    stale = GaugeMetricFamily(
        "kafka_quota_proxy_disk_guard_stale",
        "1 while a broker's log directories have not been read for [guards.disk] "
        "stale_after_s: its directories keep the guard's last decisions",
        labels=["broker"],
    )
    guarded = GaugeMetricFamily(
        "kafka_quota_proxy_disk_guarded",
        "1 while a log directory is under its broker's soft limit and its writers are held "
        '(the ceiling, kafka_quota_proxy_ceiling{ceiling="disk_guard"})',
        labels=where,
    )
    for directory, reading in list(guard.readings.items()):
        broker, _, log_dir = directory.partition(":")
        usable.add_metric([broker, log_dir], reading.usable_bytes)
        total.add_metric([broker, log_dir], reading.total_bytes)
        guarded.add_metric([broker, log_dir], 1.0 if directory in guard.guarded else 0.0)
    stale_now = set(guard.stale(now_ms))
    for node_id in list(guard.read_ms):
        stale.add_metric([str(node_id)], 1.0 if node_id in stale_now else 0.0)
    yield from (usable, total, guarded, stale)
