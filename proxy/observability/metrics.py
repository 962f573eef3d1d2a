"""Prometheus metrics named after Kafka's quota metrics, read on the event loop.

Values are read from the quota sensors at scrape time, as a JMX read of a broker does, so
the hot path pays nothing for metrics and a series disappears with its expired sensor. The
scrape runs on the event loop thread (not prometheus-client's own HTTP thread) because
measuring a sensor purges its samples and must not race the requests that record into it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.observability.build_info import BuildInfo
from proxy.observability.ceiling_metrics import ceiling_families
from proxy.runtime.counters import FleetStats, ProxyStats
from proxy.runtime.memory_pool import MemoryPool
from quotas.engine import QuotaEngine
from quotas.entities import MetricTags, QuotaType, sanitize
from quotas.managers import UNLIMITED, QuotaManager
from quotas.principal_connections import PrincipalConnections

log = logging.getLogger(__name__)

#: a fleet member's local rates: (manager, metric tags, rate) of each shared sensor
LocalRates = Callable[[], Iterator[tuple[QuotaManager, MetricTags, float]]]


def metric_name(group: str, name: str) -> str:
    """kafka.server:type=Produce,... byte-rate -> kafka_server_produce_byte_rate."""
    return f"kafka_server_{group.lower()}_{name.replace('-', '_')}"


class QuotaCollector(Collector):
    def __init__(
        self,
        engine: Callable[[], QuotaEngine],
        now_ms: Callable[[], int],
        stats: ProxyStats,
        active_connections: Callable[[], int],
        listeners: Callable[[], Mapping[str, bool]] = dict,
        pool: MemoryPool | None = None,
        local_rates: LocalRates | None = None,
    ) -> None:
        self._engine = engine
        self._now_ms = now_ms
        self._stats = stats
        self._active_connections = active_connections
        #: listener name -> whether it accepts now (False while its upstream is unreachable)
        self._listeners = listeners
        self._pool = pool
        #: in a fleet: each shared sensor's rate of the use charged in this process alone
        self._local_rates = local_rates

    def collect(self) -> Iterator[Metric]:
        now_ms = self._now_ms()
        families: dict[str, GaugeMetricFamily] = {}
        shadow = CounterMetricFamily(
            "kafka_quota_proxy_shadow_throttles",
            "Throttles decided but not applied, for quotas in shadow mode ([enforcement])",
            labels=["quota", "user", "client_id"],
        )
        throttles = CounterMetricFamily(
            "kafka_quota_proxy_throttles",
            "Responses that carried a throttle (throttle_time_ms > 0, applied: the client held "
            "for it), by the quota type whose decision was the largest; shadow mode's "
            "decisions are not applied, so never here",
            labels=["quota", "user", "client_id"],
        )
        limits = GaugeMetricFamily(
            "kafka_quota_proxy_quota_limit",
            "The quota in force, in the unit of Kafka's rate metric beside it (per second; "
            "producer_ids_rate's window made a second)",
            labels=["quota", "user", "client_id"],
        )
        dropped = CounterMetricFamily(
            "kafka_quota_proxy_dropped_produce_requests",
            "acks=0 Produce requests refused for an unseen producer id over producer_ids_rate",
            labels=["user"],
        )
        for manager in self._engine().managers():
            group = manager.quota_type.group
            per_user = manager.quota_type is QuotaType.PRODUCER_IDS
            guard = manager.quota_type.api_key is not None
            creation = manager.quota_type is QuotaType.CONNECTION_CREATION_RATE
            labels = ["user"] if per_user else ["user", "client_id"]
            if guard:  # the proxy's own, not Kafka's: one family for every API's guard
                labels = ["api", *labels]
            for sensors in manager.sensors():
                user, client_id = sensors.tags
                values = [sanitize(user)] if per_user else [sanitize(user), client_id]
                if guard:
                    values = [group, *values]
                for name, value in manager.metric_values(sensors, now_ms):
                    full = (
                        _guard_metric(name)
                        if guard
                        else _creation_metric(name)
                        if creation
                        else metric_name(group, name)
                    )
                    family = families.get(full)
                    if family is None:
                        described = (
                            f"a request-rate guard's {name}"
                            if guard
                            else f"the connection creation rate guard's {name}"
                            if creation
                            else f"Kafka's {group} {name}"
                        )
                        family = GaugeMetricFamily(
                            full, f"{described} per {'/'.join(labels)}", labels=labels
                        )
                        families[full] = family
                    family.add_metric(values, value)
                entity = [manager.quota_type.key, sanitize(user), client_id]
                if sensors.limit != UNLIMITED:
                    limits.add_metric(entity, manager.metric_limit(sensors))
                if sensors.throttles:
                    throttles.add_metric(entity, sensors.throttles)
                if sensors.shadow_throttles:
                    shadow.add_metric(entity, sensors.shadow_throttles)
                if sensors.dropped_requests:
                    dropped.add_metric([sanitize(user)], sensors.dropped_requests)
        yield from families.values()
        yield from _connection_families(self._engine().connections, limits, shadow)
        yield limits
        yield throttles
        yield shadow
        yield dropped
        yield from _topic_families(self._engine(), now_ms)
        yield from ceiling_families(self._engine(), now_ms)
        readings = Readings(
            self._engine(), self._stats, self._listeners(), self._pool, self._active_connections
        )
        for spec in PROXY_FAMILIES:
            read = spec.read(readings)
            if read is None:
                continue
            kind = CounterMetricFamily if spec.counter else GaugeMetricFamily
            if isinstance(read, Mapping):
                metric = kind(spec.name, spec.help, labels=list(spec.labels))
                for label_values, value in read.items():
                    metric.add_metric(list(label_values), value)
            else:
                metric = kind(spec.name, spec.help, value=read)
            yield metric
        if self._local_rates is not None and self._stats.fleet is not None:
            local = GaugeMetricFamily(
                "kafka_quota_proxy_local_rate",
                "A fleet-shared quota's rate of the use charged in this process alone, beside "
                "Kafka's rate metric, which is the fleet's as this process judges it",
                labels=["quota", "user", "client_id"],
            )
            for manager, (user, client_id), rate in self._local_rates():
                local.add_metric([manager.quota_type.key, sanitize(user), client_id], rate)
            yield local


def _creation_metric(name: str) -> str:
    """The connection creation rate guard's stat (docs/guards.md)."""
    return f"kafka_quota_proxy_connection_creation_{name.replace('-', '_')}"


