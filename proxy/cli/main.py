"""`kafka-quota-proxy`: run the proxy from a config file, or check a config file."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys
from pathlib import Path

from config.errors import ConfigError
from config.loader import ProxyConfig, load_config
from config.report import effective_quotas
from config.settings import FLEET_TOPIC_PREFIX
from config.tls import describe, unencrypted_upstream
from proxy.cli.quotas import add_arguments as add_quota_arguments
from proxy.cli.quotas import run as run_quotas
from proxy.control.cluster import AuthenticationFailed
from proxy.control.fleet_bus import FleetBus, FleetUnreachable, member_id
from proxy.control.quota_topic import StoreUnreachable, read_quota_store
from proxy.control.reload import ConfigReloader
from proxy.enforcement import Enforcement
from proxy.enforcement.fleet import FleetMember
from proxy.network.server import ProxyServer
from proxy.network.workers import WATCH_S, Worker, run_workers
from proxy.observability.log_limit import RepeatedLineFilter
from proxy.observability.metrics import FleetStats, QuotaCollector, build_registry, serve_metrics
from proxy.observability.usage_sinks import (
    UsageFileSink,
    UsageKafkaSink,
    instance_id,
    record_usage,
    wall_ms,
)
from proxy.runtime.clock import Clock, LoopClock
from proxy.runtime.context import ProxyContext, build_context
from proxy.runtime.usage import UsageRecorder
from quotas.entities import QuotaType
from quotas.settings import QuotaConfig

log = logging.getLogger("kafka-quota-proxy")

#: how long the last usage samples may take to reach their Kafka topic at shutdown
_KAFKA_FLUSH_S = 5.0
#: Kafka's ExpireSensorTask period
_SENSOR_EXPIRY_INTERVAL_S = 30.0


def install_event_loop(use_uvloop: bool) -> str:
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            return "asyncio (uvloop not installed)"
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return "uvloop"
    return "asyncio"


async def _expire_sensors(context: ProxyContext) -> None:
    while True:
        await asyncio.sleep(_SENSOR_EXPIRY_INTERVAL_S)
        now_ms = context.clock.now_ms()
        expired = context.quotas.expire(now_ms) + context.connection_quotas.expire(now_ms)
        context.stats.expired_sensors += expired


#: how often the producer-id cleanup looks again while no user is tracked
_IDLE_CLEANUP_S = 1.0


async def _forget_producer_ids(enforcement: Enforcement, clock: Clock) -> None:
    """KIP-936's cleanup scheduler: users whose every producer-id layer expired go."""
    while True:
        producer_ids = enforcement.engine.producer_ids  # the engine a reload left
        if producer_ids.tracked_users:
            await asyncio.sleep(producer_ids.cache.cleanup_interval_ms / 1000)
            producer_ids.cleanup(clock.now_ms())
        else:  # nothing to forget: no wake-up every few ms beside the clients' traffic
            await asyncio.sleep(_IDLE_CLEANUP_S)


async def _start_fleet(
    config: ProxyConfig, context: ProxyContext, worker: Worker | None
) -> FleetBus | None:
    """Join the fleet this config names, if any: its bus is up before the proxy serves."""
    name = config.fleet_name
    if not name:
        return None
    member = FleetMember(
        member_id(config.proxy.bootstrap_port, worker.index if worker else 0),
        config.fleet.sync_interval_ms,
    )
    context.stats.fleet = FleetStats()
    bus = FleetBus(
        member,
        context,
        name,
        config.cluster,
        config.proxy.upstream_bootstrap_servers,
        context.stats.fleet,
    )
    await bus.start(2 * config.proxy.connect_timeout_s)
    return bus


async def _watch_parent(worker: Worker, stop: asyncio.Event) -> None:
    while not worker.orphaned():
        await asyncio.sleep(WATCH_S)
    log.warning("worker %d: the parent process is gone: stopping", worker.index)
    stop.set()


