"""`kafka-quota-proxy explain`: why a client is slow, or why it is not (docs/explain.md).

    kafka-quota-proxy explain --config proxy.toml --user alice [--client-id app]
        [--topic orders] [--address 10.0.0.7] [--produce-bytes N] [--fetch-bytes N] [--json]
    kafka-quota-proxy explain --proxy http://member-1:9404 --proxy http://member-2:9404 ...

With --config it reads the file and what kafka-configs altered in the quota store (the
cluster), and says which entity applies, by which rule, with which value and from where.
With --proxy it asks each running member's /explain for the same and for what its sensors
hold now: the rate and its span, the member's part of a fleet's rate, the throttle owed and
the one the next request of the sizes given would get, and the ceilings over the client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from config.errors import ConfigError
from config.loader import load_config
from proxy.control.quota_topic import StoreUnreachable, read_quota_store
from proxy.observability.explaining import query_string, store_sources, words
from quotas.explain import Query, explain
from quotas.settings import QuotaConfig

#: how long a member has to answer
_TIMEOUT_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", type=Path, help="a proxy's config file (and its quota store)")
    where.add_argument(
        "--proxy",
        action="append",
        metavar="URL",
        help="a running member's metrics endpoint (http://HOST:PORT), once per member asked",
    )
    parser.add_argument("--user", required=True, help="the principal's name ('' for none)")
    parser.add_argument("--client-id", default="", help="its client-id ('' for none)")
    parser.add_argument("--topic", help="a topic it writes or reads: the topic's quotas too")
    parser.add_argument("--address", help="its address: the ips entities' connection rate")
    parser.add_argument("--produce-bytes", type=int, help="the next Produce's size: its throttle")
    parser.add_argument("--fetch-bytes", type=int, help="the next Fetch's size: its throttle")
    parser.add_argument("--offline", action="store_true", help="--config's file alone")
    parser.add_argument("--json", action="store_true", help="JSON, not words")


def run(args: argparse.Namespace) -> int:
    query = Query(
        args.user,
        args.client_id,
        args.topic,
        args.address,
        args.produce_bytes,
        args.fetch_bytes,
    )
    if args.proxy:
        answers = []
        for url in args.proxy:
            target = f"{url.rstrip('/')}/explain?{query_string(query)}"
            try:
                with urllib.request.urlopen(target, timeout=_TIMEOUT_S) as response:
                    answers.append(json.load(response))
            except (OSError, ValueError) as exc:
                print(f"kafka-quota-proxy explain: {url} did not answer: {exc}", file=sys.stderr)
                return 2
    else:
        try:
            answers = [_from_config(args.config, query, args.offline)]
        except ConfigError as exc:
            print(exc.report(), file=sys.stderr)
            return 2
        except StoreUnreachable as exc:
            print(f"kafka-quota-proxy explain: the cluster cannot be read: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(answers[0] if len(answers) == 1 else answers, indent=2))
        return 0
    for index, answer in enumerate(answers):
        if index:
            print()
        for line in words(answer):
            print(line)
    return 0


def _from_config(path: Path, query: Query, offline: bool) -> dict[str, Any]:
    config = load_config(path)
    store = asyncio.run(read_quota_store(config, offline))
    quotas = QuotaConfig(config.quotas.settings, store.limits())
    sources = store_sources(store, str(path))
    return explain(query, quotas, sources, ip_rates=store.ip_rates()).as_json()