def _connection_families(
    connections: PrincipalConnections, limits: GaugeMetricFamily, shadow: CounterMetricFamily
) -> Iterator[Metric]:
    """The connections guard: each limited principal's open connections here and across the
    fleet as this process knows it, its limit, and the connections either connection guard
    refused (in shadow mode, would have)."""
    labels = ["user", "client_id"]
    here = GaugeMetricFamily(
        "kafka_quota_proxy_principal_connections",
        "Open connections of a principal whose entity sets kafka-quota-proxy.connections, "
        "in this process",
        labels=labels,
    )
    fleet = GaugeMetricFamily(
        "kafka_quota_proxy_principal_connections_fleet",
        "The same principal's open connections across the fleet, as this process knows them "
        "(its own alone while no member watches the principal)",
        labels=labels,
    )
    refused = CounterMetricFamily(
        "kafka_quota_proxy_principal_connections_refused",
        "Connections closed by a connection guard once their principal was known: at once "
        "for kafka-quota-proxy.connections, after a delay for its connection_creation_rate",
        labels=["quota", *labels],
    )
    key = QuotaType.CONNECTIONS.key
    # a limited principal's refusals from 0, so that the first one shows as a rate
    refusals: dict[tuple[QuotaType, MetricTags], int] = {}
    for tags, count in list(connections.here.items()):
        limit = connections.limit(tags)
        if limit is None:
            continue
        refusals[(QuotaType.CONNECTIONS, tags)] = 0
        values = [sanitize(tags[0]), tags[1]]
        here.add_metric(values, count)
        fleet.add_metric(values, connections.fleet(tags))
        limits.add_metric([key, *values], limit)
    refusals.update(connections.refused)
    for (quota_type, (user, client_id)), count in refusals.items():
        refused.add_metric([quota_type.key, sanitize(user), client_id], count)
    for (quota_type, (user, client_id)), count in list(connections.shadowed.items()):
        shadow.add_metric([quota_type.key, sanitize(user), client_id], count)
    yield here
    yield fleet
    yield refused


