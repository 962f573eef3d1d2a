"""Each broker's ceilings as series (docs/ceilings.md, docs/monitoring.md): what is in force,
what the broker takes through this process, whether it sheds, and each principal's share."""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from quotas.ceilings import RATES, CeilingManager, Standing
from quotas.engine import QuotaEngine
from quotas.entities import PROXY_PREFIX, sanitize
from quotas.managers import UNLIMITED


def kind_of(manager: CeilingManager) -> str:
    """produce, fetch or request: the `ceiling` label."""
    return manager.quota_type.key.removeprefix(PROXY_PREFIX).removesuffix("_ceiling")


def class_of(standing: Standing) -> str:
    """exempt, guaranteed or best-effort: the `class` label."""
    if standing.exempt:
        return "exempt"
    return "guaranteed" if standing.floor else "best-effort"


def ceiling_families(engine: QuotaEngine, now_ms: int) -> Iterator[Metric]:
    scope = ["ceiling", "broker"]
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
            where = [kind, key]
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
