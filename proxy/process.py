"""One proxy process: every part it runs, the order they start and stop in, and reload.

The composition root. Parts are built from the config in one place, so a reload sees every
part that a new config touches (the context, the server's waiting acceptors, the usage sink's
credentials), and the shutdown order is written once: stop taking clients and drain them,
close the last usage window, flush it, then stop what runs beside them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from functools import partial
from pathlib import Path

from config.errors import ConfigError, StartupError
from config.loader import ProxyConfig
from config.tls import unencrypted_upstream
from proxy.control.cluster import reach_cluster
from proxy.control.disk_watch import DiskWatch
from proxy.control.fleet_bus import FleetBus, member_id
from proxy.control.quota_topic import QuotaTopic
from proxy.control.reload import ConfigReloader
from proxy.enforcement.fleet import FleetMember
from proxy.network.loop import LoopClock
from proxy.network.server import ProxyServer
from proxy.network.workers import WATCH_S, Worker
from proxy.observability.endpoint import serve_endpoint
from proxy.observability.explaining import Explainer
from proxy.observability.metrics import QuotaCollector, build_registry
from proxy.observability.probes import Probes
from proxy.observability.usage_sinks import (
    UsageFileSink,
    UsageKafkaSink,
    instance_id,
    record_usage,
)
from proxy.runtime.clock import wall_ms
from proxy.runtime.context import ProxyContext, build_context
from proxy.runtime.counters import FleetStats
from proxy.runtime.usage_recorder import UsageRecorder

log = logging.getLogger("kafka-quota-proxy")

#: how long the last usage samples may take to reach their Kafka topic at shutdown
_KAFKA_FLUSH_S = 5.0
#: Kafka's ExpireSensorTask period
_SENSOR_EXPIRY_INTERVAL_S = 30.0
#: how often the producer-id cleanup looks again while no user is tracked
_IDLE_CLEANUP_S = 1.0


class ProxyProcess:
    """Built from a config without I/O; `start` opens what the proxy needs before it serves
    (the quota store read to its end, the fleet's bus) and then serves; `stop` drains."""

    def __init__(self, config: ProxyConfig, worker: Worker | None = None) -> None:
        self.config = config
        self.worker = worker
        usage = config.usage
        recorder = None
        if usage.enabled:
            source = instance_id(usage, config.proxy.bootstrap_port)
            if worker is not None:
                source = f"{source}/w{worker.index}"
            recorder = UsageRecorder(source, wall_ms())
        self.context: ProxyContext = build_context(config, LoopClock(), recorder)
        self.usage_files = self._usage_files()
        self.usage_kafka = self._usage_kafka()
        self.quota_topic = self._quota_topic()
        self.fleet = self._fleet()
        self.server = ProxyServer(self.context, config.proxy_protocol)
        self.reloader = ConfigReloader(config, self.reload, self.context.stats)
        self._endpoint: asyncio.Server | None = None
        #: what /readyz waits for at start-up, in order, until each is read
        self._reading: dict[str, str | None] = {}
        if self.quota_topic is not None:
            self._reading["quota_store"] = f"reading the quota store topic {self.quota_topic.topic}"
        if self.fleet is not None:
            self._reading["fleet_bus"] = f"catching up with the fleet's bus {self.fleet.topic}"
        #: from SIGTERM on: /readyz answers 503
        self.draining = False
        self._sampling: asyncio.Task[None] | None = None
        self._background: list[asyncio.Task[None]] = []

    def _usage_files(self) -> UsageFileSink | None:
        usage = self.config.usage
        recorder = self.context.usage
        if recorder is None or not usage.directory:
            return None
        try:
            return UsageFileSink(
                Path(usage.directory),
                recorder.instance_id,
                int(usage.rotate_interval_s * 1000),
                int(usage.retention_hours * 3_600_000),
            )
        except OSError as exc:
            problem = f"[usage] key 'directory': cannot write {usage.directory!r}: {exc}"
            raise ConfigError(self.config.path or "config", [problem]) from exc

    def _usage_kafka(self) -> UsageKafkaSink | None:
        usage, config = self.config.usage, self.config
        if self.context.usage is None or not usage.kafka_topic:
            return None
        # to the upstream cluster by default, as the proxy's own client ([cluster])
        upstream = not usage.kafka_bootstrap_servers
        return UsageKafkaSink(
            usage.kafka_bootstrap_servers or config.proxy.upstream_bootstrap_servers,
            usage.kafka_topic,
            usage.kafka_buffer_samples,
            self.context.stats,
            config.cluster if upstream else None,
        )

    def _quota_topic(self) -> QuotaTopic | None:
        config = self.config
        if not config.quota_store.topic:
            return None
        return QuotaTopic(
            self.context.quota_layers,
            config.quota_store,
            config.cluster,
            config.proxy.upstream_bootstrap_servers,
            self.context.stats,
        )

    def _fleet(self) -> FleetBus | None:
        config = self.config
        if not config.fleet_name:
            return None
        index = self.worker.index if self.worker is not None else 0
        member = FleetMember(
            member_id(config.proxy.bootstrap_port, index), config.fleet.sync_interval_ms
        )
        self.context.stats.fleet = FleetStats()
        return FleetBus(
            member,
            self.context,
            config.fleet_name,
            config.cluster,
            config.proxy.upstream_bootstrap_servers,
            self.context.stats.fleet,
            config.fleet.owners,
        )

    async def start(self) -> None:
        """What the proxy serves on is read before a client is served: the quota store (no
        client on forgotten quotas), then the fleet's bus (no budget enforced whole that
        others share)."""
        config = self.config
        if (unencrypted := unencrypted_upstream(config.listener, config.upstream)) is not None:
            log.warning(unencrypted)
        if config.metrics.enabled:  # first: /readyz says what the instance waits for
            await self._start_endpoint()
        open_timeout_s = 2 * config.proxy.connect_timeout_s
        if self.quota_topic is not None or self.fleet is not None:
            await reach_cluster(config)
        if self.quota_topic is not None:
            await self.quota_topic.start(open_timeout_s)
            self._reading["quota_store"] = None
            self.context.quota_admin = self.quota_topic
            self._run_beside(self.quota_topic.run())
            log.info("altered quotas: the quota store topic %s", config.quota_store.topic)
        if self.fleet is not None:
            await self.fleet.start(open_timeout_s)
            self._reading["fleet_bus"] = None
            self._run_beside(self.fleet.run())
        try:
            await self.server.start()
        except OSError as exc:  # the bootstrap listener (broker listeners wait for their port)
            host, port = config.proxy.listen_host, config.proxy.bootstrap_port
            raise cannot_listen(config, "proxy", host, port, "bootstrap_port", exc) from exc
        self._start_usage()
        if config.disk_guard is not None:
            self._run_beside(DiskWatch(self.context, config.disk_guard).run())
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, self.reloader.reload, "SIGHUP")
        self._run_beside(self.reloader.watch(config.proxy.config_poll_interval_s))
        self._run_beside(self._expire_sensors())
        self._run_beside(self._forget_producer_ids())

    def _run_beside(self, work: Coroutine[object, object, None]) -> None:
        self._background.append(asyncio.get_running_loop().create_task(work))

    def _start_usage(self) -> None:
        recorder = self.context.usage
        if recorder is None:
            return
        usage, stats = self.config.usage, self.context.stats
        if self.usage_kafka is not None:
            self._run_beside(self.usage_kafka.run())
        self._sampling = asyncio.get_running_loop().create_task(
            record_usage(
                recorder,
                usage,
                self.usage_files,
                self.usage_kafka,
                stats,
                self._throttled,
            )
        )
        sinks = [f"{self.usage_files.directory}/"] if self.usage_files is not None else []
        if self.usage_kafka is not None:
            sinks.append(f"Kafka topic {usage.kafka_topic}")
        log.info(
            "usage samples every %gs to %s", usage.interval_s, " and ".join(sinks) or "nowhere"
        )

    def _throttled(self) -> Callable[[str, str, int], int] | None:
        """How long principals were held since the last window, on the quotas' clock."""
        context = self.context
        return context.quotas.settlement.take_throttled(context.clock.now_ms())

    def probes(self) -> Probes:
        """Ready while the instance serves as configured: its bootstrap listener open and
        every broker's port bound, the cluster's brokers known, the quota store and the
        fleet's bus read at start-up (lost later, each degrades to a safe limit of its own,
        so the instance stays ready: every instance shares that cluster, and all of them
        turning unready would be an outage), and no SIGTERM."""
        server = self.server
        checks = {
            "listeners": server.endpoints.not_listening,
            "cluster_metadata": lambda: server.discovery.unread,
        }
        for part in self._reading:
            checks[part] = partial(self._reading.get, part)
        checks["draining"] = lambda: "SIGTERM received: draining" if self.draining else None
        return Probes(checks)

    async def _start_endpoint(self) -> None:
        config, context, server, worker = self.config, self.context, self.server, self.worker
        registry = build_registry(
            QuotaCollector(
                lambda: context.quotas.engine,
                context.clock.now_ms,
                context.stats,
                lambda: len(server.connections),
                lambda: {
                    listener.name: listener.serving
                    for listener in server.endpoints.listeners.values()
                },
                context.memory_pool,
                self.fleet.member.local_rates if self.fleet is not None else None,
            ),
            worker.index if worker is not None else None,
        )
        port = worker.port(config.metrics.port) if worker else config.metrics.port
        host = config.metrics.listen_host
        try:
            self._endpoint = await serve_endpoint(
                registry, self.probes(), host, port, explainer(self)
            )
        except OSError as exc:
            raise cannot_listen(config, "metrics", host, port, "port", exc) from exc
        host, port = self._endpoint.sockets[0].getsockname()[:2]
        which = f" (worker {worker.index})" if worker is not None else ""
        _announce(f"kafka-quota-proxy metrics{which}: http://{host}:{port}/metrics")

    def reload(self, new: ProxyConfig) -> None:
        """A new config that passed validation, applied to every part it touches."""
        renewed = new.cluster != self.context.own_client  # files' contents compared too
        if not self.context.reconfigure(new):
            log.warning("quota window settings changed: every quota sensor starts afresh")
        # a raised max.connections lets waiting acceptors go on at once
        self.server.admission.slot_freed()
        if renewed:
            own_clients = (self.usage_kafka, self.quota_topic, self.fleet)
            for own in (own for own in own_clients if own is not None):
                own.renew(new.cluster)

    async def stop(self) -> None:
        """Clients first (drained up to drain_timeout_s), then the last usage window, which
        closes once no client is left to count, then everything beside them."""
        log.info("shutting down")
        await self.server.stop(self.config.proxy.drain_timeout_s)
        if self._sampling is not None:
            self._sampling.cancel()
            await asyncio.gather(self._sampling, return_exceptions=True)
        if self.usage_kafka is not None:
            await self.usage_kafka.flush(_KAFKA_FLUSH_S)
            self.usage_kafka.abandon()
        for task in self._background:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.quota_topic is not None:
            await self.quota_topic.close()
        if self.fleet is not None:
            await self.fleet.close()
        if self._endpoint is not None:
            self._endpoint.close()

    async def run(self, serving: Callable[[ProxyProcess], None] | None = None) -> None:
        """Serve until SIGINT or SIGTERM (a worker also stops when its parent is gone);
        `serving` is called once clients are served."""
        await self.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if self.worker is None:
            _announce(f"kafka-quota-proxy bootstrap: {self.server.bootstrap_address}")
        else:
            self._run_beside(self._watch_parent(self.worker, stop))
            self.worker.ready()
        if serving is not None:
            serving(self)
        await stop.wait()
        self.draining = True
        delay_s = self.config.proxy.drain_delay_s
        if delay_s > 0:
            log.info("not ready: serving %gs more before the drain (drain_delay_s)", delay_s)
            await asyncio.sleep(delay_s)
        await self.stop()

    @staticmethod
    async def _watch_parent(worker: Worker, stop: asyncio.Event) -> None:
        while not worker.orphaned():
            await asyncio.sleep(WATCH_S)
        log.warning("worker %d: the parent process is gone: stopping", worker.index)
        stop.set()

    async def _expire_sensors(self) -> None:
        context = self.context
        while True:
            await asyncio.sleep(_SENSOR_EXPIRY_INTERVAL_S)
            now_ms = context.clock.now_ms()
            expired = context.quotas.expire(now_ms) + context.connection_quotas.expire(now_ms)
            context.stats.expired_sensors += expired

    async def _forget_producer_ids(self) -> None:
        """KIP-936's cleanup scheduler: users whose every producer-id layer expired go."""
        while True:
            producer_ids = self.context.quotas.engine.producer_ids  # the engine a reload left
            if producer_ids.tracked_users:
                await asyncio.sleep(producer_ids.cache.cleanup_interval_ms / 1000)
                producer_ids.cleanup(self.context.clock.now_ms())
            else:  # nothing to forget: no wake-up every few ms beside the clients' traffic
                await asyncio.sleep(_IDLE_CLEANUP_S)


