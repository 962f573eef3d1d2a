"""`kafka-quota-proxy check-config FILE`: validate a config file and print what it enforces."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from config.effective_quotas import effective_quotas
from config.errors import ConfigError, StartupError
from config.fleet import FLEET_TOPIC_PREFIX, OWNERS_SUFFIX
from config.loader import load_config
from config.proxy_protocol import HeaderMode
from config.tls import describe
from proxy.control.quota_topic import StoreUnreachable, read_quota_store
from quotas.entities import QuotaType
from quotas.settings import QuotaConfig


def check_config(path: Path, offline: bool = False) -> int:
    """`offline`: the file alone, without reading what kafka-configs altered in the quota
    store (a CI job, a chart rendered where the cluster is not)."""
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(exc.report(), file=sys.stderr)
        return 2
    try:  # the file's quotas, and what kafka-configs altered in the cluster unless offline
        store = asyncio.run(read_quota_store(config, offline))
    except StoreUnreachable as exc:
        print(StartupError(path, [str(exc)]).report(), file=sys.stderr)
        return 2
    quotas = QuotaConfig(config.quotas.settings, store.limits())
    # each value's layer is worth naming only where there is more than the file
    sources = store.source if config.quota_store.topic and not offline else None
    print(f"{path}: valid")
    for line in describe(config.listener, config.upstream):
        print(line)
    if config.cluster.configured:
        print(config.cluster.describe())
    if config.sni is not None:
        port = config.sni.advertised_port or config.proxy.bootstrap_port
        print(
            f"routing: sni on port {config.proxy.bootstrap_port}: the bootstrap as "
            f"{config.sni.bootstrap_host}:{port}, broker N as {config.sni.broker_host}:{port}"
        )
    pp = config.proxy_protocol
    modes = {"bootstrap": pp.mode_for(bootstrap=True), "brokers": pp.mode_for(bootstrap=False)}
    if any(mode is not HeaderMode.OFF for mode in modes.values()):
        trusted = ", ".join(str(network) for network in pp.trusted_sources)
        listeners = ", ".join(f"{name} {mode.value}" for name, mode in modes.items())
        print(f"PROXY protocol headers ({listeners}) from {trusted}")
    if config.quota_store.topic:
        read = "not read (--offline)" if offline else "read"
        print(f"altered quotas: {read} from the quota store topic {config.quota_store.topic}")
    if config.proxy.workers > 1:
        print(f"workers: {config.proxy.workers}, sharing every listener port")
    if config.fleet_name:
        print(
            f"fleet: {config.fleet_name}, one budget per quota entity through the topic "
            f"{FLEET_TOPIC_PREFIX}{config.fleet_name}, published every "
            f"{config.fleet.sync_interval_ms} ms"
            + (
                f", each principal's use through its owner ({FLEET_TOPIC_PREFIX}"
                f"{config.fleet_name}{OWNERS_SUFFIX})"
                if config.fleet.owners
                else ""
            )
        )
    if config.shadow:
        keys = ", ".join(quota_type.key for quota_type in QuotaType if quota_type in config.shadow)
        print(f"shadow mode (decided and reported, not enforced): {keys}")
    if not config.hold_principal:
        print("hold: connection (a throttle mutes only the connection it answers, as a broker)")
    if (logins := config.failed_logins) is not None:
        shadow = " (shadow mode: counted, nothing held)" if logins.shadow else ""
        print(
            f"failed-login backoff{shadow}: a user's or client address's next SASL"
            f" authentication waits {logins.first_wait_ms} ms after a refusal, doubling to"
            f" {logins.max_wait_ms} ms"
        )
    for line in effective_quotas(quotas, sources):
        print(line)
    return 0
