"""`kafka-quota-proxy`: run the proxy from a config file."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from config.errors import ConfigError
from config.loader import ProxyConfig, load_config
from proxy.server import ProxyServer

log = logging.getLogger("kafka-quota-proxy")


def install_event_loop(use_uvloop: bool) -> str:
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            return "asyncio (uvloop not installed)"
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        return "uvloop"
    return "asyncio"


async def serve(config: ProxyConfig) -> None:
    server = ProxyServer(config.proxy)
    await server.start()
    print(f"kafka-quota-proxy bootstrap: {server.bootstrap_address}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafka-quota-proxy",
        description="A Kafka-protocol proxy enforcing Kafka's client quotas per principal.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="serve clients in front of the configured cluster")
    run.add_argument("--config", "-c", type=Path, required=True, help="TOML config file")
    run.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"kafka-quota-proxy: invalid config\n{exc}", file=sys.stderr)
        return 2
    loop_name = install_event_loop(config.proxy.uvloop)
    log.info("event loop: %s", loop_name)
    asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