def _guard_metric(name: str) -> str:
    """A request-rate guard's stat (docs/guards.md), labelled by the API it counts."""
    return f"kafka_quota_proxy_guard_{name.replace('-', '_')}"


def _topic_families(engine: QuotaEngine, now_ms: int) -> Iterator[Metric]:
    """Each limited topic's rate beside its quota, the throttle time its sensor averages,
    and the responses its throttle was the largest for (quotas/topics.py)."""
    labels = ["quota", "topic"]
    rate = GaugeMetricFamily(
        "kafka_quota_proxy_topic_byte_rate",
        "A topic's bytes per second, written (producer_byte_rate) or read (consumer_byte_rate)"
        " by every client together, as its topic quota measures them",
        labels=labels,
    )
    limit = GaugeMetricFamily(
        "kafka_quota_proxy_topic_quota_limit",
        "A topic's quota in force, bytes per second",
        labels=labels,
    )
    throttle_time = GaugeMetricFamily(
        "kafka_quota_proxy_topic_throttle_time",
        "The throttle time (ms) a topic's quota decided, averaged as Kafka's throttle-time",
        labels=labels,
    )
    throttles = CounterMetricFamily(
        "kafka_quota_proxy_topic_throttles",
        "Responses that carried a throttle whose largest decision was a topic's quota",
        labels=labels,
    )
    for manager in engine.topic_managers():
        for sensors in manager.sensors():
            if sensors.limit == UNLIMITED:
                continue
            entity = [manager.quota_type.key, sensors.tags[0]]
            values = dict(manager.metric_values(sensors, now_ms))
            rate.add_metric(entity, values["byte-rate"])
            throttle_time.add_metric(entity, values["throttle-time"])
            limit.add_metric(entity, manager.metric_limit(sensors))
            throttles.add_metric(entity, sensors.throttles)
    yield from (rate, limit, throttle_time, throttles)


class Readings(NamedTuple):
    """What the proxy's own series are read from at a scrape."""

    engine: QuotaEngine
    stats: ProxyStats
    #: listener name -> whether it accepts now (False while its upstream is unreachable)
    listeners: Mapping[str, bool]
    pool: MemoryPool | None
    active_connections: Callable[[], int]


#: one series' value, one value per label values, or None: not exposed now
Values = float | Mapping[tuple[str, ...], float] | None


class Family(NamedTuple):
    """One metric family of the proxy's own: its name, type, help, labels, and how a scrape
    reads it."""

    name: str
    counter: bool
    help: str
    labels: tuple[str, ...]
    read: Callable[[Readings], Values]


def _by_listener(name: str) -> Callable[[Readings], Values]:
    """A count of ProxyStats per listener, every listener named (0 until it counts)."""

    def read(r: Readings) -> Values:
        counts = getattr(r.stats, name)
        return {(listener,): counts[listener] for listener in sorted({*r.listeners, *counts})}

    return read


def _by_sink(name: str) -> Callable[[Readings], Values]:
    return lambda r: {(sink,): getattr(r.stats, name)[sink] for sink in ("file", "kafka")}


def _fleet(read: Callable[[FleetStats], float]) -> Callable[[Readings], Values]:
    return lambda r: None if r.stats.fleet is None else read(r.stats.fleet)


def _pool(read: Callable[[MemoryPool], float]) -> Callable[[Readings], Values]:
    return lambda r: None if r.pool is None else read(r.pool)