def explainer(process: ProxyProcess) -> Explainer:
    """/explain's answers, from the process's quotas, engine and fleet part; named after
    the fleet member (or the proxy's bootstrap) and the worker that gives them."""
    config, context, fleet, worker = process.config, process.context, process.fleet, process.worker
    if fleet is not None:
        member = fleet.member.member
    else:
        member = f"{config.proxy.advertised}:{config.proxy.bootstrap_port}"
    if worker is not None:
        member = f"{member} (worker {worker.index})"
    return Explainer(
        member,
        str(config.path or "the config"),
        context.quota_layers,
        lambda: context.quotas.engine,
        context.clock.now_ms,
        fleet.member.local_rates if fleet is not None else None,
    )


def _announce(line: str) -> None:
    """A line for whoever started the proxy, in one write: the workers of an instance
    announce themselves at once, on one stdout, and print() writes its newline apart."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def cannot_listen(
    config: ProxyConfig, section: str, host: str, port: int, port_key: str, exc: OSError
) -> StartupError:
    """A port in use or not ours to take names the port; an address not of this machine
    names the host."""
    names_host = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
    key, value = ("listen_host", host) if names_host else (port_key, port)
    if isinstance(exc, socket.gaierror) or not exc.errno:
        reason = exc.strerror or str(exc)
    else:  # uvloop's text repeats the address
        reason = os.strerror(exc.errno)
    return StartupError(
        config.path or "config",
        [f"[{section}] key '{key}' = {value!r}: cannot listen on {host}:{port}: {reason}"],
    )
