"""`kafka-quota-proxy top`: who is using the cluster right now, across the whole fleet.

    kafka-quota-proxy top --config proxy.toml [--sort produce]
    kafka-quota-proxy top --bootstrap-server kafka:9092 --usage-topic kqp-usage \\
        [--command-config client.properties] [--config proxy.toml]
    kafka-quota-proxy top ... --once [--json]

It reads what the fleet already shares through the cluster (proxy/top/: the feed reads, the
view ranks, the text words it, the screen draws it): the usage samples topic for each
principal's use, the quota store topic for the quotas altered with kafka-configs (and a
proxy's config file, with --config, for the file's), the fleet's bus for its members. Full
screen by default; `--once` prints one snapshot, a table or JSON, for scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from config.errors import ConfigError
from config.loader import load_config
from config.usage import UsageSettings
from proxy.cli.quotas import cluster_settings
from proxy.control.own_topic import UNREACHABLE
from proxy.top.feed import LiveFeed, feed_view, now_ms, view_of
from proxy.top.text import bus_state, table, topic_table
from proxy.top.view import DEMAND, MEASURES, SORTS, SPAN_MS, Measure, snapshot
from quotas.store import FILE, QuotaStore

#: how long `--once` reads the fleet's bus: every member publishes several times a second,
#: and each topic in use every interval (proxy/enforcement/fleet.py); the margin lets a
#: member's first interval after a quiet spell arrive
BUS_READ_S = 2.5
#: the most `--once` reads before it prints what it has
ONCE_TIMEOUT_S = 30.0
#: the quota store topic's name in the docs' examples and `make run`'s config
DEFAULT_QUOTA_TOPIC = "kafka-quota-proxy-quotas"


#: `top --help`'s description
DESCRIPTION = """\
Who uses the cluster now, across the fleet: every principal (user, client-id) ranked by
the measure chosen, with its rate, its quota, the share of it used and the share its demand
is (its use over the time its quotas did not hold it), its throttles, connections and the
proxies serving it; the topics under a topic quota below. It reads the proxies' usage
samples topic, the quota store topic and the fleet's bus (docs/monitoring.md).

Keys on the full screen: s / S the next / previous measure, d by demand (each principal at
the quota that holds it back most; a demand marked + is a lower bound), / filter on names,
p pause, Enter a principal's detail (what applies to it and why, as `explain` says, its
APIs, members, addresses, its user's client-ids and a sparkline), Escape back, q quit.
--once prints one snapshot instead, a table or --json.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        help="a proxy's config file: its quotas, and what the options below default to"
        " (its cluster, [cluster] client, [usage] kafka_topic, [quota_store] and [fleet])",
    )
    parser.add_argument("--bootstrap-server", help="HOST:PORT of the cluster")
    parser.add_argument("--command-config", type=Path, help="client properties (SASL, TLS)")
    parser.add_argument("--usage-topic", help="the proxies' [usage] kafka_topic")
    parser.add_argument("--quota-topic", help=f"[quota_store] topic ({DEFAULT_QUOTA_TOPIC})")
    parser.add_argument("--fleet", help="[fleet] name (found when there is one)")
    parser.add_argument(
        "--sort",
        choices=SORTS,
        default=Measure.PRODUCE.key,
        help="the measure ranked by: produce and fetch bytes, request time (as"
        " request_percentage), partition mutations, new producer ids (default: produce); or"
        " demand: each principal at the quota that holds it back most, most held first",
    )
    parser.add_argument("--filter", default="", help="only principals whose names contain it")
    parser.add_argument(
        "--window-s",
        type=float,
        help="how far back to read samples at the start (default: the 10 s span the rates"
        " average over and one sampling interval: the --config file's [usage] interval_s,"
        " else 10 s)",
    )
    parser.add_argument("--once", action="store_true", help="print one snapshot and exit")
    parser.add_argument("--json", action="store_true", help="with --once: JSON, not a table")