_GAUGE, _COUNTER = False, True
PROXY_FAMILIES: tuple[Family, ...] = (
    Family(
        "kafka_quota_proxy_producer_id_users",
        _GAUGE,
        "Users whose recent producer ids are tracked (KIP-936)",
        (),
        lambda r: r.engine.producer_ids.tracked_users,
    ),
    Family(
        "kafka_quota_proxy_producer_id_filter_bytes",
        _GAUGE,
        "Memory of the producer-id Bloom filters' bit arrays",
        (),
        lambda r: r.engine.producer_ids.filter_bytes(),
    ),
    Family(
        "kafka_quota_proxy_config_reloads",
        _COUNTER,
        "Config reloads, by result",
        ("result",),
        lambda r: {("success",): r.stats.reloads_succeeded, ("failure",): r.stats.reloads_failed},
    ),
    Family(
        "kafka_quota_proxy_config_last_reload_successful",
        _GAUGE,
        "1 while the config file's last change was taken; 0 from a refused one until a "
        "change is taken (the proxy runs the config it had before)",
        (),
        lambda r: 1.0 if r.stats.last_reload_succeeded else 0.0,
    ),
    Family(
        "kafka_quota_proxy_expired_sensors",
        _COUNTER,
        "Quota sensors dropped after an hour without activity",
        (),
        lambda r: r.stats.expired_sensors,
    ),
    Family(
        "kafka_quota_proxy_connections_accepted",
        _COUNTER,
        "Client connections served, by listener",
        ("listener",),
        _by_listener("connections_accepted"),
    ),
    Family(
        "kafka_quota_proxy_connections_refused",
        _COUNTER,
        "Client connections closed at once for max.connections.per.ip, by listener",
        ("listener",),
        _by_listener("connections_refused"),
    ),
    Family(
        "kafka_quota_proxy_connections_throttled",
        _COUNTER,
        "Client connections held then closed for connection_creation_rate, by listener",
        ("listener",),
        _by_listener("connections_throttled"),
    ),
    Family(
        "kafka_quota_proxy_failed_logins",
        _COUNTER,
        "SASL authentications the brokers refused, as the failed-login backoff counts them "
        "([guards.failed_logins]; 0 without it)",
        (),
        lambda r: r.stats.failed_logins.refused,
    ),
    Family(
        "kafka_quota_proxy_logins_held",
        _COUNTER,
        "SASL authentications held for earlier refusals, by what held them longest: the "
        "user's or the client address's backoff (in shadow mode, that would have been)",
        ("by",),
        lambda r: {(by,): held for by, held in r.stats.failed_logins.held.items()},
    ),
    Family(
        "kafka_quota_proxy_login_held_seconds",
        _COUNTER,
        "Time SASL authentications were held for earlier refusals, in all",
        (),
        lambda r: r.stats.failed_logins.held_ms / 1000,
    ),
    Family(
        "kafka_quota_proxy_proxy_header_refused",
        _COUNTER,
        "Client connections closed for their PROXY protocol header: missing where one is "
        "required, malformed, or from a source not in trusted_sources; by listener",
        ("listener",),
        _by_listener("proxy_header_refused"),
    ),
    Family(
        "kafka_quota_proxy_listener_up",
        _GAUGE,
        "1 while a listener accepts; 0 while its upstream is unreachable and it refuses",
        ("listener",),
        lambda r: {
            (listener,): 1.0 if serving else 0.0
            for listener, serving in sorted(r.listeners.items())
        },
    ),
    Family(
        "kafka_quota_proxy_connections_idle_closed",
        _COUNTER,
        "Client connections closed after connections.max.idle.ms without traffic",
        (),
        lambda r: r.stats.connections_idle_closed,
    ),
    Family(
        "kafka_quota_proxy_memory_pool_available_bytes",
        _GAUGE,
        "queued.max.request.bytes not granted to frames being read (Kafka's "
        "MemoryPoolAvailable; below 0 by at most one frame)",
        (),
        _pool(lambda pool: pool.available),
    ),
    Family(
        "kafka_quota_proxy_memory_pool_waiting_connections",
        _GAUGE,
        "Connections not read until the memory pool has memory again",
        (),
        _pool(lambda pool: pool.waiting),
    ),
    Family(
        "kafka_quota_proxy_usage_samples",
        _COUNTER,
        "Usage samples written, by sink",
        ("sink",),
        _by_sink("usage_samples"),
    ),
    Family(
        "kafka_quota_proxy_usage_samples_dropped",
        _COUNTER,
        "Usage samples dropped (a full Kafka buffer, a failed write), by sink",
        ("sink",),
        _by_sink("usage_dropped"),
    ),
    Family(
        "kafka_quota_proxy_quota_store_up",
        _GAUGE,
        "1 while the quota store topic ([quota_store]) is read; 0 while it is not, and "
        "the proxy enforces the quotas it last read and refuses alterations",
        (),
        lambda r: None if r.stats.quota_store_up is None else float(r.stats.quota_store_up),
    ),
    Family(
        "kafka_quota_proxy_fleet_members",
        _GAUGE,
        "Members of this proxy's fleet: itself and those it heard from lately",
        (),
        _fleet(lambda fleet: fleet.members),
    ),
    Family(
        "kafka_quota_proxy_fleet_bus_up",
        _GAUGE,
        "1 while this member reads its own publications back from the fleet's topic; 0 "
        "while it does not, and holds each budget's share (fleet_budget_share)",
        (),
        _fleet(lambda fleet: 1.0 if fleet.bus_up else 0.0),
    ),
    Family(
        "kafka_quota_proxy_fleet_budget_share",
        _GAUGE,
        "The share of every quota this member enforces on its own: 1 with the bus up, "
        "1 / the members last seen without it",
        (),
        _fleet(lambda fleet: fleet.budget_share),
    ),
    Family(
        "kafka_quota_proxy_fleet_partitions_held",
        _GAUGE,
        "Through owners: the bus's partitions whose owner has folded none of this member's "
        "use lately; their principals are held here at 1 / fleet_members of each budget "
        "until the owner folds again or the owners' group has its next generation",
        (),
        _fleet(lambda fleet: fleet.partitions_held),
    ),
    Family(
        "kafka_quota_proxy_fleet_watched",
        _GAUGE,
        "Quota sensors this member watches, whose use it shares on the bus (every interval, "
        "or as a standing while steady): those past their line, near their limit; the "
        "others cost the bus nothing",
        (),
        _fleet(lambda fleet: fleet.watched),
    ),
    Family(
        "kafka_quota_proxy_fleet_cpu_seconds",
        _COUNTER,
        "CPU this member spent on the fleet's own work: publishing its use, encoding, and "
        "decoding and recording the others' (not the Kafka client's I/O)",
        (),
        _fleet(lambda fleet: fleet.cpu_seconds),
    ),
    Family(
        "kafka_quota_proxy_fleet_bytes_published",
        _COUNTER,
        "Bytes this member wrote to the bus",
        (),
        _fleet(lambda fleet: fleet.bytes_published),
    ),
    Family(
        "kafka_quota_proxy_fleet_bytes_read",
        _COUNTER,
        "Bytes this member read from the bus",
        (),
        _fleet(lambda fleet: fleet.bytes_read),
    ),
    Family(
        "kafka_quota_proxy_fleet_publications_lost",
        _COUNTER,
        "Publications the bus did not take; their use went out with the next one",
        (),
        _fleet(lambda fleet: fleet.publications_lost),
    ),
    Family(
        "kafka_quota_proxy_connections_active",
        _GAUGE,
        "Client connections open now",
        (),
        lambda r: r.active_connections(),
    ),
)


def build_registry(collector: QuotaCollector, worker: int | None = None) -> CollectorRegistry:
    """The registry a scrape reads; a worker's series carry its index (proxy/network/workers.py)."""
    registry = CollectorRegistry(auto_describe=False)
    collectors: list[Collector] = [collector, ProcessCollector(registry=None), BuildInfo()]
    for each in collectors:
        registry.register(each if worker is None else _Labelled(each, "worker", str(worker)))
    return registry


class _Labelled(Collector):
    """Every series of another collector with one more label."""

    def __init__(self, inner: Collector, name: str, value: str) -> None:
        self._inner = inner
        self._label = {name: value}

    def collect(self) -> Iterator[Metric]:
        for family in self._inner.collect():
            family.samples = [
                sample._replace(labels={**sample.labels, **self._label})
                for sample in family.samples
            ]
            yield family