async def serve(config: ProxyConfig, worker: Worker | None = None) -> None:
    if (unencrypted := unencrypted_upstream(config.listener, config.upstream)) is not None:
        log.warning(unencrypted)
    usage = config.usage
    recorder = None
    if usage.enabled:
        source = instance_id(usage, config.proxy.bootstrap_port)
        if worker is not None:
            source = f"{source}/w{worker.index}"
        recorder = UsageRecorder(source, wall_ms())
    context = build_context(config, LoopClock(), recorder)
    stats, clock = context.stats, context.clock

    def apply(new: ProxyConfig) -> None:
        if not context.reconfigure(new):
            log.warning("quota window settings changed: every quota sensor starts afresh")
        server.slot_freed()  # a raised max.connections lets waiting acceptors go on at once
        if kafka_sink is not None:
            kafka_sink.renew(new.cluster)

    files = None
    if recorder is not None and usage.directory:
        try:
            files = UsageFileSink(
                Path(usage.directory),
                recorder.instance_id,
                int(usage.rotate_interval_s * 1000),
                int(usage.retention_hours * 3_600_000),
            )
        except OSError as exc:
            problem = f"[usage] key 'directory': cannot write {usage.directory!r}: {exc}"
            raise ConfigError(config.path or "config", [problem]) from exc
    background: list[asyncio.Task[None]] = []
    if config.quota_store.topic:  # read before serving: no client is served on forgotten quotas
        await context.quota_admin.start(2 * config.proxy.connect_timeout_s)
        background.append(asyncio.create_task(context.quota_admin.run()))
        log.info("altered quotas: the quota store topic %s", config.quota_store.topic)
    fleet = await _start_fleet(config, context, worker)
    if fleet is not None:
        background.append(asyncio.create_task(fleet.run()))
    server = ProxyServer(context)
    await server.start()
    kafka_sink = None
    sampling = None
    if recorder is not None:
        if usage.kafka_topic:
            # to the upstream cluster by default, as the proxy's own client ([cluster])
            upstream = not usage.kafka_bootstrap_servers
            servers = usage.kafka_bootstrap_servers or config.proxy.upstream_bootstrap_servers
            kafka_sink = UsageKafkaSink(
                servers,
                usage.kafka_topic,
                usage.kafka_buffer_samples,
                stats,
                config.cluster if upstream else None,
            )
            background.append(asyncio.create_task(kafka_sink.run()))
        sampling = asyncio.create_task(record_usage(recorder, usage, files, kafka_sink, stats))
        sinks = [f"{files.directory}/"] if files is not None else []
        if kafka_sink is not None:
            sinks.append(f"Kafka topic {usage.kafka_topic}")
        log.info(
            "usage samples every %gs to %s", usage.interval_s, " and ".join(sinks) or "nowhere"
        )
    metrics_server = None
    if config.metrics.enabled:
        registry = build_registry(
            QuotaCollector(
                lambda: context.quotas.engine,
                clock.now_ms,
                stats,
                lambda: len(server.connections),
                lambda: {listener.name: listener.serving for listener in server.listeners.values()},
                context.memory_pool,
                fleet.member.local_rates if fleet is not None else None,
            ),
            worker.index if worker is not None else None,
        )
        port = worker.port(config.metrics.port) if worker else config.metrics.port
        metrics_server = await serve_metrics(registry, config.metrics.listen_host, port)
        host, port = metrics_server.sockets[0].getsockname()[:2]
        which = f" (worker {worker.index})" if worker is not None else ""
        print(f"kafka-quota-proxy metrics{which}: http://{host}:{port}/metrics", flush=True)
    reloader = ConfigReloader(config, apply, stats)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reloader.reload, "SIGHUP")
    background.append(loop.create_task(reloader.watch(config.proxy.config_poll_interval_s)))
    background.append(loop.create_task(_expire_sensors(context)))
    background.append(loop.create_task(_forget_producer_ids(context.quotas, clock)))
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if worker is None:
        print(f"kafka-quota-proxy bootstrap: {server.bootstrap_address}", flush=True)
    else:
        background.append(loop.create_task(_watch_parent(worker, stop)))
        worker.ready()
    await stop.wait()
    log.info("shutting down")
    await server.stop(config.proxy.drain_timeout_s)
    if sampling is not None:  # the last window closes once no client is left to count
        sampling.cancel()
        await asyncio.gather(sampling, return_exceptions=True)
    if kafka_sink is not None:
        await kafka_sink.flush(_KAFKA_FLUSH_S)
        kafka_sink.abandon()
    for task in background:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    await context.quota_admin.close()
    if fleet is not None:
        await fleet.close()
    if metrics_server is not None:
        metrics_server.close()