def run(args: argparse.Namespace) -> int:
    try:
        feed = feed_for(args)
    except (ConfigError, ValueError, OSError) as exc:
        print(f"kafka-quota-proxy top: {exc}", file=sys.stderr)
        return 2
    if args.once:
        return asyncio.run(_once(feed, args))
    try:  # textual, the `top` extra, is imported only for the screen
        from proxy.top.screen import TopApp
    except ImportError as exc:
        print(
            f"kafka-quota-proxy top needs the top extra for its screen ({exc}): "
            "pip install 'kafka-quota-proxy[top]', or use --once",
            file=sys.stderr,
        )
        return 2
    return TopApp(feed, args).run() or 0


def feed_for(args: argparse.Namespace) -> LiveFeed:
    """What to read, from the options, and where they are not given from the proxy's config
    file: the cluster as the proxy reaches it, as the proxy's own client."""
    store = QuotaStore()
    config = None if args.config is None else load_config(args.config)
    bootstrap, usage_topic = args.bootstrap_server, args.usage_topic
    quota_topic, fleet = args.quota_topic, args.fleet
    cluster = cluster_settings(args.command_config)
    if config is not None:
        store.replace(FILE, config.quota_entries())
        usage = config.usage
        if usage.kafka_bootstrap_servers and (bootstrap is None or usage_topic is None):
            raise ValueError(
                f"{args.config}: [usage] kafka_bootstrap_servers: the samples go to another "
                "cluster than the quota store and the fleet's bus; name --bootstrap-server "
                "and --usage-topic"
            )
        if bootstrap is None:
            bootstrap = ",".join(config.proxy.upstream_bootstrap_servers)
        if args.command_config is None:
            cluster = config.cluster
        usage_topic = usage.kafka_topic if usage_topic is None else usage_topic
        quota_topic = config.quota_store.topic if quota_topic is None else quota_topic
        fleet = config.fleet_name if fleet is None else fleet
    if not bootstrap or not usage_topic:
        raise ValueError(
            "name the cluster and the usage samples topic (--bootstrap-server and "
            "--usage-topic), or a proxy's config file that has them (--config; its [usage] "
            "kafka_topic)"
        )
    read_back_s = args.window_s
    if read_back_s is None:
        interval_s = (UsageSettings() if config is None else config.usage).interval_s
        read_back_s = SPAN_MS / 1000 + interval_s
    return LiveFeed(
        cluster,
        bootstrap.split(","),
        usage_topic,
        DEFAULT_QUOTA_TOPIC if quota_topic is None else quota_topic,
        fleet or "",
        store,
        read_back_s,
        None if config is None else config.quotas.settings,
        str(args.config or ""),
    )


async def _once(feed: LiveFeed, args: argparse.Namespace) -> int:
    view = view_of(feed)
    try:
        await feed.start(int(time.time() * 1000 - feed.read_back_s * 1000))
        # what was there at the start, and BUS_READ_S of the bus
        started = time.monotonic()
        while not await feed.caught_up() or time.monotonic() - started < BUS_READ_S:
            feed_view(view, feed, await feed.poll(timeout_ms=200))
            if time.monotonic() - started > ONCE_TIMEOUT_S:
                feed.problems.append(f"not caught up after {ONCE_TIMEOUT_S:.0f} s: shown as read")
                break
    except UNREACHABLE as exc:
        print(f"kafka-quota-proxy top: the cluster cannot be read: {exc!r}", file=sys.stderr)
        return 2
    finally:
        await feed.close()
    if args.json:
        shown = snapshot(view, args.sort, now_ms(), args.filter)
        shown["bus"] = feed.fleet_topic
        shown["problems"] = feed.problems
        print(json.dumps(shown, indent=2))
    else:
        print(f"# {bus_state(view, feed.fleet_topic, now_ms())}")
        for problem in feed.problems:
            print(f"# {problem}")
        for line in table(view, args.sort, args.filter):
            print(line)
        if args.sort != DEMAND:
            for line in topic_table(view, MEASURES[args.sort], now_ms()):
                print(line)
    return 0
