"""`kafka-quota-proxy`: run the proxy from a config file, check a config file, manage its
quotas, report on its usage, watch who uses the cluster now (top), or say why a client is
slow (explain)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from config.errors import ConfigError, StartupError
from config.loader import ProxyConfig, load_config
from proxy.cli.check_config import check_config
from proxy.cli.explain import add_arguments as add_explain_arguments
from proxy.cli.explain import run as run_explain
from proxy.cli.quotas import add_arguments as add_quota_arguments
from proxy.cli.quotas import run as run_quotas
from proxy.cli.top import DESCRIPTION as TOP_DESCRIPTION
from proxy.cli.top import add_arguments as add_top_arguments
from proxy.cli.top import run as run_top
from proxy.control.cluster import AuthenticationFailed
from proxy.control.fleet_bus import FleetUnreachable
from proxy.control.quota_topic import StoreUnreachable
from proxy.network.garbage import collect_rarely
from proxy.network.loop import install_event_loop
from proxy.network.workers import Worker, run_workers
from proxy.observability.build_info import version_line
from proxy.observability.log_limit import configure_logging
from proxy.process import ProxyProcess

log = logging.getLogger("kafka-quota-proxy")


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


def _into_a_pipe(command: Callable[[], int]) -> int:
    """A command whose reader stopped early (`check-config | head`) ends as Unix tools do,
    with SIGPIPE's status and no traceback."""
    try:
        return command()
    except BrokenPipeError:
        # Python flushes stdout once more at exit, into the same closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafka-quota-proxy",
        description="A Kafka-protocol proxy enforcing Kafka's client quotas per principal.",
    )
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="serve clients in front of the configured cluster")
    run.add_argument("--config", "-c", type=Path, required=True, help="TOML config file")
    run.add_argument("--log-level", default="INFO")
    check = sub.add_parser(
        "check-config", help="validate a config file and print each entity's effective quotas"
    )
    check.add_argument("file", type=Path, help="TOML config file")
    check.add_argument(
        "--offline",
        action="store_true",
        help="the file alone: do not read the quota store's altered quotas from the cluster",
    )
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
    top = sub.add_parser(
        "top",
        help="who uses the cluster now, across the fleet, ranked (a full-screen view)",
        description=TOP_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_top_arguments(top)
    explain = sub.add_parser(
        "explain",
        help="why a client is slow: each quota's entity, rule, value and source, its rate"
        " and throttle now, and what else holds it",
    )
    add_explain_arguments(explain)
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["report"]:
        return _report(report, args_list[1:])
    args = parser.parse_args(args_list)
    if args.command == "check-config":
        return _into_a_pipe(lambda: check_config(args.file, args.offline))
    if args.command == "quotas":
        return _into_a_pipe(lambda: run_quotas(args))
    if args.command == "top":
        return _into_a_pipe(lambda: run_top(args))
    if args.command == "explain":
        return _into_a_pipe(lambda: run_explain(args))
    configure_logging(args.log_level)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(exc.report(), file=sys.stderr)
        return 2
    loop_name = install_event_loop(config.proxy.uvloop)
    collect_rarely()
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
    path = config.path or "config"
    try:
        asyncio.run(ProxyProcess(config, worker).run())
    except ConfigError as exc:
        print(exc.report(), file=sys.stderr)
        return 2
    except (StoreUnreachable, FleetUnreachable) as exc:
        print(StartupError(path, [str(exc)]).report(), file=sys.stderr)
        return 2
    except AuthenticationFailed as exc:
        refused = f"[cluster] key '{exc.key}': the cluster refused the proxy's own client, {exc}"
        print(StartupError(path, [refused]).report(), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