def raise_open_file_limit() -> int:
    """Every client connection takes two descriptors (client and upstream): take the hard
    limit the operator allows rather than the shell's soft default, as servers do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("open-file limit stays at %d: %s", soft, exc)
    return soft


def check_config(path: Path) -> int:
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"kafka-quota-proxy: invalid config\n{exc}", file=sys.stderr)
        return 2
    quotas, sources = config.quotas, None
    if config.quota_store.topic:  # what kafka-configs altered, read from the cluster
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the error below says it
        try:
            store = asyncio.run(read_quota_store(config))
        except StoreUnreachable as exc:
            print(f"kafka-quota-proxy: {exc}", file=sys.stderr)
            return 2
        quotas, sources = QuotaConfig(config.quotas.settings, store.limits()), store.source
    print(f"{path}: valid")
    for line in describe(config.listener, config.upstream):
        print(line)
    if config.cluster.configured:
        print(config.cluster.describe())
    if config.quota_store.topic:
        print(f"altered quotas: read from the quota store topic {config.quota_store.topic}")
    if config.proxy.workers > 1:
        print(f"workers: {config.proxy.workers}, sharing every listener port")
    if config.fleet_name:
        print(
            f"fleet: {config.fleet_name}, one budget per quota entity through the topic "
            f"{FLEET_TOPIC_PREFIX}{config.fleet_name}, published every "
            f"{config.fleet.sync_interval_ms} ms"
        )
    if config.shadow:
        keys = ", ".join(quota_type.key for quota_type in QuotaType if quota_type in config.shadow)
        print(f"shadow mode (decided and reported, not enforced): {keys}")
    if not config.hold_principal:
        print("hold: connection (a throttle mutes only the connection it answers, as a broker)")
    for line in effective_quotas(quotas, sources):
        print(line)
    return 0


def _report(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    """The Spark job lives in pipeline/, with pyspark an optional extra."""
    try:
        from pipeline.report import add_arguments, run
    except ImportError as exc:
        print(
            f"kafka-quota-proxy report needs the pipeline extra ({exc}): "
            "pip install 'kafka-quota-proxy[pipeline]'",
            file=sys.stderr,
        )
        return 2
    add_arguments(parser)
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
    return run(parser.parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafka-quota-proxy",
        description="A Kafka-protocol proxy enforcing Kafka's client quotas per principal.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="serve clients in front of the configured cluster")
    run.add_argument("--config", "-c", type=Path, required=True, help="TOML config file")
    run.add_argument("--log-level", default="INFO")
    check = sub.add_parser(
        "check-config", help="validate a config file and print each entity's effective quotas"
    )
    check.add_argument("file", type=Path, help="TOML config file")
    report = sub.add_parser(
        "report",
        help="per-principal usage, recommended quotas and a what-if, from usage samples "
        "(needs the pipeline extra: pyspark)",
    )
    quotas = sub.add_parser(
        "quotas",
        help="describe or alter the proxy's quotas with kafka-configs' flags, every key "
        "included (producer_ids_rate)",
    )
    add_quota_arguments(quotas)
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["report"]:
        return _report(report, args_list[1:])
    args = parser.parse_args(args_list)
    if args.command == "check-config":
        return check_config(args.file)
    if args.command == "quotas":
        return run_quotas(args)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RepeatedLineFilter())
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"kafka-quota-proxy: invalid config\n{exc}", file=sys.stderr)
        return 2
    loop_name = install_event_loop(config.proxy.uvloop)
    log.info("event loop: %s; open files: up to %d", loop_name, raise_open_file_limit())
    workers = config.proxy.workers
    if workers == 1:
        return _run(config, None)

    def announce() -> None:
        log.info("%d workers serve", workers)
        address = f"{config.proxy.advertised}:{config.proxy.bootstrap_port}"
        print(f"kafka-quota-proxy bootstrap: {address}", flush=True)

    return run_workers(workers, lambda worker: _run(config, worker), announce)


def _run(config: ProxyConfig, worker: Worker | None) -> int:
    """One proxy process to its end: the exit code."""
    try:
        asyncio.run(serve(config, worker))
    except ConfigError as exc:
        print(f"kafka-quota-proxy: invalid config\n{exc}", file=sys.stderr)
        return 2
    except (StoreUnreachable, FleetUnreachable) as exc:
        print(f"kafka-quota-proxy: {exc}", file=sys.stderr)
        return 2
    except AuthenticationFailed as exc:
        print(
            f"kafka-quota-proxy: the cluster refused the proxy's own client: {exc}", file=sys.stderr
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
