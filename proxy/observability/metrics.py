"""Prometheus metrics named after Kafka's quota metrics, served from the event loop.

Values are read from the quota sensors at scrape time, as a JMX read of a broker does, so
the hot path pays nothing for metrics and a series disappears with its expired sensor. The
scrape runs on the event loop thread (not prometheus-client's own HTTP thread) because
measuring a sensor purges its samples and must not race the requests that record into it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from proxy.runtime.memory_pool import MemoryPool
from proxy.runtime.stats import FleetStats, ProxyStats
from quotas.engine import QuotaEngine
from quotas.entities import MetricTags, QuotaType, sanitize
from quotas.managers import UNLIMITED, QuotaManager

log = logging.getLogger(__name__)

#: a fleet member's local rates: (manager, metric tags, rate) of each shared sensor
LocalRates = Callable[[], Iterator[tuple[QuotaManager, MetricTags, float]]]

_MAX_REQUEST_HEAD = 8192
_READ_TIMEOUT_S = 5.0


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
            labels = ["user"] if per_user else ["user", "client_id"]
            for sensors in manager.sensors():
                user, client_id = sensors.tags
                values = [sanitize(user)] if per_user else [sanitize(user), client_id]
                for name, value in manager.metric_values(sensors, now_ms):
                    full = metric_name(group, name)
                    family = families.get(full)
                    if family is None:
                        family = GaugeMetricFamily(
                            full, f"Kafka's {group} {name} per {'/'.join(labels)}", labels=labels
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
        yield limits
        yield throttles
        yield shadow
        yield dropped
        producer_ids = self._engine().producer_ids
        yield GaugeMetricFamily(
            "kafka_quota_proxy_producer_id_users",
            "Users whose recent producer ids are tracked (KIP-936)",
            value=producer_ids.tracked_users,
        )
        yield GaugeMetricFamily(
            "kafka_quota_proxy_producer_id_filter_bytes",
            "Memory of the producer-id Bloom filters' bit arrays",
            value=producer_ids.filter_bytes(),
        )
        reloads = CounterMetricFamily(
            "kafka_quota_proxy_config_reloads",
            "Config reloads, by result",
            labels=["result"],
        )
        stats = self._stats
        reloads.add_metric(["success"], stats.reloads_succeeded)
        reloads.add_metric(["failure"], stats.reloads_failed)
        yield reloads
        yield GaugeMetricFamily(
            "kafka_quota_proxy_config_last_reload_successful",
            "1 while the config file's last change was taken; 0 from a refused one until a "
            "change is taken (the proxy runs the config it had before)",
            value=1.0 if stats.last_reload_succeeded else 0.0,
        )
        yield CounterMetricFamily(
            "kafka_quota_proxy_expired_sensors",
            "Quota sensors dropped after an hour without activity",
            value=stats.expired_sensors,
        )
        listeners = self._listeners()
        for name, by_listener, text in (
            ("accepted", stats.connections_accepted, "Client connections served, by listener"),
            (
                "refused",
                stats.connections_refused,
                "Client connections closed at once for max.connections.per.ip, by listener",
            ),
            (
                "throttled",
                stats.connections_throttled,
                "Client connections held then closed for connection_creation_rate, by listener",
            ),
        ):
            counter = CounterMetricFamily(
                f"kafka_quota_proxy_connections_{name}", text, labels=["listener"]
            )
            for listener in sorted(set(listeners) | set(by_listener)):
                counter.add_metric([listener], by_listener[listener])
            yield counter
        up = GaugeMetricFamily(
            "kafka_quota_proxy_listener_up",
            "1 while a listener accepts; 0 while its upstream is unreachable and it refuses",
            labels=["listener"],
        )
        for listener, serving in sorted(listeners.items()):
            up.add_metric([listener], 1.0 if serving else 0.0)
        yield up
        yield CounterMetricFamily(
            "kafka_quota_proxy_connections_idle_closed",
            "Client connections closed after connections.max.idle.ms without traffic",
            value=stats.connections_idle_closed,
        )
        if self._pool is not None:
            yield GaugeMetricFamily(
                "kafka_quota_proxy_memory_pool_available_bytes",
                "queued.max.request.bytes not granted to frames being read (Kafka's "
                "MemoryPoolAvailable; below 0 by at most one frame)",
                value=self._pool.available,
            )
            yield GaugeMetricFamily(
                "kafka_quota_proxy_memory_pool_waiting_connections",
                "Connections not read until the memory pool has memory again",
                value=self._pool.waiting,
            )
        for name, by_sink, text in (
            ("usage_samples", stats.usage_samples, "Usage samples written, by sink"),
            (
                "usage_samples_dropped",
                stats.usage_dropped,
                "Usage samples dropped (a full Kafka buffer, a failed write), by sink",
            ),
        ):
            counter = CounterMetricFamily(f"kafka_quota_proxy_{name}", text, labels=["sink"])
            for sink in ("file", "kafka"):
                counter.add_metric([sink], by_sink[sink])
            yield counter
        if stats.quota_store_up is not None:
            yield GaugeMetricFamily(
                "kafka_quota_proxy_quota_store_up",
                "1 while the quota store topic ([quota_store]) is read; 0 while it is not, and "
                "the proxy enforces the quotas it last read and refuses alterations",
                value=1.0 if stats.quota_store_up else 0.0,
            )
        if stats.fleet is not None:
            yield from self._fleet(stats.fleet)
        yield GaugeMetricFamily(
            "kafka_quota_proxy_connections_active",
            "Client connections open now",
            value=self._active_connections(),
        )

    def _fleet(self, fleet: FleetStats) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "kafka_quota_proxy_fleet_members",
            "Members of this proxy's fleet: itself and those it heard from lately",
            value=fleet.members,
        )
        yield GaugeMetricFamily(
            "kafka_quota_proxy_fleet_bus_up",
            "1 while this member reads its own publications back from the fleet's topic; 0 "
            "while it does not, and holds each budget's share (fleet_budget_share)",
            value=1.0 if fleet.bus_up else 0.0,
        )
        yield GaugeMetricFamily(
            "kafka_quota_proxy_fleet_budget_share",
            "The share of every quota this member enforces on its own: 1 with the bus up, "
            "1 / the members last seen without it",
            value=fleet.budget_share,
        )
        for name, value, text in (
            ("bytes_published", fleet.bytes_published, "Bytes this member wrote to the bus"),
            ("bytes_read", fleet.bytes_read, "Bytes this member read from the bus"),
            (
                "publications_lost",
                fleet.publications_lost,
                "Publications the bus did not take; their use went out with the next one",
            ),
        ):
            yield CounterMetricFamily(f"kafka_quota_proxy_fleet_{name}", text, value=value)
        if self._local_rates is None:
            return
        local = GaugeMetricFamily(
            "kafka_quota_proxy_local_rate",
            "A fleet-shared quota's rate of the use charged in this process alone, beside "
            "Kafka's rate metric, which is the fleet's as this process judges it",
            labels=["quota", "user", "client_id"],
        )
        for manager, (user, client_id), rate in self._local_rates():
            local.add_metric([manager.quota_type.key, sanitize(user), client_id], rate)
        yield local


def build_registry(collector: QuotaCollector, worker: int | None = None) -> CollectorRegistry:
    """The registry a scrape reads; a worker's series carry its index (proxy/network/workers.py)."""
    registry = CollectorRegistry(auto_describe=False)
    collectors: list[Collector] = [collector, ProcessCollector(registry=None)]
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


async def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> asyncio.Server:
    """A minimal HTTP/1.0 endpoint: GET /metrics, anything else 404."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            request_line = head.split(b"\r\n", 1)[0].split()
            if (
                len(request_line) >= 2
                and request_line[0] == b"GET"
                and (request_line[1].split(b"?")[0] in (b"/metrics", b"/"))
            ):
                body = generate_latest(registry)
                status = b"200 OK"
                content_type = b"text/plain; version=0.0.4; charset=utf-8"
            else:
                body, status, content_type = b"not found\n", b"404 Not Found", b"text/plain"
            writer.write(
                b"HTTP/1.0 "
                + status
                + b"\r\nContent-Type: "
                + content_type
                + b"\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port, limit=_MAX_REQUEST_HEAD)
